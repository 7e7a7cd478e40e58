"""Fan-out: one publisher, many subscribers, against a do-nothing fan-out sink in the same run.

The official Python client publishes ``--messages`` ~190-byte JSON messages to one topic that
``--subscribers`` raw subscribers (one connection each) subscribe to; each publish makes one
delivery per subscriber. The subscribers live in a process of their own that only counts
frames (:class:`bench._support.FrameCounter`), so the figure is the server's delivery rate
rather than a client library's callback rate. Deliveries/s run from the first publish to the
last delivery read; the server's CPU time over that span, per delivery, is printed beside
(steadier than the rate on a machine shared with other work).

Targets, in interleaved rounds (best of ``--rounds``; every other round in reverse
order): the fan-out sink (``bench/sink.py --fanout``: a Python asyncio+uvloop server that
acknowledges subscriptions and forwards each publish to them, framing a ``p`` per subscriber
and writing once per read; no filter, no journal, no bookmark), the emulator's built-in
config (every topic journalled), and with ``--baseline DIR`` the emulator of another checkout
(``git worktree add --detach DIR main``). Ratios are to the sink.

``--filter TEXT``: every subscriber subscribes with that filter (it must match every message:
the figure stays the delivery rate); ``--distinct`` makes the subscribers' filters differ
(``TEXT AND /id >= -i``), so none can be evaluated for another. The sink ignores filters.

    python bench/bench_fanout.py [--messages 100000] [--subscribers 20] [--rounds 2]
                                 [--filter "/qty > 0" [--distinct]] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import (  # noqa: E402
    FrameCounter,
    cpu_seconds,
    interleaved,
    launch,
    machine,
    raw_subscriber,
    side_by_side,
    target_labels,
    warm_publisher,
)

BODY = '{"id":%d,"sym":"IBM","qty":100,"px":123.45,"note":"' + "x" * 120 + '"}'
TOPIC = "fan"


def _reader_main(port: int, subscribers: int, n: int, filt: str | None, distinct: bool) -> None:
    """``--reader``: subscribe, say ready, count every delivery; print the counts and times."""
    socks = [raw_subscriber(port, f"fan-sub-{i}", TOPIC,
                            f"({filt}) AND /id >= -{i}" if filt and distinct else filt)
             for i in range(subscribers)]
    print("ready", flush=True)
    counts, first, last = FrameCounter().run(socks, n, time.monotonic() + 600)
    print(json.dumps({"counts": counts, "first": first, "last": last}), flush=True)
    for s in socks:
        s.close()


def _round(target: str, args: argparse.Namespace) -> tuple[float, float]:
    """(deliveries/s, server CPU microseconds a delivery) of one round of ``target``."""
    n = args.messages
    with launch(target, args.baseline) as srv:
        pub = warm_publisher(srv.uri, "fan-publisher")
        cmd = [sys.executable, __file__, "--reader", str(srv.port), "--subscribers",
               str(args.subscribers), "--messages", str(n)]
        if args.filter:
            cmd += ["--filter", args.filter] + (["--distinct"] if args.distinct else [])
        reader = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert reader.stdout is not None
        if reader.stdout.readline().strip() != "ready":
            reader.kill()
            raise RuntimeError("the reader did not start")
        cpu0 = cpu_seconds(srv.proc.pid)
        t0 = time.perf_counter()
        for i in range(n):
            pub.publish(TOPIC, BODY % i)
        pub.flush(120_000)
        out = json.loads(reader.stdout.readline())
        cpu = cpu_seconds(srv.proc.pid) - cpu0
        reader.wait(30)
        pub.close()
    total = sum(out["counts"])
    if total != n * args.subscribers:
        print(f"  {target}: {total:,} of {n * args.subscribers:,} deliveries arrived", flush=True)
    return total / (out["last"] - t0), cpu / max(total, 1) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--subscribers", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--filter", help="every subscriber's filter (must match every message)")
    ap.add_argument("--distinct", action="store_true", help="a different filter per subscriber")
    ap.add_argument("--baseline", type=Path, metavar="DIR",
                    help="also run the emulator of this checkout (before/after)")
    ap.add_argument("--reader", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.reader is not None:
        _reader_main(args.reader, args.subscribers, args.messages, args.filter, args.distinct)
        return
    targets = side_by_side(args.baseline)
    best: dict[str, float] = {}
    cpu_best: dict[str, float] = {}
    for r, t in interleaved(targets, args.rounds):
        rate, cpu = _round(t, args)
        best[t] = max(best.get(t, 0.0), rate)
        cpu_best[t] = min(cpu_best.get(t, cpu), cpu)
        print(f"round {r + 1}: {t}: {rate:,.0f} deliveries/s, server CPU {cpu:.2f} us "
              f"a delivery", flush=True)
    what = "no filter" if not args.filter else \
        f"filter {args.filter!r}" + (", distinct per subscriber" if args.distinct else ", the same for all")
    print(f"\nfan-out: 1 publisher (official client) x {args.messages:,} messages to "
          f"{args.subscribers} subscribers ({what}), best of {args.rounds} interleaved rounds")
    print(f"{'target':34} {'deliveries/s':>13} {'vs sink':>8} {'CPU us/delivery':>16}")
    labels = target_labels(args.baseline)
    for t in targets:
        print(f"{labels[t]:34} {best[t]:>13,.0f} {best[t] / best['sink']:>7.2f}x "
              f"{cpu_best[t]:>16.2f}")
    print("(CPU us/delivery: the server process's CPU time during the timed publishes, all "
          "threads, best round)")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
