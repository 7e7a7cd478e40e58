"""``sow-asof``: the state of a SOW topic at a time T, rebuilt from the journal in Spark.

The state is computed by the server's own SOW code, not a re-implementation: each Spark task
owns a slice of the SowKeys and applies that slice's journal records, in log order, to an
in-memory ``sow.Topic`` built from the topic's ``TopicSpec`` (from the AMPS config, so the
same ``Key``s, key domain and ``Expiration``), exactly as the server's recovery applies them
(``sow.recovery.apply_record``); then it reads the topic as of T (``now=T``: records whose
expiration is due by T are gone).

Routing: a publish, delta publish or delete-by-data goes to the task of its SowKey (the key
``Topic.key_for`` computes from the body, or the message's ``k``); a delete by ``sow_keys``
to the tasks of those keys; a delete by filter to every task (each applies it to its keys).
A delta merge only ever reads its own key's record, so the slices never need each other.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from amps_emulator.journal.record import RecordKind

_PUBLISH, _DELTA, _DELETE = int(RecordKind.PUBLISH), int(RecordKind.DELTA_PUBLISH), int(RecordKind.SOW_DELETE)

#: output columns
RESULT_DDL = ("sow_key STRING, data STRING, bookmark STRING, timestamp TIMESTAMP, "
              "expiration TIMESTAMP, position BIGINT")
_ROUTED_DDL = ("part INT, position BIGINT, kind INT, sow_key STRING, body BINARY, "
               "headers MAP<STRING, STRING>, expiration BIGINT, ts BIGINT, bookmark STRING")


def spec_from_config(config_path: str, topic: str):
    """The ``TopicSpec`` of SOW topic ``topic`` in the AMPS config file, and the config's
    journal directory (None when it has no transaction log)."""
    from amps_emulator.config import load_config
    from amps_emulator.sow.spec import spec_from_config as _spec

    cfg = load_config(config_path)
    for t in cfg.sow_topics:
        if t.name == topic:
            txlog = cfg.transaction_log
            return _spec(t), (txlog.journal_directory if txlog is not None else None)
    raise ValueError(f"{config_path}: no SOW topic named {topic!r}")


def _topic(spec):
    import dataclasses

    from amps_emulator.sow import TransientStore

    # in memory, without history: the job only needs the state it computes
    spec = dataclasses.replace(spec, durability="transient", history=None, file_name=None)
    return TransientStore(clock=lambda: 0.0, auto_memo=False).open_topic(spec)


def _decoded(body: bytes):
    import msgspec

    try:
        return msgspec.json.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None


def _route(spec, n: int):
    """mapInArrow function: journal rows -> rows tagged with the task (``part``) that owns them."""

    def run(batches: Iterator) -> Iterator:
        import pyarrow as pa

        from amps_emulator.sow import parse_sow_keys

        topic = _topic(spec)
        schema = None
        for b in batches:
            d = b.to_pydict()
            out: dict[str, list] = {k: [] for k in
                                    ("part", "position", "kind", "sow_key", "body", "headers",
                                     "expiration", "ts", "bookmark")}
            for i in range(b.num_rows):
                kind = d["kind"][i]
                headers = dict(d["headers"][i] or ())
                text, binary = d["data"][i], d["data_binary"][i]
                body = text.encode("utf-8") if text is not None else (binary or b"")
                parts: Sequence[int]
                if kind == _DELETE and "filter" in headers:
                    parts = range(n)
                elif kind == _DELETE and "sow_keys" in headers:
                    parts = sorted({zlib.crc32(k.encode()) % n for k in parse_sow_keys(headers["sow_keys"])})
                else:
                    try:
                        key = topic.key_for(_decoded(body), d["sow_key"][i])
                    except Exception:
                        continue  # the server refused this message too: it never reached the SOW
                    parts = (zlib.crc32(key.encode()) % n,)
                micros = d["ts"][i]
                for p in parts:
                    out["part"].append(p)
                    out["position"].append(d["position"][i])
                    out["kind"].append(kind)
                    out["sow_key"].append(d["sow_key"][i])
                    out["body"].append(body)
                    out["headers"].append(list(headers.items()) or None)
                    out["expiration"].append(d["expiration"][i])
                    out["ts"].append(micros)
                    out["bookmark"].append(d["bookmark"][i])
            if schema is None:
                schema = pa.schema([("part", pa.int32()), ("position", pa.int64()), ("kind", pa.int32()),
                                    ("sow_key", pa.string()), ("body", pa.binary()),
                                    ("headers", pa.map_(pa.string(), pa.string())),
                                    ("expiration", pa.int64()), ("ts", pa.int64()),
                                    ("bookmark", pa.string())])
            yield pa.RecordBatch.from_pydict(out, schema=schema)

    return run


class _Rec(NamedTuple):
    """A routed row as the journal record ``apply_record`` reads (see
    :class:`sow.recovery.JournalEntry`)."""

    kind: int
    position: int
    timestamp: int  # microseconds
    headers: dict[str, str]
    body: bytes
    sow_key: str | None
    expiration: int | None
    bookmark_str: str


def _apply(spec, at_us: int):
    """mapInArrow function: routed rows sorted by position -> the slice's state at T."""

    def run(batches: Iterator) -> Iterator:
        import pyarrow as pa

        from amps_emulator.sow.recovery import apply_record

        topic = _topic(spec)
        last = -1
        for b in batches:
            d = b.to_pydict()
            for i in range(b.num_rows):
                pos = d["position"][i]
                if pos == last:  # a delete by filter sent to two slices of this task
                    continue
                last = pos
                r = _Rec(kind=d["kind"][i], position=pos, timestamp=d["ts"][i],
                         headers=dict(d["headers"][i] or ()), body=d["body"][i],
                         sow_key=d["sow_key"][i], expiration=d["expiration"][i],
                         bookmark_str=d["bookmark"][i])
                try:
                    apply_record(topic, r)
                except Exception:
                    pass  # refused by the server as well (bad key, bad filter): no state change
        res = topic.query(None, now=at_us / 1_000_000)
        cols: dict[str, list] = {k: [] for k in ("sow_key", "data", "bookmark", "timestamp",
                                                 "expiration", "position")}
        for rec in res.records:
            cols["sow_key"].append(rec.sow_key)
            cols["data"].append(bytes(rec.data).decode("utf-8", "replace"))
            cols["bookmark"].append(rec.bookmark or None)
            cols["timestamp"].append(int(rec.timestamp * 1_000_000))
            cols["expiration"].append(None if rec.expiration is None else int(rec.expiration * 1_000_000))
            cols["position"].append(rec.position)
        ts = pa.timestamp("us", tz="UTC")
        yield pa.RecordBatch.from_pydict(cols, schema=pa.schema([
            ("sow_key", pa.string()), ("data", pa.string()), ("bookmark", pa.string()),
            ("timestamp", ts), ("expiration", ts), ("position", pa.int64())]))

    return run


def sow_asof(spark, journal_dir: str, spec, at_us: int | None = None, partitions: int | None = None):
    """DataFrame of the SOW topic ``spec`` as of ``at_us`` (microseconds; None: the journal's end)."""
    from pyspark.sql import functions as F

    from . import register

    register(spark)
    if at_us is None:
        at_us = (1 << 62)
    n = partitions or max(1, spark.sparkContext.defaultParallelism)
    journal = (spark.read.format("amps-journal").option("path", journal_dir)
               .option("topic", "^" + re.escape(spec.name) + "$")
               .option("endingTimestamp", str(at_us)).load()
               .where(F.col("kind").isin(_PUBLISH, _DELTA, _DELETE))
               .select("position", "kind", "sow_key", "data", "data_binary", "headers",
                       "expiration", F.unix_micros("timestamp").alias("ts"), "bookmark"))
    routed = journal.mapInArrow(_route(spec, n), _ROUTED_DDL)
    return (routed.repartition(n, "part").sortWithinPartitions("position")
            .mapInArrow(_apply(spec, at_us), RESULT_DDL))
