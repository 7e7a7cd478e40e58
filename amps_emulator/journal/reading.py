"""The read path of :class:`~journal.file_journal.FileJournal`: records by position, by time,
and the publisher of one position, over sealed segments, the active one and the records still
in the write buffer.

A base class rather than functions: ``read`` is a generator that must see the journal's state
as it moves on (records appended, written, segments rolled or removed while a reader iterates),
so it reads the attributes of the one journal object. They are declared here, typed; the
journal's ``__init__`` sets them. Readers run on the owner thread.
"""

from __future__ import annotations

import os
from bisect import bisect_left, bisect_right
from collections.abc import Iterator

from .api import JournalCorruptError
from .record import INTERNAL_KIND_MIN, FrameDecoder, JournalRecord
from .segment import HEADER_SIZE, O_CLOEXEC, FrameCursor, Segment

#: where a reader of stored frames stopped (:meth:`SegmentReads.stored_frames`): the position
#: it goes on from, the segment's file name and the offset of the next frame to read
StoredAt = tuple[int, str, int]


class SegmentReads:
    """Reads over ``_segments`` (oldest first), ``_pending`` (records not yet written) and the
    positions that bound them."""

    _segments: list[Segment]  # oldest first; the last is the active one
    _firsts: list[int]  # their first positions, for bisect
    _pending: list[JournalRecord]  # appended records not yet handed to the OS
    _written_position: int  # last position handed to the OS (or failed: a gap)
    _next_position: int  # the position the next append takes
    _dec: FrameDecoder

    @property
    def first_position(self) -> int:  # pragma: no cover - the journal defines it
        raise NotImplementedError

    def _segment_index(self, position: int) -> int:
        return max(bisect_right(self._firsts, position) - 1, 0)

    def read(self, from_position: int = 1, *, include_internal: bool = False) -> Iterator[JournalRecord]:
        """Records with position >= ``from_position`` in log order, including ones appended while
        iterating; ends when caught up. CHECKPOINT records are skipped unless ``include_internal``."""
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
                if cursor is None or cursor_seg is None:
                    cursor_seg = self._segments[self._segment_index(pos)]
                    try:
                        cursor = cursor_seg.cursor_at(pos)
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

    def record_at(self, position: int) -> JournalRecord | None:
        """The record at exactly ``position`` (internal ones included), or None."""
        if position < 1 or position >= self._next_position:
            return None
        for rec in self.read(position, include_internal=True):
            return rec if rec.position == position else None
        return None

    def position_at_time(self, timestamp_us: int) -> int:
        """Position of the first record with timestamp >= ``timestamp_us`` (``next_position`` if none)."""
        segs = [s for s in self._segments if s.count]
        i = bisect_left([s.last_ts for s in segs], timestamp_us)
        for seg in segs[i:]:
            prefix = seg.scan(seg.index.offset_before_time(timestamp_us), lambda p: p[9] >= timestamp_us)
            if prefix is not None:
                return prefix[6]
            break  # the match (if any) is still in the write buffer
        pending = self._pending
        j = bisect_left(pending, timestamp_us, key=lambda r: r.timestamp)
        return pending[j].position if j < len(pending) else self._next_position
