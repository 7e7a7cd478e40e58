"""Archiving and compressing a FileJournal's sealed segments (``do-archive-journal``,
``do-compress-journal``), in three steps so the file work runs off the owner thread:

1. :meth:`SegmentHousekeeping.plan_store` (owner thread) picks the segments and marks them
   busy (retention then keeps them and everything after them);
2. :func:`perform` (any thread) writes the new file beside or into the archive
   (``stored.store_copy``: atomic, the original left as is);
3. :meth:`SegmentHousekeeping.finish_store` (owner thread) switches the segment to the new
   file and deletes the original; if the segment is gone meanwhile, or the journal closed,
   or the copy failed, it deletes the copy instead.

Which segments: not the active one, not one whose write fd is still open or whose records
are not all durable, not one whose summary is still to be written, and not one written to
(its last record) less than ``age`` ago on the journal's clock. Archiving takes the ones
not in the archive yet (compressed or not); compressing the ones not compressed yet,
wherever they are. Archived and compressed segments stay in the log: see ``stored.py``.
"""

from __future__ import annotations

import dataclasses
import os

from .api import Durability
from .base import JournalCore
from .segment import Segment
from .stored import GZ_SUFFIX, CompressedCache, remove_stored, store_copy
from .summary import SummaryQueue

__all__ = ["SegmentHousekeeping", "StoreMove", "perform"]


@dataclasses.dataclass
class StoreMove:
    """One segment to archive or compress: its file now and the file it gets."""

    segment: Segment
    src: str
    dst: str
    compress: bool
    fsync: bool
    #: the bytes written (set by :func:`perform`)
    written: int = 0
    #: why the copy failed (set by :func:`perform`)
    error: OSError | None = None


def perform(move: StoreMove) -> StoreMove:
    """Write ``move``'s new file (any thread); an OSError is kept in ``move.error``."""
    try:
        move.written = store_copy(move.src, move.dst, compress=move.compress,
                                  size=move.segment.size, fsync=move.fsync)
    except OSError as exc:
        move.error = exc
    return move


class SegmentHousekeeping(JournalCore):
    """The archive and compress steps of :class:`~journal.file_journal.FileJournal` (which sets
    the attributes declared here)."""

    _segments: list[Segment]
    _dir: str
    _dir_dirty: bool
    _summq: SummaryQueue
    #: JournalArchiveDirectory (None: none configured)
    archive_directory: str | None
    #: the reader of compressed segments
    compressed_cache: CompressedCache
    #: first positions of the segments being archived or compressed (retention keeps them)
    _busy: set[int]

    def plan_store(self, what: str, age: float) -> list[StoreMove]:
        """The segments to ``archive`` or ``compress`` now (marked busy until
        :meth:`finish_store`). ValueError: archiving without an archive directory."""
        compress = what == "compress"
        archive = self.archive_directory
        if not compress:
            if not archive:
                raise ValueError("the TransactionLog has no JournalArchiveDirectory")
            os.makedirs(archive, exist_ok=True)
        now_us = int(self._clock() * 1_000_000)
        age_us = int(age * 1_000_000)
        durable = self.durable_position
        with self._summq.lock:
            waiting = {p[1] for p in self._summq.pending}
        moves = []
        for seg in self._segments[:-1]:
            if seg.fd >= 0 or seg.last_position > durable or seg.path in waiting \
                    or seg.first_position in self._busy:
                continue
            if seg.count and now_us - seg.last_ts <= age_us:
                break  # the later ones were written later still
            name = os.path.basename(seg.path)
            if compress:
                if seg.cache is not None:
                    continue
                dst = seg.path + GZ_SUFFIX
            else:
                assert archive is not None
                if os.path.dirname(os.path.abspath(seg.path)) == os.path.abspath(archive):
                    continue
                dst = os.path.join(archive, name)
            self._busy.add(seg.first_position)
            moves.append(StoreMove(seg, seg.path, dst, compress,
                                   self._durability is not Durability.MEMORY))
        return moves

    def finish_store(self, move: StoreMove) -> bool:
        """Switch the segment to its new file and delete the old one (owner thread); False
        (and the copy deleted) when the copy failed, the segment is gone or the journal
        closed meanwhile."""
        seg = move.segment
        self._busy.discard(seg.first_position)
        if move.error is not None or self._closed or seg not in self._segments \
                or seg.path != move.src:
            remove_stored(move.dst)  # (a copy: the segment's file is still move.src)
            return False
        seg.path = move.dst
        if move.compress:
            seg.cache = self.compressed_cache
        remove_stored(move.src)  # open readers keep reading it through their own fds
        self.compressed_cache.forget(move.src)
        self._dir_dirty = True
        return True
