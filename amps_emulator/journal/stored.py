"""Sealed segments stored elsewhere: archived to ``JournalArchiveDirectory``, compressed to
``<name>.journal.gz``, and read back transparently.

An archived or compressed segment is still part of the log: it stays in the journal's segment
list, only its ``path`` changes (and, compressed, its reader). So replays, queue recovery,
replication resync and retention see it as before.

* Archiving and compressing (:func:`store_copy`, run in a worker thread) write the new file
  as ``<final>.tmp``, fsync it, rename it into place and fsync its directory, and copy the
  segment's summary beside it the same way; only then does the journal (owner thread) switch
  the segment to the new file and delete the old one. A crash in between leaves two copies of
  one segment; recovery keeps the original (uncompressed before compressed, the journal
  directory before the archive) and deletes the copy.
* A compressed segment is gzip (what ``gzip -d`` reads). Reading one decompresses the whole
  file once into memory, kept in a least-recently-used cache bounded by
  ``CompressedJournalCacheMemoryLimit`` (:class:`CompressedCache`); a segment bigger than the
  whole limit is decompressed into an unlinked temporary file for the reader that opened it
  instead. The gzip checksum and every frame's CRC are checked as it is read, not at start-up
  (start-up trusts the summary copied with it). A file that does not decompress is refused:
  one ERROR line with its path, and readers step over the segment as over a gap.
* A reader that must not block (the event loop of a running server) reads with a
  :class:`ReadHold`: a compressed segment that is not in the cache is then decompressed in
  the cache's worker thread, and the read stops with :class:`SegmentPending` (the reader keeps
  its position, and reads on from there once the hold's ``wake`` is called). Readers without
  a hold (start-up, tools) decompress in their own thread as before. Either way a file is
  decompressed by one thread at a time however many readers want it: the others wait for it.
  A reader keeps the temporary file of a segment over the limit between its reads (a replay
  goes through it in steps), not the bytes of one under it (those are the cache's to drop).
"""

from __future__ import annotations

import gzip
import logging
import os
import re
import shutil
import tempfile
import threading
import weakref
import zlib
from collections import OrderedDict
from collections.abc import Callable, Generator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import BinaryIO, Protocol, TypeVar

from . import summary as summaries
from .api import JournalClosedError, JournalCorruptError
from .atomic import fsync_path, replace_file

log = logging.getLogger("amps_emulator.journal")
T = TypeVar("T")

#: what compressing adds to a segment's file name
GZ_SUFFIX = ".gz"
_COPY_CHUNK = 1 << 20
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
#: a segment's file name, plain or compressed (as ``segment.parse_stored_name`` reads it)
_SEGMENT_FILE = re.compile(r"[0-9]{20}\.journal(\.gz)?")


def default_cache_limit() -> int:
    """AMPS's default: a tenth of the machine's memory, at most 10 GB (256 MiB when unknown)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return 256 << 20
    return max(min(total // 10, 10 << 30), 1 << 20)


class Source(Protocol):
    """Where a cursor reads a segment's bytes from."""

    def pread(self, n: int, offset: int) -> bytes: ...

    def close(self) -> None: ...


class FdSource:
    """An open file (a plain segment, or a compressed one decompressed into a temp file)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def pread(self, n: int, offset: int) -> bytes:
        return os.pread(self.fd, n, offset)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class BytesSource:
    """A compressed segment's bytes, decompressed (shared with the cache)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def pread(self, n: int, offset: int) -> bytes:
        return self.data[offset:offset + n]

    def close(self) -> None:
        self.data = b""


def _refused(path: str, exc: BaseException) -> JournalCorruptError:
    return JournalCorruptError(f"{path}: compressed journal segment is unreadable ({exc})",
                               path=path, offset=0)


def decompress(path: str) -> bytes:
    """The whole decompressed content of ``path``; JournalCorruptError when it is not gzip,
    is cut short or fails its checksum."""
    try:
        with gzip.open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise
    except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError
        raise _refused(path, exc) from None


def _spill(path: str) -> FdSource:
    """Decompress ``path`` into an unlinked temporary file (a segment over the cache limit)."""
    tmp = tempfile.TemporaryFile()
    try:
        with gzip.open(path, "rb") as f:
            shutil.copyfileobj(f, tmp, _COPY_CHUNK)
        tmp.flush()
        fd = os.dup(tmp.fileno())
    except FileNotFoundError:
        raise
    except (OSError, EOFError, zlib.error) as exc:
        raise _refused(path, exc) from None
    finally:
        tmp.close()
    return FdSource(fd)


#: a compressed file as the cache knows it: its path, inode, size and modification time
Key = tuple[str, int, int, int]


