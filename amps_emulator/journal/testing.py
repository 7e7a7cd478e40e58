"""Test helpers for the journal: a file layer whose disk fills up on demand."""

from __future__ import annotations

import errno
import os

from .segment import Bytes, FileOps


class DiskFull(FileOps):
    """``FileJournal.file_ops`` for a disk with ``free`` bytes left (None: no limit). Writes
    behave as on a full file system: a write that does not fit writes what fits and the next
    one fails with ``ENOSPC``. Set ``free`` again (e.g. to None) when space returns.
    ``failing_fsyncs``: that many next ``fdatasync`` calls fail with ``ENOSPC`` (as on
    file systems that allocate at writeback)."""

    def __init__(self, free: int | None = None, failing_fsyncs: int = 0) -> None:
        self.free = free
        self.failing_fsyncs = failing_fsyncs
        self.refused = 0  # writes that failed

    def fdatasync(self, fd: int) -> None:
        if self.failing_fsyncs > 0:
            self.failing_fsyncs -= 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        super().fdatasync(fd)

    def write(self, fd: int, data: Bytes) -> int:
        if self.free is None:
            return os.write(fd, data)
        if self.free <= 0:
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = os.write(fd, data[: self.free])
        self.free -= n
        return n
