"""Benchmark: start-up recovery of a 1,000,000-record journal (target: under 5 s).

Writes N records with 200-byte bodies (default 1,000,000; ``--records`` to change) to a temp
directory with FileJournal (group durability, one flush+sync per 1,000 appends, i.e. per
"loop turn"), then times ``FileJournal.open`` on it three ways:

* after a crash (SIGKILL) right after the last sync: the on-disk state then is the segments
  plus the summaries written so far (reproduced by putting back the summaries as they were
  before ``close``), so recovery checks the summaries' crc32 and scans the tail since the last
  one;
* after a clean close (the summaries cover everything);
* with no summaries at all (deleted: a journal from before summaries, or all of them damaged):
  the full frame-by-frame scan.

Prints the machine, append+flush throughput, and recovery records/s. The page cache is warm
(the file was just written): this measures the CPU cost, which dominates on local SSDs.

    python bench/bench_journal_recovery.py [--records N] [--segment-size BYTES]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from amps_emulator.journal import FileJournal  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--segment-size", type=int, default=64 * 1024 * 1024)
    ap.add_argument("--batch", type=int, default=1000, help="appends per flush+sync (one loop turn)")
    args = ap.parse_args()

    try:
        from bench._support import machine  # the shared machine line, when present

        desc = machine()
    except Exception:
        desc = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"machine: {desc} | {platform.platform()} | cpu_count={os.cpu_count()}")
    tmp = tempfile.mkdtemp(prefix="bench-journal-")
    try:
        body = os.urandom(100).hex().encode()  # 200 bytes
        journal, _ = FileJournal.open(tmp, segment_size=args.segment_size)
        n = args.records
        batch = args.batch
        names = [f"publisher-{k}" for k in range(8)]
        t_sync = 0.0
        perf = time.perf_counter
        t0 = perf()
        append = journal.append
        for i in range(n):
            append(topic="orders", client_name=names[i % 8], body=body, client_seq=i + 1, message_type="json")
            if i % batch == batch - 1:
                journal.flush()
                ts = perf()
                journal.sync()
                t_sync += perf() - ts
        journal.flush()
        ts = perf()
        journal.sync()
        t_sync += perf() - ts
        t_total = perf() - t0
        at_crash = {f: open(os.path.join(tmp, f), "rb").read() for f in os.listdir(tmp) if f.endswith(".summary")}
        journal.close()
        segments = [f for f in os.listdir(tmp) if f.endswith(".journal")]
        size = sum(os.path.getsize(os.path.join(tmp, f)) for f in segments)
        t_append = t_total - t_sync
        print(
            f"append+flush: {n} records in {t_append:.2f} s = {n / t_append:,.0f} records/s "
            f"({size / t_append / 1e6:,.0f} MB/s); plus fdatasync every {batch} records: {t_sync:.2f} s total "
            f"-> {n / t_total:,.0f} records/s end to end (journal {size / 1e6:,.0f} MB, "
            f"{len(segments)} segments)"
        )

        def timed_open(what: str):
            t0 = time.perf_counter()
            journal, report = FileJournal.open(tmp, segment_size=args.segment_size)
            t_open = time.perf_counter() - t0
            assert report.records >= n and report.clean, report
            print(
                f"recovery {what}: {report.records} records in {t_open:.3f} s = "
                f"{report.records / t_open:,.0f} records/s ({report.summarised_segments} of {report.segments} "
                f"segments from summaries, {report.scanned_bytes / 1e6:,.1f} MB scanned frame by frame; "
                f"target < 5 s for 1,000,000: {'OK' if n != 1_000_000 or t_open < 5 else 'FAIL'})"
            )
            return journal

        saved = {f: open(os.path.join(tmp, f), "rb").read() for f in os.listdir(tmp) if f.endswith(".summary")}
        for f in saved:
            os.unlink(os.path.join(tmp, f))
        for f, data in at_crash.items():
            with open(os.path.join(tmp, f), "wb") as out:
                out.write(data)
        timed_open("after a crash after the last sync").close()
        for f, data in saved.items():
            with open(os.path.join(tmp, f), "wb") as out:
                out.write(data)
        timed_open("after a clean close").close()
        for f in os.listdir(tmp):
            if f.endswith(".summary"):
                os.unlink(os.path.join(tmp, f))
        journal = timed_open("with no summaries (full scan)")

        t0 = time.perf_counter()
        pos = journal.position_after_bookmark(f"{journal.last_bookmark_for_client('publisher-3')}")
        mid = journal.position_at_time(journal.record_at(n // 2).timestamp)
        t_lookup = time.perf_counter() - t0
        print(f"lookups: bookmark -> {pos}, time -> {mid} in {t_lookup * 1e3:.2f} ms")

        t0 = time.perf_counter()
        count = sum(1 for _ in journal.read(n - 100_000))
        t_read = time.perf_counter() - t0
        print(f"replay: {count} records read+decoded in {t_read:.2f} s = {count / t_read:,.0f} records/s")
        journal.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
