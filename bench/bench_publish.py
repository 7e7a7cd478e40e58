"""Publish ingest: the official client publishing 200-byte JSON messages to a topic with no
subscribers. Prints messages/s (publish of the first message to the flush ack of the last)
twice: with a config that has no transaction log (pure pub/sub), and with the built-in
default config, whose transaction log records every topic (each message is journalled and
group-fsynced), and that config again with ``--memory`` (journalled in memory, no files).
Target: at least 150,000 messages/s."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import ServerProcess, machine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=300_000)
    args = ap.parse_args()
    import AMPS

    body = '{"id":%08d,"sym":"IBM","qty":100,"px":123.45,"note":"' + "x" * 141 + '"}'
    assert len(body % 1) == 200, len(body % 1)
    import tempfile

    no_txlog = tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False)
    no_txlog.write("<AMPSConfig><Name>bench</Name><Transports><Transport><Name>json-tcp</Name>"
                   "<Type>tcp</Type><InetAddr>127.0.0.1:9007</InetAddr><MessageType>json"
                   "</MessageType><Protocol>amps</Protocol></Transport></Transports></AMPSConfig>")
    no_txlog.close()
    for label, cfg, extra in (("no transaction log", no_txlog.name, []),
                              ("default config, every topic journalled", None, []),
                              ("default config, --memory", None, ["--memory"])):
        with ServerProcess(cfg, extra) as srv:
            c = AMPS.Client("bench-publisher")
            c.connect(srv.uri)
            c.logon(5000)
            for i in range(2000):  # warm-up
                c.publish("warmup", body % i)
            c.flush(10000)
            n = args.messages
            t0 = time.perf_counter()
            for i in range(n):
                c.publish("ingest", body % i)
            c.flush(120_000)
            dt = time.perf_counter() - t0
            c.close()
        print(f"publish ingest ({label}): {n / dt:,.0f} messages/s ({n:,} x 200 B, "
              f"no subscribers, official client, {dt:.2f} s)")
    os.unlink(no_txlog.name)
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
