"""Fuzz the server for as long as you like while a steady official-client flow runs.

    python bench/bench_fuzz.py                      # 120 s, seed 1, 4 fuzz workers
    python bench/bench_fuzz.py --seconds 600 --seed 7 --workers 6

The same generator as ``tests/integration/robustness/test_fuzz.py`` (``tests/support/fuzz.py``): random bytes,
hostile length prefixes, truncated frames, broken headers, sessions of every command with
edge-case header values (numbers beyond 2^64, pathological and oversized filters and regex
topics, bodies nested 100,000 deep), connections that never log on, subscribers that never
read. Prints the fuzz volume, the steady flow's latency and largest gap between deliveries,
the server's peak RSS, and checks what the test checks: no message of the flow lost, no
stall over a second, no traceback in the server's log.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import machine  # noqa: E402
from tests.support.fuzz import SteadyFlow, config_extra, fuzz_in_process  # noqa: E402
from tests.support.procserver import ProcServer  # noqa: E402
from tests.support.servers import config_xml  # noqa: E402


def _rss_kib(pid: int) -> int:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="amps-fuzz-") as tmp:
        srv = ProcServer.with_config(Path(tmp), lambda d: config_xml(d, extra=config_extra(d)))
        try:
            flow = SteadyFlow(srv.uri).start()
            t0 = time.monotonic()
            stats = fuzz_in_process(srv.port, args.seed, args.seconds, args.workers)
            took = time.monotonic() - t0
            flow.stop()
            alive = srv.proc.poll() is None
            peak = _rss_kib(srv.proc.pid)
        finally:
            srv.stop()
        log = srv.stderr_path.read_text(errors="replace")
    fig = flow.figures()
    print(f"fuzz: seed {args.seed}, {args.workers} workers, {took:.0f} s: {stats.frames:,} "
          f"frames, {stats.bytes / 1e6:,.0f} MB, {stats.connections:,} connections "
          f"({stats.frames / took:,.0f} frames/s)")
    print("  by kind: " + ", ".join(f"{k} {n:,}" for k, n in sorted(stats.kinds.items())))
    print(f"steady flow: {fig['sent']:,} sent, {fig['received']:,} received, latency max "
          f"{fig['max_latency_s'] * 1000:.0f} ms, p99 {fig['p99_latency_s'] * 1000:.0f} ms, "
          f"largest gap between deliveries {fig['max_gap_s'] * 1000:.0f} ms")
    print(f"server: {'alive' if alive else 'DEAD'}, peak RSS {peak / 1024:,.0f} MiB, "
          f"log {len(log.splitlines()):,} lines")
    kinds = collections.Counter(re.sub(r"\[[^\]]*\]|'[^']*'|\d+", "#", line.split(": ", 1)[-1])[:90]
                                for line in log.splitlines())
    print("server log, most frequent lines:")
    for text, n in kinds.most_common(12):
        print(f"  {n:7,}  {text}")
    bad = [w for w in ("Traceback", "Exception in callback", "Unhandled") if w in log]
    ok = alive and fig["received"] == fig["sent"] and fig["max_latency_s"] < 1.0 and not bad
    if bad:
        i = log.find(bad[0])
        print(log[max(0, i - 1500):i + 2500])
    print("result:", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
