"""Segment files: naming, the 24-byte file header, per-segment metadata, and a chunked frame reader.

File naming: ``{first_position:020d}.journal`` -- the zero-padded position the segment starts
at, so lexical order is log order and an empty newest segment still tells recovery the next
position. Other files in the directory are ignored (``*.corrupt`` keeps the original bytes
of a segment salvaged under ``keep_readable_on_corruption``; ``*.tmp`` are unfinished writes;
``<name>.summary`` is the segment's summary, see ``summary.py``).

File header (24 bytes, little-endian), then frames (layout in ``record.py``)::

    offset size type    field
       0     8  bytes   magic b"AMPSJRNL"
       8     4  u32     file format version: 1
      12     4  u32     header size: 24 (frames start here)
      16     8  u64     first_position (equals the number in the file name)
"""

from __future__ import annotations

import os
import re
import struct
import zlib

from .api import JournalCorruptError, JournalFormatError
from .index import DEFAULT_INDEX_INTERVAL, SparseIndex
from .record import FRAME_MAGIC, FRAME_VERSION, PREFIX, PREFIX_SIZE

SEGMENT_SUFFIX = ".journal"
FILE_MAGIC = b"AMPSJRNL"
FILE_VERSION = 1
FILE_HEADER = struct.Struct("<8sIIQ")
HEADER_SIZE = FILE_HEADER.size  # 24
_NAME_RE = re.compile(r"([0-9]{20})\.journal")
READ_CHUNK = 1 << 20


def segment_name(first_position: int) -> str:
    return f"{first_position:020d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    m = _NAME_RE.fullmatch(name)
    return int(m.group(1)) if m else None


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
    """Metadata of one segment file, kept in memory by FileJournal.

    ``size`` counts bytes handed to the OS (header + flushed frames); the other fields also
    cover records still in the journal's write buffer (readers bound disk reads by ``size``).
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

    def __repr__(self) -> str:
        return f"Segment({self.name}, size={self.size}, records={self.count})"


class FrameCursor:
    """Sequential, verified frame reader over one segment file (own fd, big ``pread`` chunks).

    ``next(limit)`` returns ``(prefix_tuple, frame_offset, payload_bytes)`` or None when the
    next frame would start at or beyond ``limit`` (the segment's flushed size, re-read by the
    caller each time, so a cursor keeps working while the segment grows).
    """

    __slots__ = ("path", "fd", "_buf", "_base", "_pos")

    def __init__(self, path: str, offset: int) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self._buf = b""
        self._base = offset
        self._pos = 0

    @property
    def offset(self) -> int:
        return self._base + self._pos

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _fill(self, off: int, need: int, limit: int) -> None:
        n = min(max(need, READ_CHUNK), limit - off)
        data = os.pread(self.fd, n, off)
        if len(data) < need:
            raise JournalCorruptError(
                f"{self.path}: file ends at offset {off + len(data)} inside a frame expected to end at {off + need}",
                path=self.path,
                offset=off,
            )
        self._buf = data
        self._base = off
        self._pos = 0

    def next(self, limit: int, *, payload: bool = True):
        off = self._base + self._pos
        if off + PREFIX_SIZE > limit:
            return None
        if len(self._buf) - self._pos < PREFIX_SIZE:
            self._fill(off, PREFIX_SIZE, limit)
        prefix = PREFIX.unpack_from(self._buf, self._pos)
        total = PREFIX_SIZE + prefix[5]
        if prefix[1] != FRAME_MAGIC or off + total > limit:
            raise JournalCorruptError(f"{self.path}: no valid frame at offset {off}", path=self.path, offset=off)
        if len(self._buf) - self._pos < total:
            self._fill(off, total, limit)
            prefix = PREFIX.unpack_from(self._buf, 0)
        p = self._pos
        view = memoryview(self._buf)
        if zlib.crc32(view[p + 4 : p + total]) != prefix[0]:
            raise JournalCorruptError(f"{self.path}: checksum mismatch at offset {off}", path=self.path, offset=off)
        if prefix[2] != FRAME_VERSION:
            raise JournalFormatError(f"{self.path}: unsupported record version {prefix[2]} at offset {off}")
        body = self._buf[p + PREFIX_SIZE : p + total] if payload else None
        self._pos = p + total
        return prefix, off, body