class SegmentPending(Exception):  # noqa: N818 - not an error: the reader comes back later
    """A read with a :class:`ReadHold` reached a compressed segment that is being
    decompressed in the cache's worker: the reader stops there and reads on from where it
    stopped (with the same hold) once the hold's ``wake`` is called."""


class _Job:
    """One decompression of one file (shared by every reader that wants it meanwhile): its
    bytes (``data``), or an unlinked temporary file holding them (``fd``, a segment over the
    cache's limit; closed once no reader holds the job)."""

    __slots__ = ("key", "path", "size", "future", "data", "fd", "keep", "__weakref__")

    def __init__(self, key: Key, path: str, size: int) -> None:
        self.key = key
        self.path = path
        self.size = size
        self.future: Future[None] = Future()
        self.data: bytes | None = None
        self.fd = -1
        self.keep = True  # the bytes go into the cache (False: the segment was forgotten)

    def source(self) -> Source:
        """A reader of the result (the job's error when it failed)."""
        self.future.result()
        if self.data is not None:
            return BytesSource(self.data)
        return FdSource(os.dup(self.fd))


class ReadHold:
    """What a reader that must not block keeps between its reads: the decompression it waits
    for or last read from. ``wake`` (None: the reader looks again by itself) is called, from
    any thread, once a decompression the reader stopped for is over (done or failed)."""

    __slots__ = ("wake", "job")

    def __init__(self, wake: Callable[[], None] | None = None) -> None:
        self.wake = wake
        self.job: _Job | None = None

    @property
    def waiting(self) -> bool:
        """A decompression the reader stopped for is still running."""
        return self.job is not None and not self.job.future.done()

    def read_again(self, read: Callable[[ReadHold], T]) -> Generator[Future[None] | None, None, T]:
        """The slow path of a reader on the event loop whose ``read(self)`` just raised
        :class:`SegmentPending`: yields the decompression it stopped for (its driver goes on
        once that is done) and reads again, until a read answers; returns that answer. (The
        reader's own first read is a plain call: a read that answers at once makes no
        generator.)"""
        while True:
            yield self.job.future if self.job is not None else None
            try:
                return read(self)
            except SegmentPending:
                pass


class CompressedCache:
    """Decompressed segments by file (path and identity), least recently used first out, at
    most ``limit`` bytes in all. Thread-safe; one decompression per file at a time (a reader
    that wants a file being decompressed waits for it); a refused file is said once and not
    tried again (a new file at that path is)."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = default_cache_limit() if limit is None else max(int(limit), 0)
        self._entries: OrderedDict[Key, bytes] = OrderedDict()
        self._bytes = 0
        self._refused: dict[Key, str] = {}  # why each file refused was
        self._running: dict[Key, _Job] = {}  # decompressions under way
        self._lock = threading.Lock()
        self._worker: ThreadPoolExecutor | None = None  # for readers with a hold (made on use)
        self._closed = False
        #: decompressions run so far (tests: readers of one file share one)
        self.decompressions = 0

    @property
    def cached_bytes(self) -> int:
        return self._bytes

    def open(self, path: str, size: int, hold: ReadHold | None = None) -> Source:
        """A reader of the decompressed ``path`` (``size``: its expected length). Without
        ``hold``, decompressed in this thread (or waited for, when another is at it); with
        one, in the worker: then SegmentPending until it is done (see :class:`ReadHold`).
        JournalCorruptError: the file does not decompress."""
        st = os.stat(path)
        key = (path, st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            data = self._entries.get(key)
            if data is not None:
                self._entries.move_to_end(key)
                if hold is not None and hold.job is not None and hold.job.data is not None \
                        and hold.job.future.done():
                    hold.job = None  # (its bytes are the cache's to drop now)
                return BytesSource(data)
            refused = self._refused.get(key)
            if refused is not None:  # (a new exception: raising one again would grow its traceback)
                raise JournalCorruptError(refused, path=path, offset=0)
            job = hold.job if hold is not None else None
            if job is None or job.key != key:
                job = self._running.get(key)
            new = job is None
            if job is None:
                job = self._running[key] = _Job(key, path, size)
        if hold is None:
            if new:
                self._run(job)
            return job.source()  # (waits for the reader that is at it)
        if new and not self._submit(job):
            self._run(job)  # (closed: no worker any more)
        if not job.future.done():
            if hold.job is not job:
                hold.job = job
                wake = hold.wake
                if wake is not None:
                    job.future.add_done_callback(lambda _f: wake())
            raise SegmentPending(path)
        hold.job = job if job.data is None and job.fd >= 0 else None  # (a temp file: kept)
        return job.source()

    def _submit(self, job: _Job) -> bool:
        with self._lock:
            if self._closed:
                return False
            if self._worker is None:
                self._worker = ThreadPoolExecutor(1, thread_name_prefix="amps-gunzip")
            self._worker.submit(self._run, job, True)
            return True

    def _run(self, job: _Job, worker: bool = False) -> None:
        """Decompress ``job``'s file (any thread): into the cache, or into a temporary file
        when it is bigger than the whole limit; a refusal is logged once. In the ``worker``
        once the cache is closed, not: the job fails with JournalClosedError."""
        error: BaseException | None = None
        with self._lock:
            closed = worker and self._closed
            if not closed:
                self.decompressions += 1
        try:
            if closed:
                error = JournalClosedError(f"{job.path}: the journal is closed")
            elif job.size > self.limit:
                src = _spill(job.path)
                job.fd = src.fd
                weakref.finalize(job, os.close, src.fd)
            else:
                job.data = decompress(job.path)
        except JournalCorruptError as exc:
            log.error("journal: refused %s; its records are skipped", exc)
            error = exc
        except Exception as exc:  # the readers get it (the file removed meanwhile, no memory)
            error = exc
        with self._lock:
            self._running.pop(job.key, None)
            if isinstance(error, JournalCorruptError):
                self._refused[job.key] = str(error)
            data = job.data
            if data is not None and job.keep and job.key not in self._entries:
                self._entries[job.key] = data
                self._bytes += len(data)
                while self._bytes > self.limit and self._entries:
                    _, old = self._entries.popitem(last=False)
                    self._bytes -= len(old)
        if error is None:
            job.future.set_result(None)
        else:
            job.future.set_exception(error)

    def forget(self, path: str) -> None:
        """Drop what is cached of ``path`` (the segment was removed)."""
        with self._lock:
            for key in [k for k in self._entries if k[0] == path]:
                self._bytes -= len(self._entries.pop(key))
            for job in self._running.values():
                if job.path == path:
                    job.keep = False

    def close(self) -> None:
        """Stop the worker (the journal closed): the decompressions it has not started fail
        (JournalClosedError, their readers woken); later ones run in the reader's thread."""
        with self._lock:
            self._closed = True
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.shutdown(wait=False)


