"""Queue engine benchmarks: throughput, memory per queued message, recovery (replay) time.

Run: ``python bench/bench_queue.py [--messages N] [--memory-messages N] [--replay-messages N]``

* throughput: an at-least-once queue (LeasePeriod 30s, MaxPerSubscriptionBacklog 10), four
  workers with ``max_backlog=10`` acking in batches of 10 (one comma-list bookmark string
  per batch, as the client's ack batching sends), a publisher enqueueing in bursts of 100.
  Each message costs one ``enqueue``, one ``Deliver`` and one ack; figure = messages fully
  acked per second through the engine alone.
* memory: tracemalloc over building a queue of N queued messages (no subscribers),
  bytes per message (the AMPS User Guide quotes ~200 bytes per queued message). Measured
  for a plain FIFO queue of 1,000,000 messages, and (smaller by default, tracemalloc is
  slow) a queue with Expiration and a Priority queue with distinct priorities.
* replay: ``queues.recovery.replay`` of N ``Enqueue`` events with nothing acked (the events are
  built before timing), seconds and events/s.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from amps_emulator.queues import Deliver, Enqueue, QueueEngine, QueueSpec  # noqa: E402
from amps_emulator.queues.recovery import replay  # noqa: E402


def machine() -> str:
    return (
        f"{platform.platform()} | {platform.processor() or platform.machine()} | "
        f"cpus={os.cpu_count()} | Python {platform.python_version()} "
        f"({platform.python_implementation()})"
    )


def bench_throughput(n: int, workers: int = 4, backlog: int = 10, batch: int = 10) -> float:
    spec = QueueSpec("work", lease_period=30.0, max_per_subscription_backlog=backlog)
    eng = QueueEngine(spec)
    pending: dict[str, list[str]] = {f"w{i}": [] for i in range(workers)}
    acked = 0
    now = 1000.0
    pos = 0

    def absorb(actions) -> None:
        for a in actions:
            if type(a) is Deliver:
                pending[a.sub_key].append(a.bookmark)

    t0 = time.perf_counter()
    for w in pending:
        absorb(eng.add_subscriber(w, now, max_backlog=backlog))
    while acked < n:
        # publisher burst
        for _ in range(min(100, n - pos)):
            pos += 1
            absorb(eng.enqueue(pos, f"77|{pos}|", now))
        # each worker acks what it holds, in batches
        for w, held in pending.items():
            while len(held) >= batch or (held and pos >= n):
                chunk, held[:] = held[:batch], held[batch:]
                acked += len(chunk)
                absorb(eng.ack(w, ",".join(chunk), now))
        now += 0.001
        if eng.next_deadline() is not None and eng.next_deadline() <= now:
            absorb(eng.poll(now))
    dt = time.perf_counter() - t0
    assert eng.depth == 0, eng.depth
    return n / dt


def bench_memory(n: int, **spec_kw) -> float:
    spec = QueueSpec("mem", **spec_kw)
    prio = spec.has_priority
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    eng = QueueEngine(spec)
    enq = eng.enqueue
    for i in range(1, n + 1):
        enq(i, f"13426321568218706041|{1604514133234000000 + i}|", 1000.0 + i * 1e-6,
            priority=(i * 7919) % 1000003 if prio else None)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert eng.depth == n
    return (after - before) / n


def bench_replay(n: int) -> tuple[float, float]:
    spec = QueueSpec("rec", lease_period=30.0, max_per_subscription_backlog=10)
    events = [
        Enqueue(i, f"13426321568218706041|{1604514133234000000 + i}|", 1000.0 + i * 1e-6)
        for i in range(1, n + 1)
    ]
    gc.collect()
    t0 = time.perf_counter()
    eng = replay(QueueEngine(spec), events, now=5000.0)
    eng.poll(5000.0)
    dt = time.perf_counter() - t0
    assert eng.depth == n and eng.low_water_position == 0
    return dt, n / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--memory-messages", type=int, default=1_000_000)
    ap.add_argument("--variant-messages", type=int, default=200_000,
                    help="queue size for the Expiration and Priority memory variants")
    ap.add_argument("--replay-messages", type=int, default=1_000_000)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    rate = bench_throughput(args.messages)
    print(f"throughput (at-least-once, 4 workers, max_backlog=10, ack batches of 10): "
          f"{rate:,.0f} messages/s through the engine ({args.messages:,} messages)")
    for label, n, kw in (
        ("FIFO", args.memory_messages, {}),
        ("FIFO + Expiration", args.variant_messages, {"expiration": 3600.0}),
        ("Priority", args.variant_messages, {"priority": "/p"}),
    ):
        per = bench_memory(n, **kw)
        print(f"memory per queued message ({label}, {n:,} messages, tracemalloc): "
              f"{per:.1f} bytes")
    dt, r = bench_replay(args.replay_messages)
    print(f"recovery: replay of {args.replay_messages:,} unacked messages: {dt:.2f} s "
          f"({r:,.0f} events/s)")


if __name__ == "__main__":
    main()
