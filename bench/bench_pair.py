"""A sync HA pair against one instance, in the same run: persisted publish ingest (and the
ratio of the two) and persisted-ack latency.

Each set-up runs in subprocesses on the same config (a file journal recording every JSON
topic, group commit + fsync): "single" is one instance without replication; "sync pair" is
instance A replicating to B and B to A, both ``sync``, so A acks a publish only once it is
durable on A *and* B acknowledged it (B's own fsync included). All three run throughout; the
raw publisher of ``bench_persisted_publish`` drives them in turn, ``--rounds`` times (single,
then pair, each round with a new publisher): as fast as acks come (``--window`` in flight),
printing each round's messages/s, the servers' CPU per message (user + system, all threads,
from /proc) and the pair's ratio to the single instance, then the median ratio. Last, paced at
``--rate`` for the p50/p99 of the persisted ack. On a machine other work shares, the rounds
differ: the median says more than any one of them."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amps_emulator.pair import free_port, pair_config  # noqa: E402
from bench._support import PersistedPublisher, ServerProcess, machine  # noqa: E402
from bench.bench_persisted_publish import Publisher  # noqa: E402


class NamedPublisher(Publisher):
    """The persisted-publish bench's publisher under a name of its own (a publisher's ``s``
    starts at 1: another name each round, or the server takes them for republished ones)."""

    def __init__(self, port: int, name: str) -> None:
        PersistedPublisher.__init__(self, port, name)
        self.send_times = []


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` so far (Linux; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ingest(port: int, name: str, n: int, window: int, batch: int,
           pids: list[int]) -> tuple[float, list[float]]:
    """(messages/s, CPU microseconds per message of each of ``pids``) of ``n`` persisted
    publishes to ``port``, at most ``window`` unacknowledged."""
    pub = NamedPublisher(port, name)
    pub.send_batch(1)  # warm-up: also waits for the pair's link, which gates the first ack
    pub.wait_acked(1)
    cpu0 = [cpu_seconds(p) for p in pids]
    t0 = time.perf_counter()
    start = pub.seq
    while pub.seq < start + n:
        pub.wait_window(window)
        pub.send_batch(min(batch, start + n - pub.seq))
    pub.wait_acked(pub.seq)
    dt = time.perf_counter() - t0
    cpu = [(cpu_seconds(p) - c) / n * 1e6 for p, c in zip(pids, cpu0, strict=True)]
    pub.s.close()
    return n / dt, cpu


def latency(port: int, name: str, rate: int, seconds: float) -> tuple[float, float]:
    """(p50, p99) milliseconds of the persisted ack, publishing at ``rate`` for ``seconds``."""
    pub = NamedPublisher(port, name)
    pub.send_batch(1)
    pub.wait_acked(1)
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
    return lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--window", type=int, default=20_000, help="max unacked messages in flight")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=int, default=10_000, help="latency phase: messages/s")
    ap.add_argument("--seconds", type=float, default=3.0, help="latency phase: duration")
    args = ap.parse_args()
    n = args.messages
    with tempfile.TemporaryDirectory(prefix="amps-bench-pair-") as tmp:
        base = Path(tmp)
        single = base / "single.xml"
        single.write_text(pair_config("S", None, repl_port=0, peer_repl_port=0, data_dir=base / "s",
                                      admin_addr=None))
        ports = free_port(), free_port()
        paths = []
        for i, (name, peer) in enumerate((("A", "B"), ("B", "A"))):
            path = base / f"{name}.xml"
            path.write_text(pair_config(name, peer, repl_port=ports[i], peer_repl_port=ports[1 - i],
                                        data_dir=base / name.lower(), admin_addr=None))
            paths.append(path)
        with ServerProcess(str(single)) as s, ServerProcess(str(paths[1])) as b, \
                ServerProcess(str(paths[0])) as a:
            ratios = []
            print(f"{n:,} persisted publishes of 200 B a round, {args.window:,} in flight")
            for r in range(1, args.rounds + 1):
                one, (cpu_s,) = ingest(s.port, f"single-{r}", n, args.window, args.batch, [s.proc.pid])
                two, (cpu_a, cpu_b) = ingest(a.port, f"pair-{r}", n, args.window, args.batch,
                                             [a.proc.pid, b.proc.pid])
                ratios.append(two / one)
                print(f"round {r}: single {one:,.0f} messages/s ({cpu_s:.2f} us CPU/message); "
                      f"sync pair {two:,.0f} messages/s (A {cpu_a:.2f}, B {cpu_b:.2f} us CPU/message); "
                      f"pair/single {two / one:.2f}")
            print(f"pair/single, median of {args.rounds}: {statistics.median(ratios):.2f}")
            for what, port in (("single", s.port), ("sync pair", a.port)):
                p50, p99 = latency(port, f"paced-{what}", args.rate, args.seconds)
                print(f"{what:>9}: persisted-ack latency at {args.rate:,}/s: p50 {p50:.2f} ms, "
                      f"p99 {p99:.2f} ms")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
