"""``amps-pipeline``: the data pipeline's Spark jobs as sub-commands.

    amps-pipeline export    JOURNAL_DIR OUT [--topic RE] [--from T] [--to T] [--format parquet]
    amps-pipeline sow-asof  JOURNAL_DIR OUT --topic NAME (--config amps.xml | --key /id ...) [--at T]
    amps-pipeline queue-audit JOURNAL_DIR OUT
    amps-pipeline stats     JOURNAL_DIR OUT [--html report.html] [--bucket SECONDS]
    amps-pipeline load      DATASET --uri tcp://host:port/amps/json --topic NAME [--input-format parquet]

Every sub-command takes ``--master`` (default ``local[*]``; ``spark://host:7077`` etc. runs
the same job on a cluster, where JOURNAL_DIR must be on storage every executor can read)
and ``--format`` for its output (parquet, csv or json). Spark prints its progress bar.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

FORMATS = ("parquet", "csv", "json")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="amps-pipeline", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    def job(name: str, help: str, journal: bool = True, out: bool = True) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=help)
        s.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
        s.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                       help="extra Spark configuration")
        if journal:
            s.add_argument("journal", help="the transaction log directory (JournalDirectory)")
        if out:
            s.add_argument("out", help="output directory")
            s.add_argument("--format", choices=FORMATS, default="parquet")
        return s

    e = job("export", "journal records to files partitioned by topic and date")
    e.add_argument("--topic", help="topic name or regex (AMPS semantics)")
    e.add_argument("--from", dest="start", help="first timestamp (YYYYmmddTHHMMSS, ISO 8601)")
    e.add_argument("--to", dest="end", help="last timestamp")
    e.add_argument("--ignore-data-loss", action="store_true",
                   help="skip damaged records instead of failing")

    s = job("sow-asof", "the state of a SOW topic at a time T")
    s.add_argument("--topic", required=True)
    s.add_argument("--at", help="the time T (default: the end of the journal)")
    s.add_argument("--config", help="AMPS config file: the topic's Key, KeyDomain, Expiration")
    s.add_argument("--key", action="append", default=[], help="a Key path (without --config)")

    qa = job("queue-audit", "per queue message: enqueue, leases, acks, cancels, expiries")
    qa.add_argument("--config", help="AMPS config file: its queues, so untouched messages are listed too")

    st = job("stats", "counts, rates, sizes, sequence gaps; --html for a report")
    st.add_argument("--html", help="also write a one-page HTML report with charts here")
    st.add_argument("--bucket", type=int, default=1, help="time bucket in seconds (default 1)")
    st.add_argument("--topic", help="topic name or regex")

    ld = job("load", "publish a dataset to a running server", journal=False, out=False)
    ld.add_argument("dataset", help="input path (Parquet, JSON, CSV)")
    ld.add_argument("--input-format", choices=FORMATS, default="parquet")
    ld.add_argument("--uri", required=True, help="tcp://host:port/amps/json")
    ld.add_argument("--topic", required=True)
    ld.add_argument("--data-column", help="publish this string column as is (default: each row as JSON)")
    ld.add_argument("--load-id", help="client name prefix: reuse it to re-run a load idempotently")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        from .session import make_session
    except ImportError as exc:  # pragma: no cover - depends on the environment
        print(f"amps-pipeline needs the spark extra: pip install 'amps-emulator[spark]' ({exc})",
              file=sys.stderr)
        return 2
    from pyspark.sql import SparkSession

    from . import jobs

    conf = dict(c.split("=", 1) for c in args.conf)
    ours = SparkSession.getActiveSession() is None  # inside a running application: use it, keep it
    spark = make_session(args.master, f"amps-pipeline {args.command}", conf=conf)
    try:
        if args.command == "export":
            n = jobs.export(spark, args.journal, args.out, args.format, topic=args.topic,
                            start=args.start, end=args.end, fail_on_data_loss=not args.ignore_data_loss)
            print(f"exported {n} records to {args.out}")
        elif args.command == "sow-asof":
            from .journal_reader import parse_time
            from .sow_asof import sow_asof, spec_from_config

            if args.config:
                spec, _ = spec_from_config(args.config, args.topic)
            else:
                from amps_emulator.sow import TopicSpec

                spec = TopicSpec(args.topic, keys=tuple(args.key))
            df = sow_asof(spark, args.journal, spec, parse_time(args.at))
            jobs.write(df, args.out, args.format)
            print(f"{args.topic} as of {args.at or 'the end of the journal'} written to {args.out}")
        elif args.command == "queue-audit":
            queues = jobs.queues_from_config(args.config) if args.config else None
            audit, summary = jobs.queue_audit(spark, args.journal, queues)
            jobs.write(audit, f"{args.out}/messages", args.format)
            jobs.write(summary, f"{args.out}/summary", args.format)
            summary.show(truncate=False)
        elif args.command == "stats":
            frames = jobs.stats(spark, args.journal, args.bucket, topic=args.topic)
            for name, df in frames.items():
                jobs.write(df, f"{args.out}/{name}", args.format)
            frames["by_publisher"].show(truncate=False)
            if args.html:
                from .report import stats_page

                text = stats_page("AMPS journal statistics", *(frames[k].collect() for k in (
                    "by_publisher", "per_second", "gaps", "queue_depth")))
                with open(args.html, "w", encoding="utf-8") as f:
                    f.write(text)
                print(f"report: {args.html}")
        elif args.command == "load":
            n = jobs.load(spark, args.dataset, args.input_format, args.uri, args.topic,
                          args.data_column, args.load_id)
            print(f"published {n} records to {args.topic}")
    finally:
        if ours:
            spark.stop()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
