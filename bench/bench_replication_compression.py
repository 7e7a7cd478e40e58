"""Bytes on a replication link with and without ``Compression``, in the same run.

Instance A replicates (``sync``) to B through a proxy that counts what A writes to B. A raw
publisher sends ``--messages`` persisted publishes of varied JSON orders to A; each set-up
(compression disabled, ``zlib``, ``zstd``) runs on fresh data in subprocesses, and the figures
are printed beside the uncompressed baseline: bytes on the wire from A to B (the records, the
hello, the compression switch), bytes per message, the ratio to the baseline, and persisted
publishes per second (every ack waits for B, so the rate includes compressing on A and
decompressing on B).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amps_emulator.pair import free_port, pair_config  # noqa: E402
from bench._support import PersistedPublisher, ServerProcess, machine  # noqa: E402
from tests.support.faultproxy import Proxies  # noqa: E402

SYMBOLS = [f"SYM{i:03d}" for i in range(200)]
TRADERS = [f"trader-{i:02d}" for i in range(40)]


def orders(n: int, seed: int = 7) -> list[bytes]:
    """``n`` order messages of the shape a trading topic carries (~180 bytes, varied values)."""
    rng = random.Random(seed)
    return [(b'{"id":%d,"symbol":"%s","side":"%s","qty":%d,"price":%.2f,"trader":"%s",'
             b'"account":"ACC-%05d","venue":"%s","status":"%s","ts":%d}'
             % (i, rng.choice(SYMBOLS).encode(), rng.choice((b"buy", b"sell")), rng.randrange(1, 10_000),
                rng.uniform(1, 500), rng.choice(TRADERS).encode(), rng.randrange(100_000),
                rng.choice((b"XNYS", b"XNAS", b"BATS", b"ARCX")), rng.choice((b"new", b"partial", b"filled")),
                1_700_000_000_000 + i * 137)) for i in range(n)]


def run(base: Path, compression: str | None, bodies: list[bytes], batch: int, window: int) -> tuple[int, float]:
    """(bytes from A to B on the wire, persisted publishes per second) for one set-up."""
    a_port, b_port = free_port(), free_port()
    b_xml = base / "B.xml"
    b_xml.write_text(pair_config("B", "A", repl_port=b_port, peer_repl_port=a_port, data_dir=base / "b",
                                 admin_addr=None, sync_type="async"))
    with ServerProcess(str(b_xml)):
        proxies = Proxies()
        proxy = proxies.add("A>B", b_port)
        a_text = pair_config("A", "B", repl_port=a_port, peer_repl_port=proxy.port, data_dir=base / "a",
                             admin_addr=None, sync_type="sync")
        if compression is not None:
            a_text = a_text.replace("<SyncType>sync</SyncType>", "<SyncType>sync</SyncType><Compression>"
                                    f"enabled</Compression><CompressionType>{compression}</CompressionType>", 1)
        a_xml = base / "A.xml"
        a_xml.write_text(a_text)
        try:
            with ServerProcess(str(a_xml)) as a:
                pub = PersistedPublisher(a.port, "compression-bench")
                t0 = time.perf_counter()
                for start in range(0, len(bodies), batch):
                    pub.wait_window(window)
                    parts = []
                    for body in bodies[start:start + batch]:
                        pub.seq += 1
                        parts.append(b'{"c":"p","t":"orders","a":"persisted","s":%d}' % pub.seq + body)
                    pub.send_payloads(parts)
                pub.wait_acked(pub.seq)
                elapsed = time.perf_counter() - t0
                pub.s.close()
        finally:
            proxies.close()
        return proxy.bytes_up, len(bodies) / elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--window", type=int, default=10_000, help="max unacked publishes in flight")
    args = ap.parse_args()
    bodies = orders(args.messages)
    body_bytes = sum(map(len, bodies))
    figures: dict[str, tuple[int, float]] = {}
    with tempfile.TemporaryDirectory(prefix="amps-bench-repl-z-") as tmp:
        for setup in (None, "zlib", "zstd"):
            base = Path(tmp) / (setup or "plain")
            base.mkdir()
            figures[setup or "disabled"] = run(base, setup, bodies, args.batch, args.window)
    baseline = figures["disabled"][0]
    print(f"{args.messages:,} persisted publishes to A, {body_bytes / args.messages:.0f} B bodies "
          f"({body_bytes:,} B), A replicating (sync) to B:")
    for what, (wire, rate) in figures.items():
        print(f"  Compression {what:>8}: {wire:>12,} B on the wire A->B ({wire / args.messages:6.1f} B/message, "
              f"{wire / baseline:6.1%} of uncompressed); {rate:9,.0f} persisted publishes/s")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
