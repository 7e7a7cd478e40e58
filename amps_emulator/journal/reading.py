"""The read path of :class:`~journal.file_journal.FileJournal`: records by position, by time,
and the publisher of one position, over sealed segments, the active one and the records still
in the write buffer.

The records of the last writes stay in memory (:class:`RecentWrites`) while a reader that follows
the tail needs them (a replication sender reads each record as soon as it is durable): it takes
them without reading and decoding their frames again.

A base class rather than functions: ``read`` is a generator that must see the journal's state
as it moves on (records appended, written, segments rolled or removed while a reader iterates),
so it reads the attributes of the one journal object. They are declared here, typed; the
journal's ``__init__`` sets them. Readers run on the owner thread.
"""

from __future__ import annotations

import os
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from operator import itemgetter
from weakref import WeakSet

from .api import JournalCorruptError, TailReader
from .record import INTERNAL_KIND_MIN, FrameDecoder, JournalRecord
from .segment import HEADER_SIZE, O_CLOEXEC, FrameCursor, Segment
from .stored import ReadHold

#: where a reader of stored frames stopped (:meth:`SegmentReads.stored_frames`): the position
#: it goes on from, the segment's file name and the offset of the next frame to read
StoredAt = tuple[int, str, int]

#: a run of plain publishes in columns: their sequences, their ``s`` (None: none has one) and
#: their bodies, as the journal made the records
Columns = tuple[list[int], list[int] | None, list[bytes]]

#: a run among a write's records: its (start, end) indexes there and, for a run of plain
#: publishes, its columns
Run = tuple[int, int, Columns | None]

#: frame bytes of the last writes whose records :class:`RecentWrites` keeps at most
RECENT_BYTES = 8 * 1024 * 1024

_start = itemgetter(0)


class RecentWrites:
    """The records of the journal's last writes (each write's records have consecutive
    positions), oldest first, that a reader following the tail (``readers``, held weakly) has
    not passed yet, up to ``limit`` bytes of their frames; with no such reader, none. Records
    kept longer than they are needed cost a process that never reads them (its memory and
    caches hold them) about as much as the reads save. ``gen`` changes when records are
    forgotten other than from the oldest end (a cut after a failed sync): a reader going
    through a write's records stops there."""

    __slots__ = ("limit", "readers", "_writes", "_firsts", "_sizes", "_runs", "_size", "gen")

    def __init__(self, limit: int = RECENT_BYTES) -> None:
        self.limit = limit
        self.readers: WeakSet[TailReader] = WeakSet()
        self._writes: list[list[JournalRecord]] = []
        self._firsts: list[int] = []  # the first position of each write
        self._sizes: list[int] = []
        #: per write, its runs: (start, end) indexes of records appended together as a run,
        #: and a plain run's columns
        self._runs: list[list[Run]] = []
        self._size = 0
        self.gen = 0

    def add(self, records: list[JournalRecord], size: int, runs: list[Run] | None = None,
            via: str | None = None) -> None:
        """The records of a write of ``size`` bytes, which went to the OS; ``runs``: the
        (start, end) indexes, ascending, of the runs among them (a client's run of publishes,
        a replicated one: records made together, alike but for their sequences and bodies),
        each with its columns when it has them; ``via``: the instance every one of them was
        replicated from, if one was. Records that every reader steps over unread (they came
        from its peer: ``TailReader.steps_over``) are not kept, but for the last one."""
        if not self.readers:
            if self._writes:
                self.clear()
            return
        if via and len(records) > 1 and all(getattr(r, "steps_over", None) == via for r in self.readers):
            size //= len(records)
            records = records[-1:]  # (what the reader says it had received from there)
            runs = None
        if records:
            self._writes.append(records)
            self._firsts.append(records[0].position)
            self._sizes.append(size)
            self._runs.append(runs or [])
            self._size += size
        # forget the oldest writes while every reader has passed them, or over the limit
        floor = min(r.next_position for r in self.readers)
        writes, sizes = self._writes, self._sizes
        n, drop = 0, 0
        while n < len(writes) and (writes[n][-1].position < floor or self._size - drop > self.limit):
            drop += sizes[n]
            n += 1
        if n:
            del writes[:n], self._firsts[:n], sizes[:n], self._runs[:n]
            self._size -= drop

    def clear(self) -> None:
        self._writes.clear()
        self._firsts.clear()
        self._sizes.clear()
        self._runs.clear()
        self._size = 0
        self.gen += 1

    def run_columns(self, position: int, count: int) -> Columns | None:
        """The columns of up to ``count`` records from ``position`` on, within the run of
        plain publishes it belongs to (None: it is in none, or not kept)."""
        firsts = self._firsts
        if not firsts or position < firsts[0]:
            return None
        i = bisect_right(firsts, position) - 1
        k = position - firsts[i]
        runs = self._runs[i]
        j = bisect_right(runs, k, key=_start) - 1
        if j < 0:
            return None
        start, end, columns = runs[j]
        if columns is None or k >= end:
            return None
        a = k - start
        b = min(end - start, a + count)
        seqs, client_seqs, bodies = columns
        return seqs[a:b], None if client_seqs is None else client_seqs[a:b], bodies[a:b]

    def find(self, position: int) -> tuple[list[JournalRecord], int] | None:
        """The write holding ``position`` and its index there, or None (not kept)."""
        firsts = self._firsts
        if not firsts or position < firsts[0]:
            return None
        i = bisect_right(firsts, position) - 1
        records = self._writes[i]
        k = position - firsts[i]
        return (records, k) if k < len(records) else None


