"""Query and replay streaming: a ``sow`` and a replay to a reader that only counts frames.

Two servers with the built-in config (the ``orders`` SOW topic keyed on ``/id``, every topic
in the transaction log) are loaded by a raw publisher (~200 B messages; the last publish waits
for its persisted ack): one with ``--sow-records`` distinct orders, the other with
``--replay-records`` messages of another topic (so that the replay reads a log of its topic
alone). Then, timed from the command's send to its ``completed`` ack:

* ``sow`` of ``orders`` (every record, ``batch_size`` ``--batch``: 10 is the official
  clients' default), records/s = records returned / time;
* a bookmark subscription from EPOCH to the other topic, which replays the whole log,
  records/s = messages replayed / time.

The reader (:class:`bench._support.FrameCounter`) reads 1 MiB at a time and counts frames,
so the figure is what the server streams, not what a client library parses. Each figure is
the best of ``--repeat`` runs; with ``--baseline DIR`` the same is measured for another
checkout's server (``git worktree add --detach DIR main``) in the same run, in turns with
this one's (all servers loaded first; each round in the other order), and the ratios
printed. The goal (issue 36): at least 1,000,000 records/s each.

    python bench/bench_streaming.py [--sow-records 200000] [--replay-records 300000]
                                    [--batch 10] [--repeat 3] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import FrameCounter, ServerProcess, frame, machine  # noqa: E402

ORDER = b'{"id":%d,"sym":"IBM","qty":100,"px":123.45,"note":"' + b"x" * 130 + b'"}'
REPLAYED = "replayed"


def _logged_on(port: int, name: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(frame({"c": "logon", "cid": "l", "client_name": name, "a": "processed"}))
    counts, _, _ = FrameCounter().run([s], 1, time.monotonic() + 30)
    if counts != [1]:
        raise RuntimeError("no logon ack")
    s.setblocking(True)
    return s


def fill(port: int, topic: str, n: int) -> None:
    """Publish ``n`` messages to ``topic``; return once they are persisted."""
    s = _logged_on(port, "filler")
    head = b'{"c":"p","t":"%s"}' % topic.encode()
    for start in range(0, n - 1, 5000):
        s.sendall(b"".join((len(head) + len(ORDER % i)).to_bytes(4, "big") + head + ORDER % i
                           for i in range(start, min(n - 1, start + 5000))))
    # the last one waits for its persisted ack
    s.sendall(frame({"c": "p", "t": topic, "a": "persisted", "s": 1}, ORDER % (n - 1)))
    FrameCounter().run([s], 1, time.monotonic() + 600, lambda f: b'"persisted"' in f)
    s.close()


def _timed(port: int, command: dict, what: str) -> tuple[float, dict]:
    """Seconds from sending ``command`` to its ``completed`` ack, and that ack's header."""
    s = _logged_on(port, f"streaming-{what}")
    acks: list[bytes] = []

    def completed(payload: bytes) -> bool:
        if payload.startswith(b'{"c":"ack"') and b'"completed"' in payload:
            acks.append(payload)
            return True
        return False

    t0 = time.perf_counter()
    s.sendall(frame(command))
    counts, _, last = FrameCounter().run([s], 1 << 62, time.monotonic() + 600, completed)
    s.close()
    if not acks:
        raise RuntimeError(f"{what}: no completed ack ({counts[0]} frames)")
    head = acks[0][:acks[0].index(b"}") + 1]
    return last - t0, {"frames": counts[0], **json.loads(head)}


def measure(sow_port: int, replay_port: int, args: argparse.Namespace,
            best: dict[str, float]) -> None:
    """One ``sow`` and one replay; ``best`` keeps the best records/s of each."""
    dt, ack = _timed(sow_port, {"c": "sow", "cid": "q", "t": "orders", "a": "completed",
                                "batch_size": args.batch}, "sow")
    n = int(ack.get("records_returned", 0))
    if n != args.sow_records:
        raise RuntimeError(f"sow returned {n} of {args.sow_records}: {ack}")
    best["sow"] = max(best.get("sow", 0.0), n / dt)
    dt, ack = _timed(replay_port, {"c": "subscribe", "cid": "r", "sub_id": "r", "t": REPLAYED,
                                   "bookmark": "0", "a": "completed"}, "replay")
    n = ack["frames"] - 1  # every frame but the completed ack is a message
    if n != args.replay_records:
        raise RuntimeError(f"replayed {n} of {args.replay_records}")
    best["replay"] = max(best.get("replay", 0.0), n / dt)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sow-records", type=int, default=200_000)
    ap.add_argument("--replay-records", type=int, default=300_000)
    ap.add_argument("--batch", type=int, default=10, help="the sow's batch_size")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", type=Path, metavar="DIR",
                    help="also measure the server of this checkout (before/after)")
    args = ap.parse_args()
    results: dict[str, dict[str, float]] = {}
    targets = [("emulator", None)] + ([("baseline", args.baseline)] if args.baseline else [])
    servers: list[tuple[ServerProcess, ServerProcess]] = []
    try:
        for _, root in targets:  # all loaded first, then measured in turns
            sow_srv, replay_srv = ServerProcess(root=root), ServerProcess(root=root)
            servers.append((sow_srv, replay_srv))
            fill(sow_srv.port, "orders", args.sow_records)
            fill(replay_srv.port, REPLAYED, args.replay_records)
        for r in range(args.repeat):
            turns = list(zip(targets, servers, strict=True))
            for (label, _), (sow_srv, replay_srv) in turns if r % 2 == 0 else turns[::-1]:
                measure(sow_srv.port, replay_srv.port, args, results.setdefault(label, {}))
                print(f"round {r + 1}: {label}: sow {results[label]['sow']:,.0f} records/s, "
                      f"replay {results[label]['replay']:,.0f} records/s (best so far)", flush=True)
    finally:
        for pair in servers:
            for srv in pair:
                srv.stop()
    print(f"\nstreaming to a frame-counting reader, best of {args.repeat} (built-in config; "
          f"sow batch_size {args.batch}):")
    print(f"{'target':40} {'sow rec/s':>12} {'replay rec/s':>13}")
    for label, _ in targets:
        r = results[label]
        name = "emulator" if label == "emulator" else f"emulator [baseline {args.baseline}]"
        print(f"{name:40} {r['sow']:>12,.0f} {r['replay']:>13,.0f}")
    if args.baseline:
        e, b = results["emulator"], results["baseline"]
        print(f"{'ratio to the baseline':40} {e['sow'] / b['sow']:>11.2f}x "
              f"{e['replay'] / b['replay']:>12.2f}x")
    print(f"goal: 1,000,000 records/s each; sow of {args.sow_records:,}, replay of "
          f"{args.replay_records:,} from EPOCH")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
