"""Segment summaries: what recovery would rebuild by scanning a segment's first ``size`` bytes,
stored next to the segment so that start-up costs O(unverified tail) instead of O(journal).

A summary file ``<segment name>.summary`` (e.g. ``00000000000000000001.journal.summary``)
describes the bytes ``[0, size)`` of its segment -- the file header and whole frames, ending on
a frame boundary -- as the writer knew them when they were durable:

* the segment metadata (record count, first/last position, first/last timestamp) and its sparse
  position/time index (``index.py``) over those bytes;
* the journal-wide per-publisher last sequences and de-duplication high-water marks as of the
  last record in those bytes (cumulative, like a CHECKPOINT record's body: they include older
  segments, even ones that retention removed);
* ``file_crc``: ``zlib.crc32`` of the segment bytes ``[0, size)``.

When is one written (never in ``memory`` durability, which fsyncs nothing)
--------------------------------------------------------------------------
* By FileJournal, for the active segment, every ``checkpoint_bytes`` (default 8 MiB) of
  journal data, on close, and for a segment it rolls (``sealed``, covering the whole file).
  The summary is a snapshot taken right after a ``flush`` (when the in-memory state describes
  exactly the bytes written), and it is written by ``sync`` (or, with ``defer_summaries``, by
  ``write_summaries`` in a worker of the server) only once ``durable_position`` covers it, so
  a summary never claims bytes that are not on stable storage.
* For every segment recovery had to scan (no summary, a bad one, or a tail after it), after
  fsyncing that segment: the next start-up is then fast even after a crash. (The server
  writes these in a worker after the journal opened, not before its "ready" line.)

Every file is written atomically: ``<name>.summary.tmp``, fsync, rename over ``<name>.summary``.
A crash leaves either the old summary (it claims less, still true) or the new one.

How recovery uses one (``recovery.py``)
---------------------------------------
A summary is trusted only if its own checksum, magic and version are right, it names the same
segment and index interval, the segment file is at least ``size`` bytes long, and
``zlib.crc32`` of the file's bytes ``[0, size)`` equals ``file_crc``. That last check reads the
covered bytes at C speed (an mmap, ~3 GB/s: ~0.1 s for a 300 MB journal, against ~1 s for the
per-frame Python scan), so damage anywhere in a summarised range is still detected AT START-UP:
a mismatch just makes recovery ignore the summary and scan that segment frame by frame, which
reports the damage exactly as before (``JournalCorruptError`` with the file and offset of the
bad frame, or the salvage under ``keep_readable_on_corruption``). A missing, damaged, stale or
foreign summary therefore can only cost time, never correctness. Frames after ``size`` are
scanned as usual (torn-tail truncation included).

File layout (little-endian)::

    offset size type   field
       0     8  bytes  magic b"AMPSJSUM"
       8     4  u32    summary format version: 1
      12     4  u32    body length
      16     4  u32    zlib.crc32 of the body
      20     n         body: one MessagePack array, the fields of ``SegmentSummary`` in order
                       (index arrays as little-endian int64 bytes)
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import sys
import threading
from array import array
from collections.abc import Callable

import msgspec

from .atomic import fsync_path, replace_file
from .index import SparseIndex
from .record import crc32

SUMMARY_SUFFIX = ".summary"
SUMMARY_MAGIC = b"AMPSJSUM"
SUMMARY_VERSION = 1
_HEAD = struct.Struct("<8sIII")
_CHUNK = 8 << 20
_LITTLE = sys.byteorder == "little"
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
log = logging.getLogger("amps_emulator.journal")


class SegmentSummary(msgspec.Struct, array_like=True, gc=False):
    """The state of one segment's first ``size`` bytes (see the module docstring)."""

    first_position: int  # the segment's (file name) first position
    size: int  # bytes [0, size) of the file are covered
    file_crc: int  # zlib.crc32 of those bytes
    sealed: bool  # written when the segment was rolled (covers the whole file)
    count: int
    first_record_position: int
    last_position: int
    first_ts: int
    last_ts: int
    index_interval: int
    index_next: int
    index_positions: bytes
    index_offsets: bytes
    index_timestamps: bytes
    publishers: list[tuple[int, int]]  # cumulative: [publisher id, last sequence]
    clients: list[tuple[int, int]]  # cumulative: [publisher id, highest s]


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(SegmentSummary)


