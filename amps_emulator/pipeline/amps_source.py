"""``amps``: read from and write to a running server over the AMPS protocol (emulator or AMPS).

Read::

    spark.read.format("amps").option("uri", "tcp://host:9007/amps/json")
        .option("topic", "orders").option("filter", "/px > 10").load()          # a sow query
    spark.read.format("amps").option("uri", ...).option("topic", "orders")
        .option("startingTimestamp", "20240101T000000").option("endingTimestamp", ...)
        .option("numPartitions", 8).load()                                      # a replay

Without a bound the read is a ``sow`` query (one partition: a snapshot of a SOW topic, with
``filter``). With ``startingBookmark`` / ``startingTimestamp`` it is a bookmark replay of
the transaction log up to ``endingBookmark`` / ``endingTimestamp`` (default: now), each
partition replaying one time range ``[t_i, t_{i+1})`` (``numPartitions``; time splits need a
starting timestamp). Rows: bookmark, timestamp, topic, sow_key, correlation_id, data (the body
as text), data_binary (the body's exact bytes) and fields: for a URI whose message type is not
json, the fields the type's codec reads, as JSON text (``protocol.bodyview``; a declared type
needs the ``config`` option, the AMPS config file whose ``MessageTypes`` declare it).

Write::

    df.write.format("amps").option("uri", ...).option("topic", "orders").mode("append").save()

Each row is published as JSON (or the string column named by ``dataColumn`` as is) with
persisted acks. Partition ``p`` of a write publishes as client ``<loadId>-<p>`` with
sequence numbers 1, 2, ... in row order, so a retried task (or a reconnect after the server
died) sends the same names and numbers and the server's duplicate detection drops what it
already has: nothing lost, nothing twice. ``loadId`` defaults to a fresh id per write; give
one to make a whole re-run of a load idempotent. ``reconnectTimeout`` (seconds, default 60)
bounds how long a task waits for a server to come back.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)

from .journal_reader import parse_time

READ_DDL = ("bookmark STRING, timestamp TIMESTAMP, topic STRING, sow_key STRING, "
            "correlation_id STRING, data STRING, data_binary BINARY, fields STRING")


def _opts(options) -> dict:
    return {k.lower(): v for k, v in dict(options).items()}


def _require(o: dict, key: str) -> str:
    if not o.get(key.lower()):
        raise ValueError(f"amps: option {key!r} is required")
    return o[key.lower()]


class AmpsDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "amps"

    def schema(self) -> str:
        return READ_DDL

    def reader(self, schema) -> AmpsReader:
        return AmpsReader(_opts(self.options))

    def writer(self, schema, overwrite: bool) -> AmpsWriter:
        return AmpsWriter(_opts(self.options), schema)


class _Range(InputPartition):
    def __init__(self, bookmark: str | None) -> None:
        super().__init__(bookmark)
        self.bookmark = bookmark


def _fmt(micros: int) -> str:
    from amps_emulator.protocol.bookmarks import format_timestamp

    return format_timestamp(micros)


class AmpsReader(DataSourceReader):
    def __init__(self, o: dict) -> None:
        self.uri = _require(o, "uri")
        self.topic = _require(o, "topic")
        self.filter = o.get("filter")
        self.o = o

    def partitions(self):
        o = self.o
        start_bm, end_bm = o.get("startingbookmark"), o.get("endingbookmark")
        t0, t1 = parse_time(o.get("startingtimestamp")), parse_time(o.get("endingtimestamp"))
        if start_bm is not None:
            start = start_bm
        elif t0 is not None:
            start = _fmt(t0)
        else:
            return [_Range(None)]  # a sow query
        n = int(o.get("numpartitions", 1))
        if t0 is not None and start_bm is None and end_bm is None and n > 1:
            t1 = t1 if t1 is not None else int(time.time() * 1_000_000) + 1
            cuts = [t0 + (t1 - t0) * i // n for i in range(n + 1)]
            return [_Range(f"[{_fmt(a)}:{_fmt(b)})") for a, b in zip(cuts, cuts[1:], strict=False) if b > a]
        if end_bm is not None:
            end = end_bm
        else:
            end = _fmt(t1 if t1 is not None else int(time.time() * 1_000_000) + 1)
        opening = "(" if start_bm is not None and "|" in start_bm else "["  # AMPS: after a bookmark
        return [_Range(f"{opening}{start}:{end}]")]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        from amps_emulator.config.message_types import registry_for_config_file
        from amps_emulator.protocol import bodyview

        from .amps_client import Connection, parse_uri

        mt = parse_uri(self.uri)[2]
        config = self.o.get("config")
        registry = registry_for_config_file(config) if config else None
        if not isinstance(partition, _Range):
            raise TypeError(f"amps: not an amps partition: {partition!r}")

        name = f"amps-spark-reader-{uuid.uuid4().hex[:12]}"
        with Connection(self.uri, name, timeout=float(self.o.get("timeout", 60))) as conn:
            if partition.bookmark is None:
                cmd: dict[str, Any] = {"c": "sow", "t": self.topic, "opts": "timestamp",
                                       "batch_size": 100}
            else:
                cmd = {"c": "subscribe", "t": self.topic, "bookmark": partition.bookmark,
                       "opts": "timestamp"}
            if self.filter:
                cmd["filter"] = self.filter
            for header, body in conn.query(cmd):
                ts = header.get("ts")
                fields = bodyview.fields_json(body, mt, registry) if mt != "json" else None
                yield (header.get("bm"), _ts(ts), header.get("t"), header.get("k"),
                       header.get("x"), body.decode("utf-8", "replace"), bytes(body), fields)


def _ts(text):
    import datetime as dt

    if not text:
        return None
    micros = parse_time(text)
    if micros is None:
        return None
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=micros)


class _Written(WriterCommitMessage):
    def __init__(self, partition: int, count: int, reconnects: int) -> None:
        self.partition, self.count, self.reconnects = partition, count, reconnects


class AmpsWriter(DataSourceWriter):
    def __init__(self, o: dict, schema) -> None:
        self.uri = _require(o, "uri")
        self.topic = _require(o, "topic")
        self.data_column = o.get("datacolumn")
        self.load_id = o.get("loadid") or f"amps-load-{uuid.uuid4().hex[:12]}"
        self.reconnect_timeout = float(o.get("reconnecttimeout", 60))
        self.max_in_flight = int(o.get("maxinflight", 4096))
        self.names = list(schema.fieldNames())
        self.committed: list[_Written] = []

    def write(self, iterator) -> _Written:
        import msgspec
        from pyspark import TaskContext

        from .amps_client import ReliablePublisher, json_default

        ctx = TaskContext.get()
        pid = ctx.partitionId() if ctx is not None else 0
        pub = ReliablePublisher(self.uri, f"{self.load_id}-{pid}",
                                reconnect_timeout=self.reconnect_timeout,
                                max_in_flight=self.max_in_flight)
        enc = msgspec.json.Encoder(enc_hook=json_default)
        col = self.names.index(self.data_column) if self.data_column else None
        n = 0
        try:
            for n, row in enumerate(iterator, 1):
                if col is not None:
                    value = row[col]
                    body = value.encode("utf-8") if isinstance(value, str) else bytes(value)
                else:
                    body = enc.encode(row.asDict(recursive=True))
                pub.publish(self.topic, body, n)
            pub.flush()
        finally:
            pub.close()
        return _Written(pid, n, pub.reconnects)

    def commit(self, messages) -> None:
        self.committed = [m for m in messages if m is not None]
