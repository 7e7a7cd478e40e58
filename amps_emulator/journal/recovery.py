"""Start-up recovery of a journal directory: verify every frame not covered by a trusted segment
summary, rebuild the sparse indexes and the per-publisher / de-duplication maps, cut a torn tail,
refuse (or salvage) corruption.

Cost: O(unverified tail), not O(journal). For each segment, a summary file (``summary.py``)
that is intact, names this segment and matches ``zlib.crc32`` of the bytes it covers gives the
segment's metadata, sparse index and the cumulative publisher/de-dup maps for those bytes
without a per-frame loop; only the frames after it (the tail of the active segment since its
last checkpoint, normally a few MB at most) are scanned below. The whole-range CRC costs one
C-speed pass over the covered bytes (~0.1 s per 300 MB, page cache warm), so damage inside a
summarised range is still found at start-up: a missing, unreadable, damaged, stale or
mismatching summary makes recovery scan that segment in full exactly as described next (the
same errors, offsets, truncation and salvage as without summaries). After scanning (all or a
tail of) a segment, recovery hands a fresh summary of it to the journal, which writes it once
the segment is fsynced (``pending_summaries``); ``*.summary.tmp`` leftovers and summaries of
segments that no longer exist are deleted.

Policy for scanned frames:

* Every frame's CRC32, magic, length and version are checked, and positions must strictly
  increase. The scan reads one whole segment (or its unsummarised tail) at a time and only
  unpacks the fixed 52-byte prefix (see ``record.py``); payloads are decoded only for
  CHECKPOINT records.
* A bad frame with no valid frame after it, in the newest segment that holds data, is a torn
  tail (a crash during a write) only when it is genuinely incomplete (:func:`is_torn`): fewer
  bytes than a prefix, a length that runs past the end of the file, or zero-filled pages to
  the end of the file (pages a crash left unwritten). Then the file is truncated there and a
  warning names the file, offset, bytes and (best effort) records lost. An incomplete file
  header of the newest segment is rewritten the same way.
* A bad frame that is complete (its whole length is in the file, and it is not zeros) is
  damage even when it is the very last record: its checksum was written with it, so it was
  once whole (and maybe acked). Like a bad frame followed by a valid one (or in a segment
  older than one holding data), that is corruption: ``JournalCorruptError`` naming file and offset, unless
  ``keep_readable_on_corruption`` -- then the segment is rewritten with only its readable
  frames (the original bytes are kept as ``<name>.corrupt``), with a warning per dropped range.
  (Found in the tail after a summary, this falls back to the full scan of the segment, so the
  error or salvage is the same as without the summary.)
* A frame with a valid CRC but an unknown version raises ``JournalFormatError``: data from
  a newer writer is never truncated.
* Known limitation: a crash can, on some filesystems, leave a zero-filled hole followed by
  later pages of the same (unacknowledged) write. That reads as corruption in the middle
  and needs the operator flag.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from . import summary as summaries
from .api import JournalCorruptError, JournalFormatError, LostData
from .atomic import fsync_path
from .base import merge_checkpoint
from .index import DEFAULT_INDEX_INTERVAL
from .record import FRAME_MAGIC, FRAME_VERSION, PREFIX, PREFIX_SIZE, RecordKind, crc32
from .segment import HEADER_SIZE, Segment, check_header, encode_header, parse_stored_name
from .stored import GZ_SUFFIX, CompressedCache, decompress, gzip_size, remove_stored
from .summary import SUMMARY_SUFFIX, SegmentSummary

log = logging.getLogger("amps_emulator.journal.recovery")

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
    base: int = 0,
) -> tuple[int, str | None]:
    """Scan frames of ``data`` from ``start`` until the end or the first bad frame.

    ``data`` holds the segment's bytes from file offset ``base`` on (0: the whole file).
    Updates ``seg`` (count, first/last position and timestamp, index) and the two maps.
    Returns ``(end_offset, problem)`` (offset in ``data``); ``problem`` is None when the scan
    reached the end. This is the recovery hot loop: keep it free of calls per record.
    """
    n = len(data)
    mv = memoryview(data)
    unpack = PREFIX.unpack_from
    check = crc32
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
        if check(mv[off + 4 : end]) != crc:
            problem = "checksum mismatch"
            break
        if ver != FRAME_VERSION:
            raise JournalFormatError(f"{seg.path}: unsupported record version {ver} at offset {off}")
        if pos <= last_pos:
            problem = f"position {pos} does not follow {last_pos}"
            break
        if pos >= next_idx:
            add_p(pos)
            add_o(off + base)
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


PAGE_SIZE = 4096


def is_torn(data, off: int, base: int = 0) -> bool:
    """True when the bad frame at ``off`` of ``data`` (file offset ``base + off``), with no
    valid frame after it, is an incomplete write rather than damage: fewer bytes than a
    prefix, a declared length running past the end, or everything from a page boundary inside
    it (or from the frame itself) to the end of the file is zero -- pages a crash left
    unwritten. A complete frame with other content whose checksum fails is damage."""
    n = len(data)
    if n - off < PREFIX_SIZE:
        return True
    if off + PREFIX_SIZE + PREFIX.unpack_from(data, off)[5] > n:
        return True
    zeros_from = len(bytes(data[off:]).rstrip(b"\0")) + off  # trailing zeros start here
    if zeros_from == off:
        return True
    first_page = -(-(base + zeros_from) // PAGE_SIZE) * PAGE_SIZE - base
    return first_page < n


def find_next_valid_frame(data: bytes, after: int) -> int | None:
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
            if end <= n and crc32(mv[cand + 4 : end]) == prefix[0]:
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
        archive: str | None = None,
        cache: CompressedCache | None = None,
    ) -> None:
        self.directory = directory
        self.archive = archive  # JournalArchiveDirectory (None: none)
        self.cache = cache if cache is not None else CompressedCache()  # compressed segments' reader
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
        # Summaries to write once the segments are fsynced: (segment path, summary). Only
        # collected when ``fsync`` (a summary must never describe bytes that may not be durable).
        self.pending_summaries: list[tuple[str, SegmentSummary]] = []
        # (size, crc32 of bytes [0, size)) of the newest segment, when known: the journal
        # extends it for the checkpoints it writes later.
        self.crc_base: tuple[int, int] | None = None
        self.summarised = 0  # segments whose summary was trusted
        self.scanned_bytes = 0  # bytes verified frame by frame

    def _warn(self, msg: str) -> None:
        log.warning("%s", msg)
        self.warnings.append(msg)

    def run(self) -> None:
        found = self._listing()
        names = sorted(found)
        paths = [found[first] for first in names]
        sizes = [os.path.getsize(p) for p in paths]
        for i, (first, path) in enumerate(zip(names, paths, strict=True)):
            later_has_data = any(sz > HEADER_SIZE for sz in sizes[i + 1 :])
            if path.endswith(GZ_SUFFIX):
                self._recover_compressed(path, first)
                continue
            self._recover_segment(path, first, later_has_data, sizes[i],
                                  os.path.exists(summaries.summary_path(path)),
                                  i == len(names) - 1)

    def _listing(self) -> dict[int, str]:
        """The segment files of the journal and archive directories, one per first position:
        a second copy of one (an archive or compression that a crash interrupted) is deleted,
        keeping the original (uncompressed before compressed, journal directory before
        archive). Summaries of no segment and unfinished writes are deleted too."""
        dirs = [self.directory] + ([self.archive] if self.archive and os.path.isdir(self.archive)
                                   and not os.path.samefile(self.archive, self.directory) else [])
        copies: dict[int, list[tuple[bool, int, str]]] = {}
        for rank, d in enumerate(dirs):
            listing = os.listdir(d)
            present = set()
            for name in listing:
                parsed = parse_stored_name(name)
                if parsed is not None:
                    present.add(name)
                    copies.setdefault(parsed[0], []).append((parsed[1], rank, os.path.join(d, name)))
                elif name.endswith(".tmp") and parse_stored_name(name[:-4]) is not None:
                    _unlink(os.path.join(d, name))  # a write interrupted before its rename
            for name in listing:
                if name.endswith(SUMMARY_SUFFIX + ".tmp"):
                    stem, leftover = name[: -len(SUMMARY_SUFFIX + ".tmp")], True
                elif name.endswith(SUMMARY_SUFFIX):
                    stem, leftover = name[: -len(SUMMARY_SUFFIX)], False
                else:
                    continue
                if parse_stored_name(stem) is None:
                    continue
                if leftover or stem not in present:  # an unfinished write, or its segment is gone
                    _unlink(os.path.join(d, name))
        found: dict[int, str] = {}
        for first, options in copies.items():
            options.sort()
            found[first] = options[0][2]
            for _, _, extra in options[1:]:
                self._warn(f"journal recovery: {extra} is a second copy of {options[0][2]} "
                           "(an archive or compression was interrupted); deleted it")
                remove_stored(extra)
        return found

    # ------------------------------------------------------------------ per segment
    def _recover_segment(
        self, path: str, first: int, later_has_data: bool, size: int = -1, has_summary: bool = False,
        newest: bool = True,
    ) -> None:
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
        if has_summary:
            summ = self._trusted_summary(path, first, prev_last, size)
            if summ is not None and self._recover_from_summary(path, first, summ, prev_last,
                                                               later_has_data, newest):
                return
        with open(path, "rb") as f:
            data = f.read()
        self.scanned_bytes += len(data)
        seg = Segment(path, first, self.index_interval)
        header_problem = check_header(data, path, first)
        start: int | None = HEADER_SIZE
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
        tail: tuple[int, str] | None = None
        off = start
        while off is not None:
            end, problem = scan_frames(data, off, prev_last, seg, self.pub_last, self.client_max,
                                       self.on_checkpoint)
            if problem is None:
                break
            nxt = find_next_valid_frame(data, end)
            if nxt is None and not later_has_data and is_torn(data, end):
                tail = (end, problem)
                break
            if not self.keep_readable:
                if nxt is not None:
                    what = "valid records follow it"
                elif later_has_data:
                    what = "a later segment holds records"
                else:
                    what = "the record is complete (a write that was cut short would not be)"
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
            data = b""  # the salvaged file's crc is computed from disk below
        elif tail is not None:
            self._truncate(path, data, tail)
            seg.size = tail[0]
        else:
            seg.size = len(data)
        self.segments.append(seg)
        if seg.count:
            self.last_position = seg.last_position
        if self.fsync:
            if data:
                crc = crc32(memoryview(data)[: seg.size])
            else:
                crc = summaries.file_crc(path, seg.size)
            self._summarise(seg, crc, newest)

    def _recover_compressed(self, path: str, first: int) -> None:
        """A compressed segment (sealed by construction): from its summary when it has a usable
        one (its bytes are checked when read: gzip's checksum and each frame's), else
        decompressed and scanned. One that does not decompress or holds a bad frame is left
        out with a warning: its positions are a gap, the file stays for the operator."""
        prev_last = self.last_position
        if self.segments and first <= prev_last:
            raise JournalCorruptError(
                f"{path}: segment starts at position {first} but the previous segment "
                f"{self.segments[-1].name} already holds position {prev_last}", path=path, offset=0)
        if prev_last and first != prev_last + 1:
            self._warn(f"{path}: positions {prev_last + 1}..{first - 1} are absent between segments")
        seg = Segment(path, first, self.index_interval)
        seg.cache = self.cache
        summ, _why = summaries.read(summaries.summary_path(path))
        if summ is not None and summ.sealed and summ.first_position == first \
                and summ.index_interval == self.index_interval \
                and gzip_size(path) == summ.size & 0xFFFFFFFF \
                and not (summ.count and summ.first_record_position <= prev_last):
            summaries.apply_to(summ, seg)
            merge_checkpoint(summ, self.pub_last, self.client_max)
            self.summarised += 1
        else:
            try:
                data = decompress(path)
                if check_header(data, path, first) is not None:
                    raise JournalCorruptError(f"{path}: bad file header", path=path, offset=0)
            except JournalCorruptError as exc:
                self._warn(f"journal recovery: {exc}; left out (its positions are a gap)")
                return
            self.scanned_bytes += len(data)
            end, problem = scan_frames(data, HEADER_SIZE, prev_last, seg, self.pub_last,
                                       self.client_max, self.on_checkpoint)
            if problem is not None:
                self._warn(f"journal recovery: {path}: {problem} at offset {end} (decompressed); "
                           "left out (its positions are a gap)")
                return
            seg.size = len(data)
            self._summarise(seg, crc32(data), False)
        self.segments.append(seg)
        if seg.count:
            self.last_position = seg.last_position

    # ------------------------------------------------------------------ summaries
    def _summarise(self, seg: Segment, crc: int, newest: bool) -> None:
        """Queue a summary of ``seg`` as recovered (written by the journal after fsync)."""
        if newest:
            self.crc_base = (seg.size, crc)
        if not self.fsync:
            return
        self.pending_summaries.append(
            (
                seg.path,
                summaries.snapshot(
                    seg, file_crc=crc, sealed=not newest,
                    publishers=self.pub_last.items(), clients=self.client_max.items(),
                ),
            )
        )

    def _trusted_summary(self, path: str, first: int, prev_last: int, size: int) -> SegmentSummary | None:
        """The segment's summary if it can be trusted (see ``summary.py``), else None."""
        spath = summaries.summary_path(path)
        summ, why = summaries.read(spath)
        if summ is not None:
            if summ.first_position != first:
                why = f"summary is for position {summ.first_position}"
            elif summ.index_interval != self.index_interval:
                why = f"summary index interval {summ.index_interval} is not {self.index_interval}"
            elif not HEADER_SIZE <= summ.size <= size:
                why = f"summary covers {summ.size} bytes, the file has {size}"
            elif summ.count and summ.first_record_position <= prev_last:
                why = f"summary starts at position {summ.first_record_position}, not after {prev_last}"
            else:
                try:
                    crc = summaries.file_crc(path, summ.size)
                except (OSError, ValueError) as exc:
                    why = f"cannot check the summary: {exc}"
                else:
                    if crc == summ.file_crc:
                        return summ
                    why = f"the segment's first {summ.size} bytes do not match its summary (crc32)"
        self._warn(f"journal recovery: {spath}: {why}; scanning {path} in full")
        return None

    def _recover_from_summary(
        self, path: str, first: int, summ: SegmentSummary, prev_last: int, later_has_data: bool, newest: bool
    ) -> bool:
        """Recover a segment from its summary plus a scan of the frames after it. False: a
        problem in that tail that is not a torn tail -- the caller scans the segment in full."""
        seg = Segment(path, first, self.index_interval)
        summaries.apply_to(summ, seg)
        merge_checkpoint(summ, self.pub_last, self.client_max)  # same two maps as a CHECKPOINT
        crc = summ.file_crc
        with open(path, "rb") as f:
            f.seek(summ.size)
            tail = f.read()
        if tail:
            self.scanned_bytes += len(tail)
            end, problem = scan_frames(
                tail, 0, prev_last, seg, self.pub_last, self.client_max, self.on_checkpoint,
                base=summ.size,
            )
            if problem is not None:
                if later_has_data or find_next_valid_frame(tail, end) is not None or not is_torn(
                        tail, end, summ.size):
                    return False
                self._truncate(path, tail, (end, problem), base=summ.size)
                tail = tail[:end]  # a copy of what stays (recovery, once per torn segment)
            seg.size = summ.size + len(tail)
            if self.fsync:
                crc = crc32(tail, crc)
        self.summarised += 1
        self.segments.append(seg)
        if seg.count:
            self.last_position = seg.last_position
        if len(tail) or seg.size != summ.size:
            self._summarise(seg, crc, newest)
        elif newest:
            self.crc_base = (seg.size, crc)
        return True

    # ------------------------------------------------------------------ repairs
    def _rewrite_empty(self, path: str, first: int, data: bytes, problem: str) -> None:
        frames = count_frames(data, HEADER_SIZE, len(data)) if len(data) > HEADER_SIZE else 0
        lost = LostData(path, 0, len(data), frames, problem)
        self._warn(
            f"journal recovery: {path}: {problem}; newest segment holds no valid record, "
            f"rewrote its header ({len(data)} bytes dropped)"
        )
        summaries.remove(path)
        with open(path, "r+b") as f:
            f.truncate(0)
            f.write(encode_header(first))
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())
        self.truncated.append(lost)

    def _truncate(self, path: str, data: bytes, tail: tuple[int, str], base: int = 0) -> None:
        """Cut ``path`` at ``base + tail[0]``; ``data`` holds the file's bytes from ``base`` on."""
        rel, problem = tail
        offset = base + rel
        lost_bytes = len(data) - rel
        lost_records = count_frames(data, rel, len(data))
        msg = (
            f"journal recovery: torn tail in {path} at offset {offset} ({problem}): truncated "
            f"{lost_bytes} bytes, {lost_records} record(s) lost"
        )
        self._warn(msg)
        os.truncate(path, offset)
        if self.fsync:
            fsync_path(path)
        self.truncated.append(LostData(path, offset, lost_bytes, lost_records, problem))

    def _salvage(
        self,
        path: str,
        first: int,
        data: bytes,
        bad: list[tuple[int, int, str]],
        tail: tuple[int, str] | None,
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
        summaries.remove(path)  # describes the original bytes; a new one is written after
        os.rename(path, keep)
        os.rename(tmp, path)
        if self.fsync:
            fsync_path(self.directory)
        # Re-index the rewritten file (map updates are idempotent: same records, same order).
        seg = Segment(path, first, self.index_interval)
        end, problem = scan_frames(new_data, HEADER_SIZE, prev_last, seg, self.pub_last, self.client_max,
                                   self.on_checkpoint)
        if problem is not None:  # pragma: no cover - salvage kept only verified frames
            raise JournalCorruptError(f"{path}: salvage failed at offset {end}: {problem}", path=path,
                                      offset=end)
        seg.size = len(new_data)
        return seg


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:  # pragma: no cover - harmless leftover
        pass
