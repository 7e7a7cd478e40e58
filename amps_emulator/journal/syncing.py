"""The sync side of :class:`~journal.file_journal.FileJournal`: making written records durable.

``sync`` fdatasyncs what ``flush`` wrote (the active segment, the segments retired by rolls
since, the directory when segments came or went) and publishes ``durable_position``; its two
halves, ``begin_sync`` and ``end_sync``, let the server's compiled sync thread run the file
syncs itself (a :class:`SyncJob` says what to sync). After a failed sync,
``discard_unsynced`` cuts every record after ``durable_position`` out of the files. The
threading (which lock guards what, who closes retired fds) is described in
``file_journal.py``'s docstring.

A base class rather than functions, as :class:`~journal.reading.SegmentReads` is: these
methods move the journal's own state (positions, fds, segments) under its locks, so they read
the attributes of the one journal object, declared here, typed; the journal's ``__init__``
sets them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from . import summary as summaries
from .api import Durability, JournalError, JournalSyncError, WriteFailure
from .base import JournalCore
from .reading import RecentWrites, Run
from .record import JournalRecord
from .segment import FileOps, Segment

__all__ = ["SegmentSync", "SyncJob"]


class SyncJob:
    """What one ``sync`` covers (:meth:`FileJournal.begin_sync`): ``target`` is the written
    position it makes durable, ``fds`` the files to fdatasync (the retired segments' and the
    active one's), ``dir_fd`` the directory to fsync (-1: none)."""

    __slots__ = ("dir_fd", "fds", "retired", "target")

    def __init__(self, target: int, retired: list[Segment], fds: list[int], dir_fd: int) -> None:
        self.target = target
        self.retired = retired
        self.fds = fds
        self.dir_fd = dir_fd


class SegmentSync(JournalCore):
    """``sync`` and its halves, and the cut after a failed one (see the module docstring)."""

    _dir: str  # the journal directory
    _dir_fd: int  # the directory (flock'd; fsynced after segments come and go)
    _dir_dirty: bool  # segments were created or removed since the directory's fsync
    _segments: list[Segment]  # oldest first; the last is the active one
    _firsts: list[int]  # their first positions, for bisect
    _retired: list[Segment]  # rolled segments whose write fd the next sync closes
    _buf: bytearray  # frames not yet flushed
    _buf_written: int  # of which a sliced flush handed to the OS already
    _pending: list[JournalRecord]  # their records, for readers
    _pending_runs: list[Run]  # runs among them: (start, end) indexes, a plain run's columns
    _pending_via: str | None  # the instance all of them came from ("": not one; None: none)
    _recent: RecentWrites  # the records of the last writes, for readers
    _written_position: int  # last position handed to the OS (or failed: a gap); _lock
    _durable_position: int  # last position fsynced; under _lock
    _roll_blocked: bool  # a roll failed: retry once a flush succeeds again
    _failure: BaseException | None  # why the journal failed for good (None: it did not)
    _defer_summaries: bool  # sync leaves summaries to write_summaries()
    _ckpt_size_at: int  # active segment size at its last snapshot
    _lock: threading.Lock  # guards positions, fds and pending summaries across threads
    _sync_lock: threading.Lock  # one sync (or close) at a time; retired fds close under it
    _summq: summaries.SummaryQueue  # snapshots waiting to be durable, and their writer
    file_ops: FileOps  # the file calls of the write path
    write_failures: list[WriteFailure]  # records the file system refused, in order

    @property
    def _fd(self) -> int:
        """The active segment's write fd (-1: none)."""
        return self._segments[-1].fd if self._segments else -1

    @_fd.setter
    def _fd(self, fd: int) -> None:
        self._segments[-1].fd = fd

    def _guard(self, fn: Callable[[int], None], fd: int) -> None:
        try:
            fn(fd)
        except OSError as exc:
            self._failure = exc
            self._closed = True
            raise JournalError(f"journal write failed in {self._dir}: {exc}") from exc

    def _sync_now(self, position: int) -> None:
        self._guard(self.file_ops.fdatasync, self._fd)
        if self._dir_dirty:
            self._dir_dirty = False
            self._guard(self.file_ops.fsync, self._dir_fd)
        with self._lock:
            if position > self._durable_position:
                self._durable_position = position
        if self._summq.pending and not self._defer_summaries:
            self._summq.write_due()

    def sync(self) -> int:
        """fdatasync what ``flush`` wrote; return the new ``durable_position``. Thread-safe.

        Covers exactly the positions written before the call started. No-op in memory mode.
        """
        if self._durability is Durability.MEMORY:
            self._close_retired_if_idle()
            return self.durable_position
        job = self.begin_sync()
        if job is None:
            return self.durable_position
        error: OSError | None = None
        try:
            ops = self.file_ops
            for fd in job.fds:
                ops.fdatasync(fd)
            if job.dir_fd >= 0:
                ops.fsync(job.dir_fd)
        except OSError as exc:
            error = exc
        return self.end_sync(job, error)

    def begin_sync(self) -> SyncJob | None:
        """``sync``'s first half, for a caller that runs the file syncs itself (the server's
        compiled sync thread): take the sync lock and say what to sync. The caller then
        fdatasyncs each of ``job.fds`` and fsyncs ``job.dir_fd`` unless it is -1 (``file_ops``
        is bypassed), and must call :meth:`end_sync` with the job, from any thread: until then
        no other sync runs and no fd of the job is closed. None: the journal is closed."""
        self._sync_lock.acquire()
        with self._lock:
            if self._fd < 0:
                self._sync_lock.release()
                return None
            retired = list(self._retired)
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            job = SyncJob(self._written_position, retired,
                          [*(seg.fd for seg in retired), self._fd],
                          self._dir_fd if dir_dirty else -1)
        if job.target <= self._durable_position and not retired and not dir_dirty:
            job.fds = []  # (nothing new: only the lock round trip)
        return job

    def extend_sync(self, job: SyncJob) -> int | None:
        """While ``job``'s files are being synced: the written position one more fdatasync of
        its active file (the last of ``job.fds``) would make durable, when everything written
        since ``begin_sync`` went there; None when a roll put it elsewhere (or nothing is new).
        The caller sets ``job.target`` to it once that sync is under way."""
        with self._lock:
            if self._retired != job.retired or not job.fds or self._fd != job.fds[-1] \
                    or self._written_position <= job.target:
                return None
            return self._written_position

    def note_synced(self, position: int) -> None:
        """A sync of a running job (begin_sync .. end_sync) made ``position`` durable; its
        persisted acks may go before the job ends."""
        with self._lock:
            if position > self._durable_position:
                self._durable_position = position

    def end_sync(self, job: SyncJob, error: OSError | None) -> int:
        """``sync``'s second half: ``error`` None when every sync of ``job`` succeeded, else
        the failure (raised as ``JournalSyncError``, nothing claimed durable). Publishes the
        new ``durable_position``, closes the retired fds and releases the sync lock."""
        try:
            if error is not None:
                with self._lock:
                    self._dir_dirty = self._dir_dirty or job.dir_fd >= 0
                raise JournalSyncError(f"journal fsync failed in {self._dir}: {error}", error) from error
            with self._lock:
                for seg in job.retired:
                    self._retired.remove(seg)
                    seg.close()
                if job.target > self._durable_position:
                    self._durable_position = job.target
                durable = self._durable_position
        finally:
            self._sync_lock.release()
        if self._summq.pending and not self._defer_summaries:
            self._summq.write_due()
        return durable

    def discard_unsynced(self, error: BaseException) -> WriteFailure | None:
        """After a failed ``sync``: cut every record after ``durable_position`` out of the files
        (owner thread, no sync running), fsync the cut, and report those positions (None when
        there were none). Raises JournalError (and the journal is failed) if the cut fails."""
        durable = self._durable_position
        last = self._next_position - 1
        self._buf = bytearray()
        self._buf_written = 0  # (a sliced flush's part is past the cut: the next buffer starts at 0)
        self._pending, self._pending_runs, self._pending_via = [], [], None
        self._recent.clear()  # (it may hold records the cut removes)
        if last <= durable:
            return None
        try:
            self._cut_after(durable)
        except OSError as exc:
            self._failure = exc
            self._closed = True
            raise JournalError(f"journal fsync failed in {self._dir} ({error}) and the records "
                               f"after position {durable} could not be cut off ({exc})") from exc
        q = self._unapplied_s
        while q and q[-1][0] > durable:
            q.pop()
        with self._lock:
            self._summq.drop_after(durable)
            self._written_position = self._durable_position = last  # the cut is durable: a gap
        self._roll_blocked = False
        failure = WriteFailure(durable + 1, last, error)
        self.write_failures.append(failure)
        return failure

    def _cut_after(self, position: int) -> None:
        """Remove every frame after ``position`` from the files (deleting the segments that
        start after it), rebuild the active segment's metadata from what stays, fsync."""
        with self._sync_lock, self._lock:
            for seg in self._retired:
                seg.close()
            self._retired = []
            self._segments[-1].close()
        while len(self._segments) > 1 and not 0 < self._segments[-1].first_record_position <= position:
            seg = self._segments.pop()
            self._firsts.pop()
            self._summq.crc_base.pop(seg.first_position, None)
            summaries.remove(seg.path)
            os.unlink(seg.path)
        active = self._segments[-1]
        self._summq.crc_base.pop(active.first_position, None)
        active.cut_after(position, self.file_ops)
        self._ckpt_size_at = min(self._ckpt_size_at, active.size)
        self.file_ops.fsync(self._dir_fd)
        self._dir_dirty = False

    def _close_retired_if_idle(self) -> None:
        if self._sync_lock.acquire(blocking=False):
            try:
                with self._lock:
                    retired, self._retired = self._retired, []
                for seg in retired:
                    seg.close()
            finally:
                self._sync_lock.release()
