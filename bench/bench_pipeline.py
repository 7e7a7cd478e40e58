"""Benchmark: the ``amps-journal`` Spark source and the ``export`` job on a 1,000,000-record journal.

Writes N JSON records (~100-byte bodies, 8 publishers, 4 topics; default 1,000,000,
``--records`` to change) with FileJournal in 64 MiB segments (as the server does, with
summaries, so splits follow the sparse index), then, in one Spark session per core count:

* rows/s of a full scan of ``amps-journal`` (``count`` of every row after decoding all
  columns: ``DataFrame.foreach``-free, via ``selectExpr("sum(length(data))")`` so every row is
  built) on one core and on two; the ratio is the scaling (target: >= 1.8x). "One core" is a
  child process pinned to one CPU (``sched_setaffinity``, inherited by Spark's JVM and Python
  workers) running ``local[1]``: ``local[1]`` alone is one task slot, yet its JVM and its
  Python worker still run side by side on two CPUs, so it is printed too, for reference;
* rows/s of ``export`` to Parquet partitioned by topic and date with ``local[2]``.

Prints the machine line first. The figures depend on what else the machine runs.

    python bench/bench_pipeline.py [--records N] [--split-mb 16]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from amps_emulator.journal import FileJournal  # noqa: E402


def build(path: str, n: int) -> None:
    j, _ = FileJournal.open(path, segment_size=64 * 1024 * 1024)
    topics = ["orders", "trades", "quotes", "positions"]
    names = [f"publisher-{k}" for k in range(8)]
    pad = "x" * 60
    for i in range(n):
        j.append(topic=topics[i & 3], client_name=names[i & 7], client_seq=i + 1,
                 body=b'{"id":%d,"px":%d,"pad":"%s"}' % (i, i % 997, pad.encode()), message_type="json")
        if i % 2000 == 1999:
            j.flush()
            j.sync()
    j.flush()
    j.sync()
    j.close()


def session(cores: int):
    from amps_emulator.pipeline.session import make_session

    return make_session(f"local[{cores}]", f"bench-{cores}", progress=False,
                        conf={"spark.sql.shuffle.partitions": str(2 * cores),
                              "spark.driver.memory": "2g"})


def scan(spark, journal: str, split_mb: int) -> float:
    df = spark.read.format("amps-journal").option("path", journal) \
        .option("splitBytes", str(split_mb << 20)).load()
    df.selectExpr("count(*)").collect()  # warm up: Python workers, page cache
    t = time.perf_counter()
    rows = df.selectExpr("count(*) AS n", "sum(length(data)) AS b", "count(distinct topic) AS t").first()
    return rows.n / (time.perf_counter() - t)


def pinned_scan(journal: str, split_mb: int) -> float:
    """rows/s of ``local[1]`` in a child process pinned to one CPU (JVM included)."""
    import subprocess

    cpu = min(os.sched_getaffinity(0))
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--scan-only", journal, "--split-mb", str(split_mb)],
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}), capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--split-mb", type=int, default=16, help="target split size (MiB)")
    ap.add_argument("--scan-only", metavar="JOURNAL", help=argparse.SUPPRESS)  # the pinned child
    args = ap.parse_args()
    if args.scan_only:
        spark = session(1)
        print(scan(spark, args.scan_only, args.split_mb))
        spark.stop()
        return
    from bench._support import machine

    print(f"machine: {machine()}")
    tmp = tempfile.mkdtemp(prefix="bench-pipeline-")
    try:
        journal = os.path.join(tmp, "journal")
        t = time.perf_counter()
        build(journal, args.records)
        size = sum(os.path.getsize(os.path.join(journal, f)) for f in os.listdir(journal))
        print(f"journal: {args.records:,} records, {size / 1e6:,.0f} MB, written in {time.perf_counter() - t:.1f} s")
        rates = {}
        one = pinned_scan(journal, args.split_mb)
        print(f"amps-journal scan, 1 core (local[1], pinned to one CPU): {one:,.0f} rows/s")
        for cores in (1, 2):
            spark = session(cores)
            rates[cores] = scan(spark, journal, args.split_mb)
            print(f"amps-journal scan, local[{cores}]{'' if cores == 2 else ' (unpinned)'}: "
                  f"{rates[cores]:,.0f} rows/s")
            if cores == 2:
                from amps_emulator.pipeline import jobs

                t = time.perf_counter()
                n = jobs.export(spark, journal, os.path.join(tmp, "export"), "parquet")
                dt = time.perf_counter() - t
                print(f"export to Parquet by topic/date, local[2]: {n / dt:,.0f} rows/s ({n:,} rows, {dt:.1f} s)")
            spark.stop()
        print(f"scaling 2 cores / 1 core: {rates[2] / one:.2f}x (target >= 1.8x); "
              f"local[2] / unpinned local[1]: {rates[2] / rates[1]:.2f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
