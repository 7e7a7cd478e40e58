"""Segment files: naming, the 24-byte file header, per-segment metadata, and a chunked frame reader.

File naming: ``{first_position:020d}.journal`` -- the zero-padded position the segment starts
at, so lexical order is log order and an empty newest segment still tells recovery the next
position. A sealed segment may also be ``<name>.journal.gz`` and live in the archive
directory (``stored.py``): ``path`` is wherever it is now, ``cache`` reads a compressed one.
Other files in the directory are ignored (``*.corrupt`` keeps the original bytes of a
segment salvaged under ``keep_readable_on_corruption``; ``*.tmp`` are unfinished writes;
``<name>.summary`` is the segment's summary, see ``summary.py``).

File header (24 bytes, little-endian), then frames (layout in ``record.py``)::

    offset size type    field
       0     8  bytes   magic b"AMPSJRNL"
       8     4  u32     file format version: 1
      12     4  u32     header size: 24 (frames start here)
      16     8  u64     first_position (equals the number in the file name)

A :class:`Segment` is one file: its metadata (size, record
count, first/last position and timestamp, sparse index) and its writer half (the write fd,
``write``/``sync``/``truncate``/``close``, creation with its header, cutting frames off the
end, and the metadata as of the last successful write, to roll back to after a failed one).
:class:`~journal.file_journal.FileJournal` orchestrates: the write buffer, the locks, the
segment list, rolls, summaries and retention. Unlike ``msgBlock`` the write buffer stays in
the journal: it is a double buffer swapped by ``flush`` while a worker's ``sync`` runs, and
the records in it (``_pending``) serve readers of any position, so it is journal-wide state.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable

from .api import JournalCorruptError, JournalFormatError
from .index import DEFAULT_INDEX_INTERVAL, SparseIndex
from .record import FRAME_MAGIC, FRAME_VERSION, PREFIX, PREFIX_SIZE, JournalRecord, crc32
from .stored import CompressedCache, FdSource, ReadHold, Source

SEGMENT_SUFFIX = ".journal"
FILE_MAGIC = b"AMPSJRNL"
FILE_VERSION = 1
FILE_HEADER = struct.Struct("<8sIIQ")
HEADER_SIZE = FILE_HEADER.size  # 24
_NAME_RE = re.compile(r"([0-9]{20})\.journal")
_STORED_RE = re.compile(r"([0-9]{20})\.journal(\.gz)?")
READ_CHUNK = 1 << 20
fdatasync = getattr(os, "fdatasync", os.fsync)
O_CLOEXEC: int = getattr(os, "O_CLOEXEC", 0)
#: a segment's metadata as of its last successful write: count, first_record_position,
#: first_ts, last_position, last_ts, index entries, index next_position
Mark = tuple[int, int, int, int, int, int, int]
#: a frame as :meth:`FrameCursor.next` returns it: prefix fields, offset, payload (or None)
Frame = tuple[tuple[int, ...], int, bytes | None]
#: what the write path hands to ``FileOps.write``
Bytes = bytes | bytearray | memoryview


class FileOps:
    """The file calls of the journal's write path; replace one to inject faults in tests."""

    def open(self, path: str, flags: int, mode: int = 0o777) -> int:
        return os.open(path, flags, mode)

    def write(self, fd: int, data: Bytes) -> int:
        return os.write(fd, data)

    def fdatasync(self, fd: int) -> None:
        fdatasync(fd)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)


def segment_name(first_position: int) -> str:
    return f"{first_position:020d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    m = _NAME_RE.fullmatch(name)
    return int(m.group(1)) if m else None


def parse_stored_name(name: str) -> tuple[int, bool] | None:
    """``(first_position, compressed)`` of a segment file name, plain or ``.journal.gz``."""
    m = _STORED_RE.fullmatch(name)
    return (int(m.group(1)), m.group(2) is not None) if m else None


def encode_header(first_position: int) -> bytes:
    return FILE_HEADER.pack(FILE_MAGIC, FILE_VERSION, HEADER_SIZE, first_position)


def check_header(data: bytes, path: str, first_position: int) -> str | None:
    """None if ``data`` starts with a valid header for this segment, else what is wrong.

    Raises JournalFormatError for a well-formed header of an unknown version.
    """
    if len(data) < HEADER_SIZE:
        return f"file header incomplete ({len(data)} of {HEADER_SIZE} bytes)"
    magic, version, size, first = FILE_HEADER.unpack_from(data, 0)
    if magic != FILE_MAGIC:
        return "bad file magic"
    if version != FILE_VERSION or size != HEADER_SIZE:
        raise JournalFormatError(f"{path}: unsupported journal file version {version} (header size {size})")
    if first != first_position:
        return f"header first_position {first} does not match the file name ({first_position})"
    return None


