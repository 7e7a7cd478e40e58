"""What the transport costs: the same traffic over tcp, tcps, ws and wss.

* The official Python client publishing 200-byte JSON messages (no subscribers), flush ack of
  the last one: messages/s over ``tcp://`` and ``tcps://``.
* The official JavaScript client under Node (``tests/js``, ``npm ci`` there first): one client
  publishing, another subscribed, until the subscriber has every message: messages/s over
  ``ws://`` and ``wss://``.

The server runs in its own process with one transport of each kind and a throwaway
self-signed certificate."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import ROOT, ServerProcess, machine, timed_publish, warm_publisher  # noqa: E402

JS_BENCH = r"""
const amps = require('amps');
(async () => {
  const [uri, n] = [process.argv.at(-2), Number(process.argv.at(-1))];
  const sub = new amps.Client('bench-sub'), pub = new amps.Client('bench-pub');
  await sub.connect(uri); await pub.connect(uri);
  let got = 0, done;
  const all = new Promise((r) => { done = r; });
  await sub.subscribe(() => { if (++got === n) done(); }, 'bench');
  const body = '{"id":1,"sym":"IBM","qty":100,"px":123.45,"note":"' + 'x'.repeat(148) + '"}';
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) pub.publish('bench', body);
  await all;
  const dt = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ n, seconds: dt }));
  await sub.disconnect(); await pub.disconnect();
  process.exit(0);
})();
"""


def config(cert: Path, key: Path) -> str:
    tls = f"<Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>"
    rows = [("tcp", "amps", ""), ("tcps", "amps", tls), ("tcp", "websocket", ""),
            ("tcps", "websocket", tls)]
    transports = "".join(
        f"<Transport><Name>t{i}</Name><Type>{t}</Type><InetAddr>127.0.0.1:0</InetAddr>"
        f"<MessageType>json</MessageType><Protocol>{p}</Protocol>{x}</Transport>"
        for i, (t, p, x) in enumerate(rows))
    return f"<AMPSConfig><Name>bench</Name><Transports>{transports}</Transports></AMPSConfig>"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000, help="Python client publishes")
    ap.add_argument("--js-messages", type=int, default=50_000, help="JavaScript client pub/sub")
    args = ap.parse_args()
    import AMPS

    from tests.support.tls import self_signed

    with tempfile.TemporaryDirectory(prefix="amps-bench-tls-") as d:
        cert, key = self_signed(Path(d))
        cfg = Path(d) / "transports.xml"
        cfg.write_text(config(cert, key))
        AMPS.ssl_init()
        AMPS.ssl_set_verify(1)
        AMPS.ssl_load_verify_locations(str(cert), None)
        # --listen rebinds the first transport only; the others already ask for port 0
        with ServerProcess(str(cfg)) as srv:
            line_uris = srv.ready_uris
            for uri in line_uris[:2]:
                c = warm_publisher(uri, f"bench-{uri[:4]}")
                dt = timed_publish(c, args.messages)
                c.close()
                print(f"{uri.split(':')[0]}: Python client publish ingest {args.messages / dt:,.0f} "
                      f"messages/s ({args.messages:,} x 200 B, {dt:.2f} s)")
            js_dir = ROOT / "tests" / "js"
            if not (js_dir / "node_modules" / "amps").is_dir():
                print("ws/wss: skipped (run `npm ci` in tests/js)")
            else:
                for uri in line_uris[2:]:
                    out = subprocess.run(
                        ["node", "-e", JS_BENCH, uri, str(args.js_messages)], cwd=js_dir,
                        capture_output=True, text=True, timeout=600,
                        env={**os.environ, "NODE_EXTRA_CA_CERTS": str(cert)})
                    if out.returncode != 0 or not out.stdout.strip():
                        print(f"{uri}: the JavaScript bench failed: {out.stderr[-800:]}")
                        continue
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                    print(f"{uri.split(':')[0]}: JavaScript client publish -> subscriber "
                          f"{r['n'] / r['seconds']:,.0f} messages/s ({r['n']:,} x 200 B, "
                          f"{r['seconds']:.2f} s)")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
