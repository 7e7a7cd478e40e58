"""Paced end-to-end latency: a publisher at a steady rate, a subscriber timing each message.

A raw publisher sends ``--rate`` messages/s (~200 B, in bursts of ``--burst`` every
``burst / rate`` seconds) for ``--seconds`` seconds to a topic a raw subscriber in another
process subscribes to. Each body carries the instant it was sent (``time.perf_counter``, the
same monotonic clock in both processes); the subscriber takes each read's arrival time for
the messages it holds, and the latency is the difference: p50, p99 and max, after the first
second (warm-up) is left out.

Targets, in interleaved rounds: the fan-out sink (``bench/sink.py --fanout``: forwards each
publish to the subscriber, does nothing else), the emulator's built-in config (the topic is
journalled: a message is delivered at the end of the loop turn that logged it) and with
``--baseline DIR`` another checkout's. The issue's goal: the emulator's p99 at most 3x the
sink's p99 plus 1 ms.

    python bench/bench_latency.py [--rate 10000] [--seconds 6] [--rounds 2] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import (  # noqa: E402
    RawPeer,
    interleaved,
    launch,
    machine,
    percentiles,
    raw_subscriber,
    side_by_side,
    target_labels,
)

TOPIC = "latency"
PAD = "x" * 150


def _subscriber_main(port: int, n: int) -> None:
    """``--subscribe``: say ready, then time ``n`` messages; print the latencies (s)."""
    try:
        from amps_emulator._speedups import scan_frames
    except ImportError:
        from amps_emulator.protocol.codec import scan_frames_py as scan_frames
    s = raw_subscriber(port, "latency-sub", TOPIC, None)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    print("ready", flush=True)
    out: list[float] = []
    data, need = b"", -1
    s.settimeout(30)
    while len(out) < n:
        chunk = s.recv(1 << 20)
        now = time.perf_counter()
        if not chunk:
            break
        frames, pos, need = scan_frames(data + chunk if data else chunk, need, 1 << 30)
        data = (data + chunk if data else chunk)[pos:]
        for f in frames:
            i = f.find(b'{"sent":', f.find(b"}") + 1)
            if i >= 0:
                out.append(now - float(f[i + 8:f.index(b",", i)]))
    print(json.dumps(out), flush=True)


def _round(target: str, args: argparse.Namespace) -> list[float]:
    n = int(args.rate * args.seconds)
    with launch(target, args.baseline) as srv:
        sub = subprocess.Popen([sys.executable, __file__, "--subscribe", str(srv.port),
                                "--count", str(n)], stdout=subprocess.PIPE, text=True)
        assert sub.stdout is not None
        if sub.stdout.readline().strip() != "ready":
            sub.kill()
            raise RuntimeError("the subscriber did not start")
        pub = RawPeer(srv.port, "latency-pub")
        head = b'{"c":"p","t":"%s"}' % TOPIC.encode()
        gap = args.burst / args.rate
        t_next = time.perf_counter()
        sent = 0
        while sent < n:
            now = time.perf_counter()
            if now < t_next:
                time.sleep(t_next - now)
            parts = []
            for _ in range(min(args.burst, n - sent)):
                body = b'{"sent":%.9f,"pad":"%s"}' % (time.perf_counter(), PAD.encode())
                parts.append((len(head) + len(body)).to_bytes(4, "big") + head + body)
                sent += 1
            pub.s.sendall(b"".join(parts))
            t_next += gap
        lat = json.loads(sub.stdout.readline())
        sub.wait(30)
        pub.close()
    if len(lat) < n:
        raise RuntimeError(f"{target}: {len(lat)} of {n} messages arrived")
    return lat[int(args.rate):]  # the first second is warm-up


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--burst", type=int, default=10, help="messages sent together")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--baseline", type=Path, metavar="DIR",
                    help="also run the emulator of this checkout (before/after)")
    ap.add_argument("--subscribe", type=int, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.subscribe is not None:
        _subscriber_main(args.subscribe, args.count)
        return
    targets = side_by_side(args.baseline)
    best: dict[str, dict[str, float]] = {}
    for r, t in interleaved(targets, args.rounds):
        got = percentiles(_round(t, args))
        print(f"round {r + 1}: {t}: p50 {got['p50'] * 1e3:.2f} ms, p99 "
              f"{got['p99'] * 1e3:.2f} ms, max {got['max'] * 1e3:.2f} ms", flush=True)
        if t not in best or got["p99"] < best[t]["p99"]:
            best[t] = got
    sink = best["sink"]["p99"]
    print(f"\nend-to-end latency at {args.rate:,} msg/s (bursts of {args.burst}), "
          f"{args.seconds:g} s, best p99 of {args.rounds} interleaved rounds")
    print(f"{'target':34} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'p99 / (3 sink p99 + 1 ms)':>26}")
    labels = target_labels(args.baseline)
    for t in targets:
        b = best[t]
        print(f"{labels[t]:34} {b['p50'] * 1e3:>7.2f} {b['p99'] * 1e3:>7.2f} "
              f"{b['max'] * 1e3:>7.2f} {b['p99'] / (3 * sink + 0.001):>25.2f}x")
    print("goal: the emulator's p99 at most 3x the sink's p99 plus 1 ms (a ratio <= 1.00)")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