def gzip_size(path: str) -> int:
    """The size a gzip file says its content has (modulo 2**32; -1: unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(-4, os.SEEK_END)
            return int.from_bytes(f.read(4), "little")
    except OSError:
        return -1


def _sealed_summary(src: str, size: int) -> bool:
    summ, _ = summaries.read(summaries.summary_path(src))
    return summ is not None and summ.sealed and summ.size == size


def store_copy(src: str, dst: str, *, compress: bool, size: int, fsync: bool = True) -> int:
    """Write ``src`` (a sealed segment of ``size`` bytes) as ``dst``, gzip-compressed when
    ``compress``, and its summary beside it when that covers the whole segment; atomically
    (temp file, fsync, rename, fsync of the directory). ``src`` is left as it is. The bytes
    written. Any thread."""
    def fill(out: BinaryIO) -> None:
        with open(src, "rb") as f:
            if compress:
                with gzip.GzipFile(filename=os.path.basename(src), mode="wb", fileobj=out,
                                   compresslevel=6, mtime=0) as z:
                    shutil.copyfileobj(f, z, _COPY_CHUNK)
            else:
                shutil.copyfileobj(f, out, _COPY_CHUNK)

    replace_file(dst, fill, fsync=fsync)
    summary = summaries.summary_path(src)
    if _sealed_summary(src, size):
        def copy_summary(out: BinaryIO) -> None:
            with open(summary, "rb") as f:
                shutil.copyfileobj(f, out, _COPY_CHUNK)
        replace_file(summaries.summary_path(dst), copy_summary, fsync=fsync)
    else:
        summaries.remove(dst)  # (a leftover of an earlier attempt): start-up scans this one
    if fsync:
        fsync_path(os.path.dirname(dst) or ".")
    return os.path.getsize(dst)


def remove_stored(path: str) -> None:
    """Delete a segment file and its summary (missing ones are fine)."""
    for p in (path, path + ".tmp"):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
    summaries.remove(path)


def remove_journal_files(directory: str, archive: str | None) -> None:
    """Empty a journal: every file of ``directory``, and the segments (and their summaries)
    in the archive directory ``archive``."""
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            os.remove(path)
    if archive and os.path.isdir(archive):
        for name in os.listdir(archive):
            stem = name.removesuffix(".tmp").removesuffix(summaries.SUMMARY_SUFFIX)
            if _SEGMENT_FILE.fullmatch(stem):
                os.remove(os.path.join(archive, name))


__all__ = ["GZ_SUFFIX", "BytesSource", "CompressedCache", "FdSource", "ReadHold", "SegmentPending",
           "Source", "decompress",
           "default_cache_limit", "gzip_size", "remove_journal_files", "remove_stored", "store_copy"]
