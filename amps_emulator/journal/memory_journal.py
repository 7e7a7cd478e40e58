"""MemoryJournal: the same contract as FileJournal, held in a Python list (throwaway CI runs).

Durability is always ``memory``: ``durable_position`` is the last appended position and a
``persisted`` ack promises nothing beyond this process (see ``api.py``). ``flush``/``sync``
are no-ops kept for the contract. Records are grouped into in-memory "segments" of
``segment_size`` encoded bytes (the size the frame would have on disk) so that retention by
size/age removes whole oldest groups exactly like the file journal. Positions are contiguous
(no CHECKPOINT records: nothing needs to survive a restart).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping

from .api import Durability, JournalClosedError, RetentionResult, TailReader
from .base import Clock, JournalCore
from .record import INTERNAL_KIND_MIN, JournalRecord, RecordKind, frame_size, room_for
from .stored import ReadHold

DEFAULT_SEGMENT_SIZE = 64 * 1024 * 1024


class _MemSegment:
    __slots__ = ("first_position", "size", "count", "last_ts")

    def __init__(self, first_position: int) -> None:
        self.first_position = first_position
        self.size = 0
        self.count = 0
        self.last_ts = 0

    @property
    def name(self) -> str:
        return f"memory:{self.first_position}"


class MemoryJournal(JournalCore):
    def __init__(
        self,
        *,
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        durability: str | Durability = Durability.MEMORY,
        retention_bytes: int | None = None,
        retention_age: float | None = None,
        clock: Clock | None = None,
    ) -> None:
        if Durability(durability) is not Durability.MEMORY:
            raise ValueError("MemoryJournal only supports durability='memory' (it never persists anything)")
        self._init_core(clock=clock, durability=Durability.MEMORY)
        self._segment_size = segment_size
        self._retention_bytes = retention_bytes
        self._retention_age = retention_age
        self._records: list[JournalRecord] = []
        self._base = 1  # position of _records[0]
        self._segs = [_MemSegment(1)]

    # -- the write-failure interface of FileJournal: memory never refuses a write ----------
    write_failures: tuple = ()

    def take_write_failures(self) -> list:
        return []

    def append_checkpoint(self) -> None:
        """Nothing to probe: a memory journal always takes writes."""

    def discard_unsynced(self, error: BaseException) -> None:
        """Never called: a memory journal's ``sync`` cannot fail."""
        return None

    @property
    def first_position(self) -> int:
        return self._base

    @property
    def first_timestamp(self) -> int:
        """When the oldest retained record was logged (microseconds; 0: none)."""
        return self._records[0].timestamp if self._records else 0

    @property
    def durable_position(self) -> int:
        return self._next_position - 1

    @property
    def written_position(self) -> int:
        """Everything appended counts as written (there is nowhere to write it)."""
        return self._next_position - 1

    #: no segment summaries exist in memory (the server's turn loop asks, as of a FileJournal)
    summaries_due = False

    def write_summaries(self) -> None:
        """Nothing to write (kept for the server, which treats both journals alike)."""

    def append(
        self,
        *,
        topic: str,
        client_name: str,
        body: bytes = b"",
        kind: int = RecordKind.PUBLISH,
        client_seq: int | None = None,
        correlation_id: str | None = None,
        sow_key: str | None = None,
        expiration: int | None = None,
        message_type: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> JournalRecord:
        if kind >= INTERNAL_KIND_MIN:
            raise ValueError(f"record kind {kind} is journal-internal")
        seg = self._active()
        rec = self._make_record(
            kind, topic, client_name, body, client_seq, correlation_id, sow_key, expiration,
            message_type, headers
        )
        self._keep(seg, rec)
        return rec

    def append_publishes(self, topic: str, message_type: str, client_name: str,
                         bodies: list[bytes], client_seqs: list[int] | None) -> list[JournalRecord]:
        """See ``Journal.append_publishes``: a new segment starts before the same record as
        one by one; each record counted at the size its frame would have."""
        n = len(bodies)
        return self._keep_in_parts(
            bodies, frame_size(topic, message_type, client_name, None, None, None, {}, b""),
            lambda start, stop: self._make_publish_records(
                topic, message_type, client_name, bodies[start:stop] if start or stop < n else bodies,
                None if client_seqs is None else client_seqs[start:stop])[0])

    def _append_plain(self, topic: str, message_type: str, client_name: str, publisher_id: int,
                      sequences: list[int], client_seqs: list[int] | None, headers: dict[str, str],
                      bodies: list[bytes]) -> list[JournalRecord]:
        """A plain replicated run (``append_replicated_plain``'s hook), as
        :meth:`append_publishes` keeps a run of publishes."""
        return self._keep_in_parts(
            bodies, frame_size(topic, message_type, client_name, None, None, None, headers, b""),
            lambda start, stop: self._make_replicated_plain(
                topic, message_type, client_name, publisher_id, sequences[start:stop],
                None if client_seqs is None else client_seqs[start:stop], headers,
                bodies[start:stop])[0])

    def _keep_in_parts(self, bodies: list[bytes], fixed: int,
                       make: Callable[[int, int], list[JournalRecord]]) -> list[JournalRecord]:
        """Keep a run of records with these ``bodies`` segment by segment: a new segment
        starts before the same record as one by one. ``make(start, stop)`` makes the records
        of ``bodies[start:stop]``; each is counted at the size its frame would have: ``fixed``
        (the frame's size with an empty body) plus its body's bytes, and a longer bin length
        past 255 and 65,535 bytes."""
        recs: list[JournalRecord] = []
        start, n = 0, len(bodies)
        while start < n:
            seg = self._active()
            stop = room_for(bodies, start, fixed, seg.size, seg.count, self._segment_size)
            part = make(start, stop)
            self._records.extend(part)
            size = fixed * len(part)
            for rec in part:
                k = len(rec.body)
                size += k if k < 256 else k + 1 if k < 65536 else k + 3
            seg.size += size
            seg.count += len(part)
            seg.last_ts = part[-1].timestamp
            recs += part
            start = stop
        return recs

    def _prepare_append(self) -> _MemSegment:
        """The segment the next record goes to (``append_replicated``'s hook)."""
        return self._active()

    def _keep_appended(self, where: _MemSegment, rec: JournalRecord) -> None:
        """Keep ``rec`` in the segment ``where`` (``append_replicated``'s hook)."""
        self._keep(where, rec)

    def _room(self, where: _MemSegment) -> int:
        """Bytes the segment ``where`` takes before it is full (``append_replicated_run``'s hook)."""
        return self._segment_size - where.size

    def _keep_run(self, where: _MemSegment, recs: list[JournalRecord]) -> None:
        """Keep ``recs`` in the segment ``where`` (``append_replicated_run``'s hook)."""
        for rec in recs:
            self._keep(where, rec)

    def _active(self) -> _MemSegment:
        """The segment the next record goes to (a new one once the last is full)."""
        seg = self._segs[-1]
        if seg.count and seg.size >= self._segment_size:
            seg = _MemSegment(self._next_position)
            self._segs.append(seg)
        return seg

    def _keep(self, seg: _MemSegment, rec: JournalRecord) -> None:
        self._records.append(rec)
        seg.size += frame_size(rec.topic, rec.message_type, rec.client_name, rec.correlation_id,
                               rec.sow_key, rec.expiration, rec.headers, rec.body)
        seg.count += 1
        seg.last_ts = rec.timestamp

    def flush(self, limit: int | None = None) -> bool:
        if self._closed:
            raise JournalClosedError("journal is closed")
        return True

    def sync(self) -> int:
        return self.durable_position

    def close(self) -> None:
        self._closed = True

    def read(self, from_position: int = 1, *, include_internal: bool = False,
             hold: ReadHold | None = None) -> Iterator[JournalRecord]:
        """(``hold``: nothing is compressed here, nothing waits.)"""
        pos = max(from_position, 1)
        while pos < self._next_position:
            if pos < self._base:
                pos = self._base
            rec = self._records[pos - self._base]
            pos += 1
            yield rec

    def follow_tail(self, reader: TailReader) -> None:
        """Nothing to keep: every record is in memory."""

    def run_columns(self, position: int, count: int
                    ) -> tuple[list[int], list[int] | None, list[bytes]] | None:
        """None (runs are not noted here: a reader takes the records one by one)."""
        return None

    def stored_frames(self, position: int, at: tuple[int, str, int] | None, max_bytes: int
                      ) -> tuple[bytes, str, int] | None:
        """None: nothing is kept as frames here (a streaming reader reads records, :meth:`read`;
        see ``FileJournal.stored_frames``)."""
        return None

    def record_at(self, position: int, hold: ReadHold | None = None) -> JournalRecord | None:
        i = position - self._base
        return self._records[i] if 0 <= i < len(self._records) else None

    def _publisher_at(self, position: int) -> int | None:
        rec = self.record_at(position)
        return None if rec is None else rec.publisher_id

    def position_at_time(self, timestamp_us: int, hold: ReadHold | None = None) -> int:
        i = bisect_left(self._records, timestamp_us, key=lambda r: r.timestamp)
        return self._records[i].position if i < len(self._records) else self._next_position

    def enforce_retention(self, pinned_positions: Iterable[int] = (), *,
                          age: float | None = None) -> RetentionResult:
        if age is None and self._retention_bytes is None and self._retention_age is None:
            return RetentionResult()
        n, blocked, reasons = self._plan_retention(self._segs, pinned_positions, lambda i: True, age)
        removed = self._segs[:n]
        if removed:
            new_base = self._segs[n].first_position
            del self._records[: new_base - self._base]
            self._base = new_base
            del self._segs[:n]
            if self._seqidx is not None:
                self._seqidx.trim(new_base)
        return RetentionResult(
            removed=tuple(s.name for s in removed),
            bytes_removed=sum(s.size for s in removed),
            records_removed=sum(s.count for s in removed),
            blocked_by_pin=blocked,
            reasons=tuple(reasons),
        )

    def __repr__(self) -> str:
        return f"MemoryJournal(positions={self.first_position}..{self.last_position})"