def _array_bytes(a: array) -> bytes:
    if _LITTLE:
        return a.tobytes()
    b = array("q", a)  # pragma: no cover - big-endian hosts
    b.byteswap()  # pragma: no cover
    return b.tobytes()  # pragma: no cover


def _bytes_array(data: bytes) -> array:
    a = array("q")
    a.frombytes(data)
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        a.byteswap()
    return a


def summary_path(segment_path: str) -> str:
    return segment_path + SUMMARY_SUFFIX


#: what a summary copies from a segment, and back (the sparse index's arrays as bytes)
_SEGMENT_FIELDS = ("size", "count", "first_record_position", "last_position", "first_ts",
                   "last_ts")
_INDEX_ARRAYS = ("positions", "offsets", "timestamps")


def snapshot(seg, *, file_crc: int, sealed: bool, publishers, clients) -> SegmentSummary:
    """A summary of ``seg`` (a ``segment.Segment``) as it is now: ``seg.size`` bytes covered."""
    idx = seg.index
    return SegmentSummary(
        first_position=seg.first_position,
        file_crc=file_crc,
        sealed=sealed,
        index_interval=idx.interval,
        index_next=idx.next_position,
        publishers=list(publishers),
        clients=list(clients),
        size=seg.size,
        count=seg.count,
        first_record_position=seg.first_record_position,
        last_position=seg.last_position,
        first_ts=seg.first_ts,
        last_ts=seg.last_ts,
        index_positions=_array_bytes(idx.positions),
        index_offsets=_array_bytes(idx.offsets),
        index_timestamps=_array_bytes(idx.timestamps),
    )


def encode(summary: SegmentSummary) -> bytes:
    body = _encoder.encode(summary)
    return _HEAD.pack(SUMMARY_MAGIC, SUMMARY_VERSION, len(body), crc32(body)) + body


def decode(data: bytes) -> tuple[SegmentSummary | None, str]:
    """``(summary, "")`` or ``(None, why it is not usable)``. Never raises on bad input."""
    if len(data) < _HEAD.size:
        return None, "summary file too short"
    magic, version, length, crc = _HEAD.unpack_from(data, 0)
    if magic != SUMMARY_MAGIC:
        return None, "bad summary magic"
    if version != SUMMARY_VERSION:
        return None, f"unknown summary version {version}"
    body = memoryview(data)[_HEAD.size :]
    if len(body) != length:
        return None, f"summary body is {len(body)} bytes, header says {length}"
    if crc32(body) != crc:
        return None, "summary checksum mismatch"
    try:
        s = _decoder.decode(body)
    except (msgspec.DecodeError, ValueError, TypeError) as exc:
        return None, f"undecodable summary ({exc})"
    n = len(s.index_positions)
    if n % 8 or len(s.index_offsets) != n or len(s.index_timestamps) != n:
        return None, "inconsistent summary index"
    if s.count < 0 or (s.count and not s.first_position <= s.first_record_position <= s.last_position):
        return None, "inconsistent summary positions"
    return s, ""


def read(path: str) -> tuple[SegmentSummary | None, str]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None, "no summary"
    except OSError as exc:
        return None, f"cannot read summary: {exc}"
    return decode(data)


def apply_to(summary: SegmentSummary, seg) -> None:
    """Set ``seg``'s metadata and sparse index from ``summary`` (``seg.size`` = covered bytes)."""
    for f in _SEGMENT_FIELDS:
        setattr(seg, f, getattr(summary, f))
    idx = SparseIndex(summary.index_interval)
    for a in _INDEX_ARRAYS:
        setattr(idx, a, _bytes_array(getattr(summary, "index_" + a)))
    idx.next_position = summary.index_next
    seg.index = idx


