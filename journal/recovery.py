"""Start-up recovery of a journal directory: verify every frame, rebuild the sparse indexes and
the per-publisher / de-duplication maps, cut a torn tail, refuse (or salvage) corruption.

Policy (redis ``aof.c`` / nats ``filestore.go`` style):

* Every frame's CRC32, magic, length and version are checked, and positions must strictly
  increase. The scan reads one whole segment at a time and only unpacks the fixed 52-byte
  prefix (see ``record.py``); payloads are decoded only for CHECKPOINT records.
* A bad frame with no valid frame after it, in the newest segment that holds data, is a torn
  tail (a crash during a write): the file is truncated there and a warning names the file,
  offset, bytes and (best effort) records lost. An incomplete file header of the newest
  segment is rewritten the same way.
* A bad frame followed by a valid one (or in a segment older than one holding data) is
  corruption: ``JournalCorruptError`` naming file and offset, unless
  ``keep_readable_on_corruption`` -- then the segment is rewritten with only its readable
  frames (the original bytes are kept as ``<name>.corrupt``), with a warning per dropped range.
* A frame with a valid CRC but an unknown version raises ``JournalFormatError``: data from
  a newer writer is never truncated.
* Known limitation: a crash can, on some filesystems, leave a zero-filled hole followed by
  later pages of the same (unacknowledged) write. That reads as corruption in the middle
  and needs the operator flag.
"""

from __future__ import annotations

import logging
import os
import zlib
from typing import Callable, Optional

from .api import JournalCorruptError, JournalFormatError, LostData
from .index import DEFAULT_INDEX_INTERVAL
from .record import FRAME_MAGIC, FRAME_VERSION, PREFIX, PREFIX_SIZE, RecordKind
from .segment import HEADER_SIZE, Segment, check_header, encode_header, parse_segment_name

log = logging.getLogger("journal.recovery")

_CHECKPOINT = int(RecordKind.CHECKPOINT)
_INTERNAL_MIN = 64


def scan_frames(
    data: bytes,
    start: int,
    prev_last: int,
    seg: Segment,
    pub_last: dict,
    client_max: dict,
    on_checkpoint: Callable[[bytes], None],
) -> tuple[int, Optional[str]]:
    """Scan frames of ``data`` from ``start`` until the end or the first bad frame.

    Updates ``seg`` (count, first/last position and timestamp, index) and the two maps.
    Returns ``(end_offset, problem)``; ``problem`` is None when the scan reached the end.
    This is the recovery hot loop: keep it free of calls per record.
    """
    n = len(data)
    mv = memoryview(data)
    unpack = PREFIX.unpack_from
    crc32 = zlib.crc32
    get = client_max.get
    idx = seg.index
    add_p, add_o, add_t = idx.positions.append, idx.offsets.append, idx.timestamps.append
    next_idx = idx.next_position
    interval = idx.interval
    count = seg.count
    first_rec, first_ts = seg.first_record_position, seg.first_ts
    last_pos = max(prev_last, seg.last_position, seg.first_position - 1)
    last_ts = seg.last_ts
    off = start
    problem = None
    magic_ok = FRAME_MAGIC
    while off < n:
        if n - off < PREFIX_SIZE:
            problem = f"incomplete frame prefix ({n - off} bytes)"
            break
        crc, magic, ver, kind, flags, plen, pos, pid, seq, ts, cs = unpack(data, off)
        end = off + PREFIX_SIZE + plen
        if magic != magic_ok:
            problem = "bad frame magic"
            break
        if end > n:
            problem = f"frame of {PREFIX_SIZE + plen} bytes runs past the end of the file"
            break
        if crc32(mv[off + 4 : end]) != crc:
            problem = "checksum mismatch"
            break
        if ver != FRAME_VERSION:
            raise JournalFormatError(f"{seg.path}: unsupported record version {ver} at offset {off}")
        if pos <= last_pos:
            problem = f"position {pos} does not follow {last_pos}"
            break
        if pos >= next_idx:
            add_p(pos)
            add_o(off)
            add_t(ts)
            next_idx = pos + interval
        if count == 0:
            first_rec, first_ts = pos, ts
        count += 1
        if kind < _INTERNAL_MIN:
            pub_last[pid] = seq
            if flags & 1 and cs > get(pid, 0):
                client_max[pid] = cs
        elif kind == _CHECKPOINT:
            on_checkpoint(bytes(mv[off + PREFIX_SIZE : end]))
        last_pos = pos
        last_ts = ts
        off = end
    idx.next_position = next_idx
    if count:
        seg.count = count
        seg.first_record_position, seg.first_ts = first_rec, first_ts
        seg.last_position, seg.last_ts = last_pos, last_ts
    return off, problem


