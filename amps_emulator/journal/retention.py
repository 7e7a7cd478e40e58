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

from . import summary as summaries
from .api import JournalError
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
    path = os.path.join(directory, RETAINED_FROM)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{position}\n")
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
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
        log.info("journal retention: removed %s (%d bytes, %d records)", seg.path, seg.size, seg.count)