def file_crc(path: str, size: int, start: int = 0, crc: int = 0) -> int:
    """``zlib.crc32`` of ``path``'s bytes ``[start, size)`` continuing ``crc``.

    Raises OSError (or ValueError) when the file is shorter than ``size`` or unreadable.
    """
    if size <= start:
        return crc
    fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
    try:
        if start == 0:
            if os.fstat(fd).st_size < size:
                raise ValueError(f"{path} is shorter than {size} bytes")
            with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as m:
                return crc32(m)
        off = start
        while off < size:
            data = os.pread(fd, min(_CHUNK, size - off), off)
            if not data:
                raise ValueError(f"{path} is shorter than {size} bytes")
            crc = crc32(data, crc)
            off += len(data)
        return crc
    finally:
        os.close(fd)


def write(segment_path: str, summary: SegmentSummary, *, fsync: bool = True) -> None:
    """Atomically replace ``segment_path``'s summary (temp file, fsync, rename)."""
    path = summary_path(segment_path)
    replace_file(path, encode(summary), fsync=fsync, mode=0o644)


def remove(segment_path: str) -> None:
    for p in (summary_path(segment_path), summary_path(segment_path) + ".tmp"):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


#: a summary waiting to be durable: (position it describes, segment path, summary, made by recovery)
Pending = tuple[int, str, SegmentSummary, bool]


class SummaryQueue:
    """A FileJournal's summaries waiting until ``durable_position`` covers them, and their writer.

    ``pending`` is guarded by ``lock``, the journal's own lock, under which its
    ``durable_position`` changes too (so "which are due" is decided consistently); callers of
    :meth:`drop_after` hold it. ``crc_base`` (per segment, the ``(size, crc32 of [0, size))``
    of its last summary written, so the next one only reads what was added) is guarded by
    the writers' lock: one writer at a time, from any thread.
    """

    def __init__(self, lock: threading.Lock, durable_position: Callable[[], int]) -> None:
        self.lock = lock  # the journal's lock: guards ``pending``
        self._durable_position = durable_position  # read under ``lock``
        self.pending: list[Pending] = []  # oldest first
        self._write_lock = threading.Lock()  # serialises writers; guards ``crc_base``
        self.crc_base: dict[int, tuple[int, int]] = {}  # first_position -> (size, crc32 of [0, size))
        self._warned = False  # a write failed (logged once)

    def add(self, position: int, segment_path: str, summary: SegmentSummary, recovered: bool = False) -> None:
        with self.lock:
            self.pending.append((position, segment_path, summary, recovered))

    def due(self, durable: int) -> bool:
        pending = self.pending
        return bool(pending) and pending[0][0] <= durable

    def drop_after(self, position: int) -> None:
        """Forget the summaries of positions after ``position`` (cut off; caller holds ``lock``)."""
        self.pending = [p for p in self.pending if p[0] <= position]

    def write_due(self) -> None:
        """Write the queued summaries that ``durable_position`` now covers (after an fsync)."""
        with self.lock:
            if not self.pending:
                return
            durable = self._durable_position()
            due = [p for p in self.pending if p[0] <= durable]
            if not due:
                return
            self.pending = [p for p in self.pending if p[0] > durable]
        newest = {p[2].first_position: p for p in due}  # per segment, only the latest due one
        with self._write_lock:
            for _pos, path, summ, recovered in newest.values():
                first = summ.first_position
                start, crc = self.crc_base.get(first, (0, 0))
                if start > summ.size:  # pragma: no cover - an older snapshot written late (racing writers)
                    start, crc = 0, 0
                try:
                    if recovered:  # crc known; the bytes were read, maybe not yet durable
                        fsync_path(path)
                    else:
                        summ.file_crc = file_crc(path, summ.size, start, crc)
                    write(path, summ)
                except FileNotFoundError:  # retention removed the segment meanwhile
                    self.crc_base.pop(first, None)
                    continue
                except (OSError, ValueError) as exc:
                    if not self._warned:
                        self._warned = True
                        log.warning("journal: cannot write the summary of %s (%s); start-up will scan more",
                                    path, exc)
                    continue
                if summ.sealed:
                    self.crc_base.pop(first, None)
                else:
                    self.crc_base[first] = (summ.size, summ.file_crc)