def find_next_valid_frame(data: bytes, after: int) -> Optional[int]:
    """Offset of the first frame with a valid CRC starting after offset ``after`` (any version)."""
    n = len(data)
    mv = memoryview(data)
    marker = bytes([FRAME_MAGIC])
    cand = after + 1
    while True:
        j = data.find(marker, cand + 4)
        if j < 0:
            return None
        cand = j - 4
        if cand + PREFIX_SIZE <= n:
            prefix = PREFIX.unpack_from(data, cand)
            end = cand + PREFIX_SIZE + prefix[5]
            if end <= n and zlib.crc32(mv[cand + 4 : end]) == prefix[0]:
                return cand
        cand += 1


def count_frames(data: bytes, start: int, stop: int) -> int:
    """Best-effort number of frames (complete or partial) in ``data[start:stop]`` (>= 1 if non-empty)."""
    count = 0
    off = start
    while off < stop:
        count += 1
        if stop - off < PREFIX_SIZE:
            break
        prefix = PREFIX.unpack_from(data, off)
        if prefix[1] != FRAME_MAGIC:
            break
        off += PREFIX_SIZE + prefix[5]
    return count


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Recovery:
    """One recovery run over a directory. ``run()`` fills the public attributes."""

    def __init__(
        self,
        directory: str,
        *,
        keep_readable: bool,
        index_interval: int = DEFAULT_INDEX_INTERVAL,
        pub_last: dict,
        client_max: dict,
        on_checkpoint: Callable[[bytes], None],
        fsync: bool = True,
    ) -> None:
        self.directory = directory
        self.keep_readable = keep_readable
        self.index_interval = index_interval
        self.pub_last = pub_last
        self.client_max = client_max
        self.on_checkpoint = on_checkpoint
        self.fsync = fsync
        self.segments: list[Segment] = []
        self.truncated: list[LostData] = []
        self.skipped: list[LostData] = []
        self.warnings: list[str] = []
        self.last_position = 0

    def _warn(self, msg: str) -> None:
        log.warning("%s", msg)
        self.warnings.append(msg)

    def run(self) -> None:
        names = sorted(
            (pos, name) for name in os.listdir(self.directory) if (pos := parse_segment_name(name)) is not None
        )
        paths = [os.path.join(self.directory, name) for _, name in names]
        sizes = [os.path.getsize(p) for p in paths]
        for i, ((first, _name), path) in enumerate(zip(names, paths)):
            later_has_data = any(sz > HEADER_SIZE for sz in sizes[i + 1 :])
            self._recover_segment(path, first, later_has_data)

    # ------------------------------------------------------------------ per segment
    def _recover_segment(self, path: str, first: int, later_has_data: bool) -> None:
        prev_last = self.last_position
        if self.segments:
            prev = self.segments[-1]
            if first <= prev_last:
                raise JournalCorruptError(
                    f"{path}: segment starts at position {first} but the previous segment "
                    f"{prev.name} already holds position {prev_last}",
                    path=path,
                    offset=0,
                )
            if prev_last and first != prev_last + 1:
                self._warn(f"{path}: positions {prev_last + 1}..{first - 1} are absent between segments")
        with open(path, "rb") as f:
            data = f.read()
        seg = Segment(path, first, self.index_interval)
        header_problem = check_header(data, path, first)
        start: Optional[int] = HEADER_SIZE
        bad: list[tuple[int, int, str]] = []  # corrupt ranges (start, end, reason)
        if header_problem is not None:
            nxt = find_next_valid_frame(data, -1)
            if nxt is None and not later_has_data:
                self._rewrite_empty(path, first, data, header_problem)
                self.segments.append(seg)
                return
            if not self.keep_readable:
                raise JournalCorruptError(
                    f"{path}: {header_problem} at offset 0, and the file or a later segment holds "
                    "valid records; pass keep_readable_on_corruption=True to keep what is readable",
                    path=path,
                    offset=0,
                )
            bad.append((0, nxt if nxt is not None else len(data), header_problem))
            start = nxt
        tail: Optional[tuple[int, str]] = None
        off = start
        while off is not None:
            end, problem = scan_frames(data, off, prev_last, seg, self.pub_last, self.client_max, self.on_checkpoint)
            if problem is None:
                break
            nxt = find_next_valid_frame(data, end)
            if nxt is None and not later_has_data:
                tail = (end, problem)
                break
            if not self.keep_readable:
                what = "valid records follow it" if nxt is not None else "a later segment holds records"
                raise JournalCorruptError(
                    f"{path}: {problem} at offset {end}, and {what}, so this is not a torn tail; "
                    "pass keep_readable_on_corruption=True to keep what is readable",
                    path=path,
                    offset=end,
                )
            bad.append((end, nxt if nxt is not None else len(data), problem))
            off = nxt
        if bad:
            seg = self._salvage(path, first, data, bad, tail, prev_last)
        elif tail is not None:
            self._truncate(path, data, tail)
            seg.size = tail[0]
        else:
            seg.size = len(data)
        self.segments.append(seg)
        if seg.count:
            self.last_position = seg.last_position

    # ------------------------------------------------------------------ repairs
    def _rewrite_empty(self, path: str, first: int, data: bytes, problem: str) -> None:
        lost = LostData(path, 0, len(data), count_frames(data, HEADER_SIZE, len(data)) if len(data) > HEADER_SIZE else 0, problem)
        self._warn(
            f"journal recovery: {path}: {problem}; newest segment holds no valid record, "
            f"rewrote its header ({len(data)} bytes dropped)"
        )
        with open(path, "r+b") as f:
            f.truncate(0)
            f.write(encode_header(first))
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())
        self.truncated.append(lost)

    def _truncate(self, path: str, data: bytes, tail: tuple[int, str]) -> None:
        offset, problem = tail
        lost_bytes = len(data) - offset
        lost_records = count_frames(data, offset, len(data))
        msg = (
            f"journal recovery: torn tail in {path} at offset {offset} ({problem}): truncated "
            f"{lost_bytes} bytes, {lost_records} record(s) lost"
        )
        self._warn(msg)
        os.truncate(path, offset)
        if self.fsync:
            _fsync_path(path)
        self.truncated.append(LostData(path, offset, lost_bytes, lost_records, problem))

    def _salvage(
        self,
        path: str,
        first: int,
        data: bytes,
        bad: list[tuple[int, int, str]],
        tail: Optional[tuple[int, str]],
        prev_last: int,
    ) -> Segment:
        """Rewrite ``path`` with only its readable frames; keep the original as ``.corrupt``."""
        cuts = sorted(bad)
        if tail is not None:
            cuts.append((tail[0], len(data), tail[1]))
        pieces = [encode_header(first)]
        cursor = 0 if cuts[0][0] == 0 else HEADER_SIZE
        for b_start, b_end, reason in cuts:
            if b_start > cursor:
                pieces.append(data[cursor:b_start])
            nrec = count_frames(data, b_start, b_end)
            lost = LostData(path, b_start, b_end - b_start, nrec, reason)
            self._warn(
                f"journal recovery: corruption in {path} at offset {b_start} ({reason}): kept readable "
                f"records, dropped {b_end - b_start} bytes, ~{nrec} record(s)"
            )
            (self.truncated if tail is not None and b_start == tail[0] else self.skipped).append(lost)
            cursor = max(cursor, b_end)
        if cursor < len(data):
            pieces.append(data[cursor:])
        new_data = b"".join(pieces)
        keep = path + ".corrupt"
        n = 1
        while os.path.exists(keep):
            n += 1
            keep = f"{path}.corrupt{n}"
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(new_data)
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())
        os.rename(path, keep)
        os.rename(tmp, path)
        if self.fsync:
            _fsync_path(self.directory)
        # Re-index the rewritten file (map updates are idempotent: same records, same order).
        seg = Segment(path, first, self.index_interval)
        end, problem = scan_frames(new_data, HEADER_SIZE, prev_last, seg, self.pub_last, self.client_max, self.on_checkpoint)
        if problem is not None:  # pragma: no cover - salvage kept only verified frames
            raise JournalCorruptError(f"{path}: salvage failed at offset {end}: {problem}", path=path, offset=end)
        seg.size = len(new_data)
        return seg
