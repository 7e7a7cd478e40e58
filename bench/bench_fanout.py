"""Fan-out: one publisher (official client), ten subscribers with ten different filters.

Subscribers are raw sockets in this process that only count frames, so the figure is the
server's delivery rate rather than a client library's callback rate. Each filter is
different and each matches every message, so every publish makes ten deliveries.
Prints deliveries/s and the machine. Target: at least 200,000 deliveries/s."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import ServerProcess, count_frames, machine, raw_subscriber  # noqa: E402

FILTERS = [
    "/qty > 0", "/px < 1000", "/sym = 'IBM'", "/sym IN ('IBM','MSFT')", "/id >= 0",
    "/sym LIKE '^I'", "/qty BETWEEN 1 AND 1000", "/note IS NOT NULL", "/px > 1 AND /qty < 500",
    "NOT (/sym = 'AAPL')",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=50_000)
    args = ap.parse_args()
    import AMPS

    n = args.messages
    body = '{"id":%d,"sym":"IBM","qty":100,"px":123.45,"note":"' + "x" * 120 + '"}'
    with ServerProcess() as srv:
        socks = [raw_subscriber(srv.port, f"fan-sub-{i}", "fan", f) for i, f in enumerate(FILTERS)]
        counts = [0] * len(socks)
        deadline = time.monotonic() + 300

        def drain(i: int) -> None:
            counts[i] = count_frames(socks[i], n, deadline)

        threads = [threading.Thread(target=drain, args=(i,)) for i in range(len(socks))]
        for t in threads:
            t.start()
        c = AMPS.Client("fan-publisher")
        c.connect(srv.uri)
        c.logon(5000)
        t0 = time.perf_counter()
        for i in range(n):
            c.publish("fan", body % i)
        c.flush(120_000)
        for t in threads:
            t.join()
        dt = time.perf_counter() - t0
        c.close()
        for s in socks:
            s.close()
    total = sum(counts)
    print(f"fan-out: {total / dt:,.0f} deliveries/s ({n:,} messages x {len(socks)} filtered "
          f"subscribers, {total:,} delivered, {dt:.2f} s)")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