class SegmentReads:
    """Reads over ``_segments`` (oldest first), ``_pending`` (records not yet written) and the
    positions that bound them."""

    _segments: list[Segment]  # oldest first; the last is the active one
    _firsts: list[int]  # their first positions, for bisect
    _pending: list[JournalRecord]  # appended records not yet handed to the OS
    _written_position: int  # last position handed to the OS (or failed: a gap)
    _next_position: int  # the position the next append takes
    _dec: FrameDecoder
    _recent: RecentWrites  # the records of the last writes

    @property
    def first_position(self) -> int:  # pragma: no cover - the journal defines it
        raise NotImplementedError

    @property
    def first_timestamp(self) -> int:
        """When the oldest retained record was logged (microseconds since the epoch; 0: none),
        from the segments' metadata: no file is read (the oldest may be compressed)."""
        for seg in self._segments:
            if seg.count:
                return seg.first_ts
        return self._pending[0].timestamp if self._pending else 0

    def _segment_index(self, position: int) -> int:
        return max(bisect_right(self._firsts, position) - 1, 0)

    def read(self, from_position: int = 1, *, include_internal: bool = False,
             hold: ReadHold | None = None) -> Iterator[JournalRecord]:
        """Records with position >= ``from_position`` in log order, including ones appended while
        iterating; ends when caught up. CHECKPOINT records are skipped unless ``include_internal``.
        ``hold``: a reader that must not block; a compressed segment not decompressed yet then
        raises ``stored.SegmentPending`` (read again from after the last record taken)."""
        pos = max(from_position, 1)
        cursor: FrameCursor | None = None
        cursor_seg: Segment | None = None
        decode = self._dec.decode
        try:
            while pos < self._next_position:
                if pos > self._written_position:
                    if cursor is not None:
                        cursor.close()
                        cursor = None
                    pending = self._pending
                    rec = pending[pos - pending[0].position]
                    pos = rec.position + 1
                    if include_internal or rec.kind < INTERNAL_KIND_MIN:
                        yield rec
                    continue
                if pos < self.first_position:  # retention removed what this reader wanted
                    pos = self.first_position
                    if cursor is not None:
                        cursor.close()
                        cursor = None
                kept = self._recent.find(pos)
                if kept is not None:  # (a write still in memory: no file read, no decode)
                    if cursor is not None:
                        cursor.close()
                        cursor = None
                    records, k = kept
                    gen = self._recent.gen
                    while k < len(records) and gen == self._recent.gen:
                        rec = records[k]
                        k += 1
                        pos = rec.position + 1
                        if include_internal or rec.kind < INTERNAL_KIND_MIN:
                            yield rec
                    continue
                if cursor is None or cursor_seg is None:
                    cursor_seg = self._segments[self._segment_index(pos)]
                    try:
                        cursor = cursor_seg.cursor_at(pos, hold)
                    except JournalCorruptError:
                        if cursor_seg.cache is None:
                            raise
                        cursor = None  # a compressed segment refused (said once): a gap
                frame = cursor.next(cursor_seg.size) if cursor is not None else None
                if frame is None:  # end of this segment's flushed bytes: go on in the next one
                    if cursor is not None:
                        cursor.close()
                        cursor = None
                    j = bisect_right(self._firsts, cursor_seg.first_position)
                    if j < len(self._segments):
                        pos = max(pos, self._segments[j].first_position)
                        continue
                    pos = max(pos, self._written_position + 1)  # the rest is a gap (failed writes)
                    continue
                prefix, _off, payload = frame
                if prefix[6] < pos:
                    continue
                pos = prefix[6] + 1
                if include_internal or prefix[3] < INTERNAL_KIND_MIN:
                    yield decode(prefix, payload)
        finally:
            if cursor is not None:
                cursor.close()

    def follow_tail(self, reader: TailReader) -> None:
        """``reader`` (a replication sender) reads each record soon after it is written: the
        last writes are kept in memory from its ``next_position`` on, while it lives."""
        self._recent.readers.add(reader)

    def run_columns(self, position: int, count: int) -> Columns | None:
        """The sequences, ``s`` and bodies of up to ``count`` written records from
        ``position`` on, within the run of plain publishes it belongs to (a client's run of
        publishes), while they are in memory; None otherwise (then read the records)."""
        if position > self._written_position:
            return None
        return self._recent.run_columns(position, count)

    def stored_frames(self, position: int, at: StoredAt | None, max_bytes: int
                      ) -> tuple[bytes, str, int] | None:
        """The frames of the segment that holds ``position``, as they are in its file: about
        ``max_bytes`` from a frame at or before ``position`` (the one ``at`` names, when it was
        left there for ``position``; else the index's). Returns the bytes, the segment's file
        name and the file offset they start at; None when ``position`` is not in a written
        segment (before the first record, or still in the write buffer), or its segment is
        compressed or has nothing more: :meth:`read` then (for a streaming reader that frames records itself,
        ``server.delivery.replay_frames``; the frames are checked by their reader)."""
        if position > self._written_position or position < self.first_position:
            return None
        i = self._segment_index(position)
        seg = self._segments[i]
        if seg.cache is not None:  # compressed: the general path reads it (decompressed)
            return None
        if at is not None and at[0] == position and at[1] == seg.name:
            off = at[2]
        else:
            found = seg.index.offset_for_position(position)
            off = HEADER_SIZE if found is None else found
        size = seg.size
        if off >= size:
            return None
        fd = os.open(seg.path, os.O_RDONLY | O_CLOEXEC)
        try:
            data = os.pread(fd, min(max_bytes, size - off), off)
        finally:
            os.close(fd)
        return data, seg.name, off

    def _publisher_at(self, position: int) -> int | None:
        if position > self._written_position:
            if not self._pending or position < self._pending[0].position:
                return None
            return self._pending[position - self._pending[0].position].publisher_id
        seg = self._segments[self._segment_index(position)]
        prefix = seg.scan(seg.index.offset_for_position(position), lambda p: p[6] >= position)
        return prefix[7] if prefix is not None and prefix[6] == position else None

    def record_at(self, position: int, hold: ReadHold | None = None) -> JournalRecord | None:
        """The record at exactly ``position`` (internal ones included), or None (``hold``: see
        :meth:`read`)."""
        if position < 1 or position >= self._next_position:
            return None
        for rec in self.read(position, include_internal=True, hold=hold):
            return rec if rec.position == position else None
        return None

    def position_at_time(self, timestamp_us: int, hold: ReadHold | None = None) -> int:
        """Position of the first record with timestamp >= ``timestamp_us`` (``next_position`` if
        none; ``hold``: see :meth:`read`)."""
        segs = [s for s in self._segments if s.count]
        i = bisect_left([s.last_ts for s in segs], timestamp_us)
        for seg in segs[i:]:
            prefix = seg.scan(seg.index.offset_before_time(timestamp_us), lambda p: p[9] >= timestamp_us,
                              hold)
            if prefix is not None:
                return prefix[6]
            break  # the match (if any) is still in the write buffer
        pending = self._pending
        j = bisect_left(pending, timestamp_us, key=lambda r: r.timestamp)
        return pending[j].position if j < len(pending) else self._next_position
