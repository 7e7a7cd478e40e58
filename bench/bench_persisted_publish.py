"""Persisted publishes end to end with the default (group-commit, fsync) durability.

A raw-socket publisher sends 200-byte JSON publishes with ``a=persisted`` and a sequence
number, in batches, while a reader thread timestamps the cumulative persisted acks.

Phase 1 (throughput): as fast as the server acks, with up to ``--window`` messages in
flight; prints messages/s from the first send to the ack of the last message.
Phase 2 (latency): paced at ``--rate`` messages/s for ``--seconds``; prints the persisted-ack
latency p50 and p99 (send of a message to the ack that covers it). A latency taken in
phase 1 would only measure the window.
Targets: at least 100,000 messages/s; p99 at most 10 ms."""

from __future__ import annotations

import argparse
import sys
import time
from bisect import bisect_left
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import PersistedPublisher, ServerProcess, machine  # noqa: E402


class Publisher(PersistedPublisher):
    def __init__(self, port: int) -> None:
        super().__init__(port, "persist-bench")
        self.send_times: list[tuple[int, float, float]] = []  # (last seq, perf_counter, time)

    def send_batch(self, count: int) -> None:
        parts = []
        for _ in range(count):
            self.seq += 1
            parts.append(b'{"c":"p","t":"persisted","a":"persisted","s":%d}' % self.seq
                         + BODY % self.seq)
        self.send_times.append((self.seq, time.perf_counter(), time.time()))
        self.send_payloads(parts)

    def latencies(self, after_seq: int, at_socket: bool = False) -> list[float]:
        """Seconds from the send of each message after ``after_seq`` to the ack covering it:
        as the reader thread read it, or (``at_socket``, Linux) as the kernel received it."""
        acks = self.ack_arrivals if at_socket else self.ack_times
        if acks is None:
            return []
        ack_seqs = [a for a, _ in acks]
        out = []
        prev = after_seq
        for last, t_perf, t_wall in self.send_times:
            if last <= after_seq:
                continue
            i = bisect_left(ack_seqs, last)
            out.extend([acks[i][1] - (t_wall if at_socket else t_perf)] * (last - prev))
            prev = last
        return sorted(out)


BODY = b'{"id":%8d,"sym":"IBM","qty":100,"px":123.45,"note":"' + b"x" * 141 + b'"}'


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--window", type=int, default=20_000, help="max unacked messages in flight")
    ap.add_argument("--rate", type=int, default=50_000, help="phase 2 messages/s")
    ap.add_argument("--seconds", type=float, default=3.0, help="phase 2 duration")
    args = ap.parse_args()
    assert len(BODY % 1) == 200
    n = args.messages
    with ServerProcess() as srv:
        pub = Publisher(srv.port)
        t0 = time.perf_counter()
        while pub.seq < n:
            pub.wait_window(args.window)
            pub.send_batch(min(args.batch, n - pub.seq))
        pub.wait_acked(n)
        dt = time.perf_counter() - t0
        # Phase 2: paced, batches of 50 at the requested rate.
        start_seq = pub.seq
        per_batch = 50
        interval = per_batch / args.rate
        t1 = time.perf_counter()
        next_send = t1
        while time.perf_counter() - t1 < args.seconds:
            now = time.perf_counter()
            if now < next_send:
                time.sleep(next_send - now)
            pub.send_batch(per_batch)
            next_send += interval
        pub.wait_acked(pub.seq)
        lat = pub.latencies(start_seq)
        pub.s.close()
    p50, p99 = lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000
    print(f"persisted publish: {n / dt:,.0f} messages/s ({n:,} x 200 B, group commit + fsync, "
          f"{args.window:,} in flight)")
    print(f"persisted-ack latency at {args.rate:,} messages/s: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
