"""Replaying the transaction log into a SOW topic: one journal record at a time.

The server's recovery (``server.services.sow_service``) and the offline pipeline's as-of reads
(``pipeline.sow_asof``) rebuild a topic the same way, with :func:`apply_record`. It reads a
record through :class:`JournalEntry`, the fields it needs (``journal.record.JournalRecord``
has them; the pipeline builds its own from Arrow rows).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from amps_emulator.journal.identity import ORIGIN_TS
from amps_emulator.journal.record import RecordKind
from amps_emulator.sow.query import DeleteResult, PublishResult
from amps_emulator.sow.topic import Topic

__all__ = ["JournalEntry", "apply_record"]


class JournalEntry(Protocol):
    """What :func:`apply_record` reads of a journal record (times in microseconds)."""

    @property
    def kind(self) -> int: ...
    @property
    def position(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def headers(self) -> Mapping[str, str] | None: ...
    @property
    def body(self) -> bytes: ...
    @property
    def sow_key(self) -> str | None: ...
    @property
    def expiration(self) -> int | None: ...
    @property
    def bookmark_str(self) -> str: ...


def apply_record(topic: Topic, rec: JournalEntry) -> PublishResult | DeleteResult:
    """Apply one journal record (a publish, delta publish or sow_delete) to a SOW topic."""
    headers = rec.headers or {}
    if rec.kind == RecordKind.SOW_DELETE:
        at = rec.timestamp / 1_000_000
        if "filter" in headers:
            return topic.delete_by_filter(headers["filter"], position=rec.position, now=at)
        if "sow_keys" in headers:
            return topic.delete_by_keys(headers["sow_keys"], position=rec.position, now=at)
        return topic.delete_by_data(rec.body, sow_key=rec.sow_key, position=rec.position,
                                    now=at)
    fn = topic.delta_publish if rec.kind == RecordKind.DELTA_PUBLISH else topic.publish
    # a replicated record's lifetime counts from its origin's log time (docs/design/replication.md 2.1)
    origin = headers.get(ORIGIN_TS)
    return fn(rec.body, sow_key=rec.sow_key, expiration=rec.expiration,
              bookmark=rec.bookmark_str, position=rec.position,
              timestamp=rec.timestamp / 1_000_000,
              now=(int(origin) if origin else rec.timestamp) / 1_000_000)
