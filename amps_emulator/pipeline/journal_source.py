"""``amps-journal``: a journal directory as a Spark DataFrame, batch and streaming.

    spark.dataSource.register(AmpsJournalDataSource)
    df = spark.read.format("amps-journal").option("path", "/data/journal") \\
        .option("topic", "orders.*").load()
    q = spark.readStream.format("amps-journal").option("path", "/data/journal").load() \\
        .writeStream.option("checkpointLocation", ...).start(...)

Options (Kafka-source style): ``path`` (the journal directory), ``topic`` (a name, or a regex
with AMPS semantics: found anywhere in the topic), ``startingBookmark`` (exclusive, as an AMPS
replay: EPOCH / ``0`` / ``pub|seq|`` / a timestamp), ``endingBookmark`` (inclusive),
``startingTimestamp`` / ``endingTimestamp`` (inclusive; AMPS ``YYYYmmddTHHMMSS``, ISO 8601 or
microseconds), ``failOnDataLoss`` (default true), ``includeInternal`` (journal CHECKPOINT
records, default false), ``splitBytes`` (target split size, default 64 MiB), ``batchRows``,
``config`` (an AMPS config file: its ``MessageTypes`` read declared types' fields).

A record of another message type than json has its exact bytes in ``data_binary`` (and its
text in ``data`` when it is UTF-8) and the fields its type's codec reads, as JSON text, in
``fields`` (``protocol.bodyview``; null for binary, an unknown type or an unreadable body).

Streaming offsets are journal positions (``{"position": N}``: everything up to and including
N has been read), so a query resumes exactly from its checkpoint.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

if TYPE_CHECKING:  # PySpark 4.2+ only: an annotation here, so 4.0 and 4.1 still import this
    from pyspark.sql.streaming.datasource import ReadLimit

from . import journal_reader as jr


class JournalPartition(InputPartition):
    """One split of the journal to read (``None``: nothing to read, an empty journal)."""

    def __init__(self, split: jr.JournalSplit | None, opts: jr.ReadOptions) -> None:
        super().__init__(None)
        self.split = split
        self.opts = opts


def _journal_partition(partition: InputPartition) -> JournalPartition:
    if not isinstance(partition, JournalPartition):
        raise TypeError(f"amps-journal: not a journal partition: {partition!r}")
    return partition


def _directory(options) -> str:
    path = options.get("path")
    if not path:
        raise ValueError("amps-journal: option 'path' (the journal directory) is required")
    return path


class AmpsJournalDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "amps-journal"

    def schema(self) -> str:
        return jr.spark_schema_ddl()

    def reader(self, schema) -> JournalBatchReader:
        directory = _directory(self.options)
        return JournalBatchReader(directory, jr.ReadOptions.from_spark(dict(self.options), directory))

    def streamReader(self, schema) -> JournalStreamReader:
        return JournalStreamReader(_directory(self.options), dict(self.options))


class JournalBatchReader(DataSourceReader):
    def __init__(self, directory: str, opts: jr.ReadOptions) -> None:
        self.directory = directory
        self.opts = opts

    def partitions(self):
        splits = jr.plan_splits(self.directory, self.opts)
        return [JournalPartition(s, self.opts) for s in splits] or [
            JournalPartition(None, self.opts)]

    def read(self, partition: InputPartition):
        part = _journal_partition(partition)
        if part.split is None:
            return iter(())
        return jr.read_split(part.split, part.opts)


class JournalStreamReader(DataSourceStreamReader):
    def __init__(self, directory: str, options: dict) -> None:
        self.directory = directory
        self.opts = jr.ReadOptions.from_spark(options, directory)
        self._hint: tuple[str, int, int] | None = None

    def initialOffset(self) -> dict:
        return {"position": self.opts.after_position}

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        """The journal's last complete record. ``start`` and ``limit`` (PySpark 4.2+): every
        record available is read (the default read limit), whatever the start; PySpark 4.0
        and 4.1 call this without arguments."""
        pos, self._hint = jr.last_position(self.directory, self._hint)
        if self.opts.until_position is not None:
            pos = min(pos, self.opts.until_position)
        return {"position": pos}

    def partitions(self, start: dict, end: dict):
        lo, hi = int(start["position"]), int(end["position"])
        if hi <= lo:
            return []
        opts = dataclasses.replace(self.opts, after_position=lo, until_position=hi)
        return [JournalPartition(s, opts) for s in jr.plan_splits(self.directory, opts)]

    def read(self, partition: InputPartition):
        part = _journal_partition(partition)
        if part.split is None:
            return iter(())
        return jr.read_split(part.split, part.opts)

    def commit(self, end: dict) -> None:
        pass