class Segment:
    """One segment file: its metadata, kept in memory by FileJournal, and its writer half.

    ``size`` counts bytes handed to the OS (header + flushed frames); the other fields also
    cover records still in the journal's write buffer (readers bound disk reads by ``size``).
    ``fd`` is the write fd while the segment is active, and after a roll until the journal's
    next ``sync`` has fsynced and closed it (-1: none; readers use their own fds).
    """

    __slots__ = (
        "path",
        "first_position",
        "size",
        "count",
        "first_record_position",
        "last_position",
        "first_ts",
        "last_ts",
        "index",
        "fd",
        "cache",
        "_mark",
    )

    def __init__(self, path: str, first_position: int, index_interval: int = DEFAULT_INDEX_INTERVAL) -> None:
        self.path = path
        self.first_position = first_position
        self.size = HEADER_SIZE
        self.count = 0
        self.first_record_position = 0
        self.last_position = 0
        self.first_ts = 0
        self.last_ts = 0
        self.index = SparseIndex(index_interval)
        self.fd = -1
        #: a compressed segment's reader (None: the file at ``path`` holds the frames as is)
        self.cache: CompressedCache | None = None
        self._mark: Mark = (0, 0, 0, 0, 0, 0, 0)  # the metadata as of the last successful write

    @classmethod
    def create(cls, directory: str, first_position: int, ops: FileOps, index_interval: int) -> Segment:
        """Create the file (exclusively) with its header; the segment owns the write fd. On
        failure nothing is left behind: an empty segment would claim the next position at
        start-up."""
        path = os.path.join(directory, segment_name(first_position))
        fd = ops.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_CLOEXEC, 0o644)
        try:
            header = encode_header(first_position)
            if ops.write(fd, header) != len(header):
                raise OSError(f"short write of the header of {path}")
        except BaseException:
            os.close(fd)
            try:
                os.unlink(path)
            except OSError:  # pragma: no cover - nothing more to do
                pass
            raise
        seg = cls(path, first_position, index_interval)
        seg.fd = fd
        return seg

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    def note_record(self, position: int, offset: int, timestamp: int) -> None:
        if self.count == 0:
            self.first_record_position = position
            self.first_ts = timestamp
        self.count += 1
        self.last_position = position
        self.last_ts = timestamp
        self.index.maybe_add(position, offset, timestamp)

    def note_run(self, first: JournalRecord, last: JournalRecord, count: int) -> None:
        """:meth:`note_record`'s counts and times for ``count`` records from ``first`` to
        ``last`` (their index entries are the caller's)."""
        if not self.count:
            self.first_record_position = first.position
            self.first_ts = first.timestamp
        self.count += count
        self.last_position = last.position
        self.last_ts = last.timestamp

    # ------------------------------------------------------------------ writer half
    def open_for_append(self) -> None:
        """Open the write fd at ``size`` (the end of the valid frames, after recovery)."""
        self.fd = os.open(self.path, os.O_WRONLY | O_CLOEXEC)
        os.lseek(self.fd, self.size, os.SEEK_SET)

    def write(self, data: Bytes, ops: FileOps) -> None:
        """Hand ``data`` to the OS at the end of the file, looping over short writes. ``size``
        grows only once all of it is written; an OSError leaves it (and maybe part of the
        bytes in the file: see :meth:`truncate`)."""
        self.write_ahead(data, ops)
        self.size += len(data)

    def write_ahead(self, data: Bytes, ops: FileOps) -> None:
        """:meth:`write` without growing ``size``: the first part of frames handed over in
        several writes (``size`` grows by all of them with the last; until then readers do
        not see them, and a failed write cuts them off with the rest)."""
        view = memoryview(data)
        fd = self.fd
        write = ops.write
        try:
            while view:
                n = write(fd, view)
                view = view[n:]
        finally:
            view.release()

    def sync(self, ops: FileOps) -> None:
        ops.fdatasync(self.fd)

    def truncate(self) -> None:
        """Cut the file back to ``size`` and put the write offset there (after a failed write)."""
        os.ftruncate(self.fd, self.size)
        os.lseek(self.fd, self.size, os.SEEK_SET)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def set_mark(self) -> None:
        """Remember the metadata as it is now (after a successful write)."""
        idx = self.index
        self._mark = (self.count, self.first_record_position, self.first_ts, self.last_position,
                      self.last_ts, len(idx.positions), idx.next_position)

    def restore_mark(self) -> None:
        """Forget the records noted since :meth:`set_mark` (their write failed)."""
        (self.count, self.first_record_position, self.first_ts, self.last_position, self.last_ts,
         n_index, next_index) = self._mark
        idx = self.index
        del idx.positions[n_index:], idx.offsets[n_index:], idx.timestamps[n_index:]
        idx.next_position = next_index

    def cut_after(self, position: int, ops: FileOps) -> None:
        """Remove every frame after ``position`` (write fd closed): rebuild the metadata from
        the frames that stay, truncate the file after them, reopen the write fd at the end
        and fdatasync it."""
        old_size = self.size
        self.count = self.first_record_position = self.last_position = self.first_ts = self.last_ts = 0
        self.index = SparseIndex(self.index.interval)
        cursor = FrameCursor(self.path, HEADER_SIZE)
        end = HEADER_SIZE
        try:
            while (frame := cursor.next(old_size, payload=False)) is not None and frame[0][6] <= position:
                prefix, off, _ = frame
                self.note_record(prefix[6], off, prefix[9])
                end = cursor.offset
        finally:
            cursor.close()
        self.size = end
        fd = ops.open(self.path, os.O_WRONLY | O_CLOEXEC)
        self.fd = fd
        os.ftruncate(fd, end)
        os.lseek(fd, end, os.SEEK_SET)
        ops.fdatasync(fd)
        self.set_mark()

    # ------------------------------------------------------------------ reader half
    def open_cursor(self, offset: int, hold: ReadHold | None = None) -> FrameCursor:
        """A cursor at ``offset`` of the segment's frames (a compressed one decompressed: see
        ``stored.py``; JournalCorruptError when it does not decompress; with ``hold``,
        SegmentPending while it is being decompressed)."""
        if self.cache is None:
            return FrameCursor(self.path, offset)
        return FrameCursor(self.path, offset, self.cache.open(self.path, self.size, hold))

    def cursor_at(self, position: int, hold: ReadHold | None = None) -> FrameCursor:
        """A cursor at the last indexed frame at or before ``position``."""
        off = self.index.offset_for_position(position)
        return self.open_cursor(HEADER_SIZE if off is None else off, hold)

    def scan(
        self, start_offset: int | None, predicate: Callable[[tuple[int, ...]], bool],
        hold: ReadHold | None = None,
    ) -> tuple[int, ...] | None:
        """The prefix of the first flushed frame from ``start_offset`` (None: the first frame)
        that ``predicate`` accepts, or None (also for a compressed segment that is refused).
        ``hold``: see :meth:`open_cursor`."""
        try:
            cursor = self.open_cursor(HEADER_SIZE if start_offset is None else start_offset, hold)
        except JournalCorruptError:
            if self.cache is None:
                raise
            return None
        try:
            while True:
                frame = cursor.next(self.size, payload=False)
                if frame is None:
                    return None
                if predicate(frame[0]):
                    return frame[0]
        finally:
            cursor.close()

    def __repr__(self) -> str:
        return f"Segment({self.name}, size={self.size}, records={self.count})"


