"""The files of a FileJournal's retention: which positions retention removed, and removing.

Retention deletes whole oldest segments (``FileJournal.enforce_retention`` decides which, with
``JournalCore._plan_retention``). Before it deletes any, it records in ``retained-from`` the
first position it keeps, so that at start-up a missing oldest segment that retention did NOT
remove is told apart from one it did (:func:`check_oldest`): that is acked data lost, said
loudly (or refused under ``strict``), never silently.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable

from . import summary as summaries
from .api import Durability, JournalError, RetentionResult
from .atomic import replace_file
from .base import JournalCore
from .segment import Segment

__all__ = ["RETAINED_FROM", "check_oldest", "read_retained_from", "remove_segments", "write_retained_from"]

log = logging.getLogger("amps_emulator.journal")

#: file in the journal directory holding the first position retention kept (absent: 1)
RETAINED_FROM = "retained-from"


def read_retained_from(directory: str) -> int:
    """The first position retention left (1 when it never removed anything)."""
    try:
        with open(os.path.join(directory, RETAINED_FROM)) as f:
            return max(int(f.read().strip() or 1), 1)
    except (OSError, ValueError):
        return 1


def write_retained_from(directory: str, dir_fd: int, position: int, *, fsync: bool) -> None:
    """Atomically record ``position`` as the first one retention keeps (temp file, rename)."""
    replace_file(os.path.join(directory, RETAINED_FROM), f"{position}\n".encode(), fsync=fsync)
    if fsync:
        os.fsync(dir_fd)


def check_oldest(directory: str, first: int | None, *, strict: bool) -> str | None:
    """Segments missing at the start of the log (``first``: the oldest found, None: none)
    that retention did not remove: acked data lost without a word unless said here. Returns
    the error to log and report (None: nothing is missing); raises under ``strict``."""
    expected = read_retained_from(directory)
    if first is None and expected == 1 or first is not None and first <= expected:
        return None
    what = (f"positions {expected}..{first - 1}" if first is not None
            else f"every segment from position {expected} on")
    msg = (f"journal {directory}: the oldest segment file(s) are missing ({what}); retention "
           f"removed only the positions before {expected}, so the messages they held are lost")
    if strict:
        raise JournalError(msg + "; restore the missing files, or start without the strict "
                           "option to accept the loss")
    log.error("%s", msg)
    return msg


def remove_segments(segments: list[Segment]) -> None:
    """Delete these (sealed, write fd closed) segments' files and summaries."""
    for seg in segments:
        os.unlink(seg.path)
        summaries.remove(seg.path)
        if seg.cache is not None:
            seg.cache.forget(seg.path)
        log.info("journal retention: removed %s (%d bytes, %d records)", seg.path, seg.size, seg.count)


class SegmentRetention(JournalCore):
    """``enforce_retention`` for a journal of segment files (the base of
    :class:`~journal.file_journal.FileJournal`, which sets the attributes declared here)."""

    _segments: list[Segment]  # oldest first; the last is the active one
    _firsts: list[int]  # their first positions, for bisect
    _dir: str  # the journal directory
    _dir_fd: int  # the directory, open (fsynced after segments come and go)
    _dir_dirty: bool  # segments were created or removed since the directory's fsync
    _busy: set[int]  # first positions of segments being archived or compressed: kept

    def enforce_retention(self, pinned_positions: Iterable[int] = (), *,
                          age: float | None = None) -> RetentionResult:
        """Delete whole oldest segments beyond ``retention_bytes`` / ``retention_age``.

        Never the newest segment, never one holding (or after) the lowest pinned position (a
        live replay's next position), and only once the next segment's leading CHECKPOINT is
        durable (so de-dup state survives). Owner thread only.
        """
        if age is None and self._retention_bytes is None and self._retention_age is None:
            return RetentionResult()
        durable = self.durable_position

        def can_remove(i: int) -> bool:
            if self._segments[i].first_position in self._busy:
                return False  # being archived or compressed: later (no gaps: nor the ones after)
            nxt = self._segments[i + 1]
            return nxt.count == 0 or nxt.first_record_position <= durable

        n, blocked, reasons = self._plan_retention(self._segments, pinned_positions, can_remove, age)
        removed = self._segments[:n]
        if removed:  # first, so a crash in between never reads as segments gone missing
            write_retained_from(self._dir, self._dir_fd, self._segments[n].first_position,
                                fsync=self._durability is not Durability.MEMORY)
            remove_segments(removed)
            del self._segments[:n]
            del self._firsts[:n]
            self._dir_dirty = True
            if self._seqidx is not None:
                self._seqidx.trim(self.first_position)
        return RetentionResult(
            removed=tuple(s.name for s in removed),
            bytes_removed=sum(s.size for s in removed),
            records_removed=sum(s.count for s in removed),
            blocked_by_pin=blocked,
            reasons=tuple(reasons),
        )
