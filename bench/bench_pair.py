"""A sync HA pair against one instance, in the same run: persisted publish ingest and
persisted-ack latency.

Each set-up runs in subprocesses on the same config (a file journal recording every JSON
topic, group commit + fsync): "single" is one instance without replication; "sync pair" is
instance A replicating to B and B to A, both ``sync``, so A acks a publish only once it is
durable on A *and* B acknowledged it (B's own fsync included). The raw publisher of
``bench_persisted_publish`` drives A: phase 1 as fast as acks come (``--window`` in
flight), phase 2 paced at ``--rate`` for the p50/p99 of the persisted ack."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amps_emulator.pair import free_port, pair_config  # noqa: E402
from bench._support import ServerProcess, machine  # noqa: E402
from bench.bench_persisted_publish import Publisher  # noqa: E402


def run(port: int, n: int, window: int, batch: int, rate: int, seconds: float) -> tuple[float, float, float]:
    """(messages/s, p50 ms, p99 ms) of persisted publishes to ``port``."""
    pub = Publisher(port)
    pub.send_batch(1)  # warm-up: also waits for the pair's link, which gates the first ack
    pub.wait_acked(1)
    t0 = time.perf_counter()
    start = pub.seq
    while pub.seq < start + n:
        pub.wait_window(window)
        pub.send_batch(min(batch, start + n - pub.seq))
    pub.wait_acked(pub.seq)
    dt = time.perf_counter() - t0
    paced_from = pub.seq
    per_batch = 50
    interval = per_batch / rate
    t1 = next_send = time.perf_counter()
    while time.perf_counter() - t1 < seconds:
        now = time.perf_counter()
        if now < next_send:
            time.sleep(next_send - now)
        pub.send_batch(per_batch)
        next_send += interval
    pub.wait_acked(pub.seq)
    lat = pub.latencies(paced_from)
    pub.s.close()
    return n / dt, lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--window", type=int, default=20_000, help="max unacked messages in flight")
    ap.add_argument("--rate", type=int, default=10_000, help="phase 2 messages/s")
    ap.add_argument("--seconds", type=float, default=3.0, help="phase 2 duration")
    args = ap.parse_args()
    figures = {}
    with tempfile.TemporaryDirectory(prefix="amps-bench-pair-") as tmp:
        base = Path(tmp)
        single = base / "single.xml"
        single.write_text(pair_config("S", None, repl_port=0, peer_repl_port=0, data_dir=base / "s",
                                      admin_addr=None))
        with ServerProcess(str(single)) as srv:
            figures["single"] = run(srv.port, args.messages, args.window, args.batch, args.rate, args.seconds)
        ports = free_port(), free_port()
        paths = []
        for i, (name, peer) in enumerate((("A", "B"), ("B", "A"))):
            path = base / f"{name}.xml"
            path.write_text(pair_config(name, peer, repl_port=ports[i], peer_repl_port=ports[1 - i],
                                        data_dir=base / name.lower(), admin_addr=None))
            paths.append(path)
        with ServerProcess(str(paths[1])), ServerProcess(str(paths[0])) as a:
            figures["sync pair"] = run(a.port, args.messages, args.window, args.batch, args.rate,
                                       args.seconds)
    for what, (rate, p50, p99) in figures.items():
        print(f"{what:>9}: persisted publish {rate:,.0f} messages/s ({args.messages:,} x 200 B, "
              f"{args.window:,} in flight); persisted-ack latency at {args.rate:,}/s: "
              f"p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