class FrameCursor:
    """Sequential, verified frame reader over one segment file (own fd, big ``pread`` chunks;
    or over ``source``, a compressed segment's decompressed bytes).

    ``next(limit)`` returns ``(prefix_tuple, frame_offset, payload_bytes)`` or None when the
    next frame would start at or beyond ``limit`` (the segment's flushed size, re-read by the
    caller each time, so a cursor keeps working while the segment grows).
    """

    __slots__ = ("path", "_src", "_buf", "_base", "_pos")

    def __init__(self, path: str, offset: int, source: Source | None = None) -> None:
        self.path = path
        self._src: Source = FdSource(os.open(path, os.O_RDONLY | O_CLOEXEC)) if source is None \
            else source
        self._buf = b""
        self._base = offset
        self._pos = 0

    @property
    def offset(self) -> int:
        return self._base + self._pos

    def close(self) -> None:
        self._src.close()

    def _fill(self, off: int, need: int, limit: int) -> None:
        n = min(max(need, READ_CHUNK), limit - off)
        data = self._src.pread(n, off)
        if len(data) < need:
            raise JournalCorruptError(
                f"{self.path}: file ends at offset {off + len(data)} inside a frame expected to end "
                f"at {off + need}",
                path=self.path,
                offset=off,
            )
        self._buf = data
        self._base = off
        self._pos = 0

    def next(self, limit: int, *, payload: bool = True) -> Frame | None:
        off = self._base + self._pos
        if off + PREFIX_SIZE > limit:
            return None
        if len(self._buf) - self._pos < PREFIX_SIZE:
            self._fill(off, PREFIX_SIZE, limit)
        prefix = PREFIX.unpack_from(self._buf, self._pos)
        total = PREFIX_SIZE + prefix[5]
        if prefix[1] != FRAME_MAGIC or off + total > limit:
            raise JournalCorruptError(f"{self.path}: no valid frame at offset {off}",
                                      path=self.path, offset=off)
        if len(self._buf) - self._pos < total:
            self._fill(off, total, limit)
            prefix = PREFIX.unpack_from(self._buf, 0)
        p = self._pos
        view = memoryview(self._buf)
        if crc32(view[p + 4 : p + total]) != prefix[0]:
            raise JournalCorruptError(f"{self.path}: checksum mismatch at offset {off}",
                                      path=self.path, offset=off)
        if prefix[2] != FRAME_VERSION:
            raise JournalFormatError(f"{self.path}: unsupported record version {prefix[2]} at offset {off}")
        body = self._buf[p + PREFIX_SIZE : p + total] if payload else None
        self._pos = p + total
        return prefix, off, body
