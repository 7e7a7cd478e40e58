"""Publish ingest A/B: the same no-transaction-log publish bench (``bench_publish.py``'s first
case: the official client, 200-byte JSON messages, no subscribers, no Authentication or
Entitlement block) against several source trees, interleaved round by round in one run, so
every tree meets the same machine load. Prints messages/s and, less sensitive to other
processes on a shared machine, the server process's CPU time per message.

    git worktree add --detach /tmp/before <commit>
    python bench/bench_publish_ab.py --tree before=/tmp/before --tree after=.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import ServerProcess, machine, timed_publish, warm_publisher  # noqa: E402

CONFIG = ("<AMPSConfig><Name>bench</Name><Transports><Transport><Name>json-tcp</Name>"
          "<Type>tcp</Type><InetAddr>127.0.0.1:9007</InetAddr><MessageType>json</MessageType>"
          "<Protocol>amps</Protocol></Transport></Transports></AMPSConfig>")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", action="append", required=True, metavar="LABEL=DIR",
                    help="a source tree to run the server from (repeat: at least two)")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree)
    with tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False) as cfg:
        cfg.write(CONFIG)
    rates: dict[str, list[float]] = {label: [] for label in trees}
    cpu: dict[str, list[float]] = {label: [] for label in trees}
    n = args.messages
    try:
        for r in range(args.rounds):
            for label, root in trees.items():
                with ServerProcess(cfg.name, [], root=Path(root).resolve()) as srv:
                    c = warm_publisher(srv.uri)
                    before = cpu_seconds(srv.proc.pid)
                    dt = timed_publish(c, n)
                    used = cpu_seconds(srv.proc.pid) - before
                    c.close()
                rates[label].append(n / dt)
                cpu[label].append(used / n * 1e6)
                print(f"round {r + 1} {label}: {n / dt:,.0f} messages/s, "
                      f"server CPU {cpu[label][-1]:.2f} us/message", flush=True)
    finally:
        os.unlink(cfg.name)
    for label in trees:
        rs, cs = sorted(rates[label]), sorted(cpu[label])
        print(f"{label}: median {rs[len(rs) // 2]:,.0f} messages/s (best {rs[-1]:,.0f}); "
              f"server CPU median {cs[len(cs) // 2]:.2f} us/message (least {cs[0]:.2f})")
    print(f"machine: {machine()}; load average {open('/proc/loadavg').read().split()[0]}")


if __name__ == "__main__":
    main()
