"""Reading a journal directory without a server: split planning and records as Arrow batches.

Pure Python (pyarrow only, no Spark), so the Spark sources in ``sources.py`` stay thin and
this part is testable on its own. Every byte is parsed by ``journal/``'s own code:
``segment.FrameCursor`` (frame prefix, CRC, version) and ``record.FrameDecoder`` (payload),
``summary.read`` (the sparse index a split planner uses), ``recovery.find_next_valid_frame``
(resynchronising after damage). There is no second definition of the layout here.

Splits
------
A split is a byte range ``[start, stop)`` of one segment file, starting and ending on frame
boundaries. A segment is one split unless its summary (``<segment>.summary``, written by the
server's journal) has a sparse index; then it is cut at index entries into pieces of about
``target_bytes`` so Spark tasks balance. The bytes past what the summary covers (a live
segment's tail) form the last split of the newest segment, read up to the file size seen
when the query was planned.

Damage
------
A record whose frame is damaged (bad CRC or magic) or a segment that disappeared between
planning and reading is *data loss*. With ``fail_on_data_loss`` (the default) the read fails
with the file and offset; without it the reader skips to the next frame with a valid CRC
(the same resynchronisation recovery uses) and goes on. An incomplete frame at the very end
of the newest segment is a write in flight, not damage: that split simply ends there.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import re
from collections.abc import Iterator

from amps_emulator.journal import summary as _summary
from amps_emulator.journal.api import JournalCorruptError
from amps_emulator.journal.record import INTERNAL_KIND_MIN, PREFIX_SIZE, FrameDecoder, RecordKind
from amps_emulator.journal.recovery import find_next_valid_frame
from amps_emulator.journal.segment import HEADER_SIZE, FrameCursor, Segment, parse_segment_name
from amps_emulator.protocol.bookmarks import (
    Bookmark,
    BookmarkError,
    BookmarkKeyword,
    BookmarkTimestamp,
    parse_bookmark,
)

__all__ = [
    "COMMANDS", "COLUMNS", "JournalSplit", "ReadOptions", "DataLossError", "arrow_schema",
    "spark_schema_ddl", "plan_splits", "read_split", "segment_paths", "last_position",
    "parse_time",
]

#: command column value per record kind (unknown kinds: ``kind_<code>``)
COMMANDS = {int(k): k.name.lower() for k in RecordKind}

#: (column, Spark DDL type, arrow type name) in row order; ``publisher_id`` is a string
#: because bookmark publisher ids are unsigned 64-bit and Spark has no unsigned long.
COLUMNS = (
    ("bookmark", "STRING"),
    ("publisher_id", "STRING"),
    ("sequence", "BIGINT"),
    ("position", "BIGINT"),
    ("timestamp", "TIMESTAMP"),
    ("topic", "STRING"),
    ("command", "STRING"),
    ("kind", "INT"),
    ("sow_key", "STRING"),
    ("correlation_id", "STRING"),
    ("client_name", "STRING"),
    ("client_seq", "BIGINT"),
    ("expiration", "BIGINT"),
    ("message_type", "STRING"),
    ("headers", "MAP<STRING, STRING>"),
    ("data", "STRING"),
    ("data_binary", "BINARY"),
    ("fields", "STRING"),
    ("segment", "STRING"),
    ("offset", "BIGINT"),
)


class DataLossError(RuntimeError):
    """A record or segment the query needed is damaged or gone (``failOnDataLoss``)."""


def spark_schema_ddl() -> str:
    return ", ".join(f"`{n}` {t}" for n, t in COLUMNS)


def arrow_schema():
    import pyarrow as pa

    types = {"STRING": pa.string(), "BIGINT": pa.int64(), "INT": pa.int32(),
             "TIMESTAMP": pa.timestamp("us", tz="UTC"), "BINARY": pa.binary(),
             "MAP<STRING, STRING>": pa.map_(pa.string(), pa.string())}
    return pa.schema([pa.field(n, types[t]) for n, t in COLUMNS])


# ----------------------------------------------------------------------------- options
def parse_time(text) -> int | None:
    """A time bound -> microseconds since the epoch. Accepts an AMPS timestamp
    (``20240102T030405[.ffffff][Z]``), ISO 8601 (naive = UTC), or an integer of microseconds."""
    if text is None or text == "":
        return None
    if isinstance(text, (int, float)):
        return int(text)
    s = str(text).strip()
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    try:
        spec = parse_bookmark(s)
        if isinstance(spec, BookmarkTimestamp):
            return spec.micros
    except BookmarkError:
        pass
    when = _dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.UTC)
    delta = when - _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _bookmark_position(text: str | None, *, start: bool,
                       directory: str | None = None) -> tuple[int | None, int | None]:
    """(position bound, time bound) of a bookmark option. ``pub|seq|`` is found by publisher
    and sequence in ``directory`` (a sequence is the publisher's, not a position; see
    ``journal/identity.py``): the position of that record, or just before the publisher's next
    one when that sequence is absent. A timestamp bookmark bounds time; EPOCH / ``0`` (start)
    and NOW / RECENT (end: everything) are no bound."""
    if not text:
        return None, None
    spec = parse_bookmark(text)
    if isinstance(spec, BookmarkTimestamp):
        return None, spec.micros
    if isinstance(spec, Bookmark):
        if directory is None:
            raise ValueError("a bookmark bound needs the journal directory to be resolved")
        pos = _locate_bookmark(directory, spec)
        if pos is None:
            if start:
                raise ValueError(f"startingBookmark {text!r} is not in the journal at {directory}")
            return None, None  # not (yet) there: no end bound, as a replay range
        return pos, None
    if isinstance(spec, BookmarkKeyword):
        return None, None
    raise ValueError(f"{'startingBookmark' if start else 'endingBookmark'}: unsupported bookmark {text!r}")


def _locate_bookmark(directory: str, bm: Bookmark) -> int | None:
    """Position of the record ``bm`` names, or the position before that publisher's first
    record with a larger sequence; None when the publisher has nothing at or after it. One pass
    over the frame prefixes (no payload is decoded)."""
    for _, path in segment_paths(directory):
        try:
            cursor = FrameCursor(path, HEADER_SIZE)
        except FileNotFoundError:
            continue
        try:
            while True:
                try:
                    fr = cursor.next(os.path.getsize(path))
                except JournalCorruptError:
                    break
                if fr is None:
                    break
                prefix = fr[0]
                kind, position, pid, seq = prefix[3], prefix[6], prefix[7], prefix[8]
                if kind >= INTERNAL_KIND_MIN or pid != bm.publisher_id or seq < bm.sequence:
                    continue
                return position if seq == bm.sequence else position - 1
        finally:
            cursor.close()
    return None


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """What rows a read wants. Positions: ``after_position`` exclusive, ``until_position``
    inclusive (an AMPS replay starts *after* its bookmark); times inclusive on both ends."""

    topic: str | None = None
    after_position: int = 0
    until_position: int | None = None
    start_us: int | None = None
    end_us: int | None = None
    fail_on_data_loss: bool = True
    include_internal: bool = False
    target_bytes: int = 64 << 20
    batch_rows: int = 8192
    #: an AMPS config file whose ``MessageTypes`` read the ``fields`` of declared types
    config: str | None = None

    @classmethod
    def from_spark(cls, options: dict, directory: str | None = None) -> ReadOptions:
        """``directory``: the journal, needed to resolve ``pub|seq|`` bookmark bounds."""
        o = {k.lower(): v for k, v in options.items()}
        after, t0 = _bookmark_position(o.get("startingbookmark"), start=True, directory=directory)
        until, t1 = _bookmark_position(o.get("endingbookmark"), start=False, directory=directory)
        start_us = parse_time(o.get("startingtimestamp"))
        end_us = parse_time(o.get("endingtimestamp"))
        if t0 is not None:
            start_us = t0 if start_us is None else max(start_us, t0)
        if t1 is not None:
            end_us = t1 if end_us is None else min(end_us, t1)
        return cls(
            topic=o.get("topic") or None,
            after_position=after or 0,
            until_position=until,
            start_us=start_us,
            end_us=end_us,
            fail_on_data_loss=str(o.get("failondataloss", "true")).lower() != "false",
            include_internal=str(o.get("includeinternal", "false")).lower() == "true",
            target_bytes=int(o.get("splitbytes", 64 << 20)),
            batch_rows=int(o.get("batchrows", 8192)),
            config=o.get("config") or None,
        )

    def topic_matcher(self):
        """AMPS topic semantics: a name with a regex character is a regex that matches when it
        is found anywhere in the topic (``re.search``); otherwise the exact name."""
        from amps_emulator.protocol.topics import compile_topic_regex, is_regex_topic

        t = self.topic
        if t is None:
            return None
        if is_regex_topic(t):
            rx = compile_topic_regex(t)
            return lambda topic: rx.search(topic) is not None
        return t.__eq__


# ----------------------------------------------------------------------------- planning
@dataclasses.dataclass(frozen=True)
class JournalSplit:
    """Bytes ``[start, stop)`` of one segment file (frame boundaries)."""

    path: str
    start: int
    stop: int
    first_position: int  # the segment's first position (its file name)
    tail: bool  # the newest segment's end: an incomplete last frame is a write in flight


def segment_paths(directory: str) -> list[tuple[int, str]]:
    """(first position, path) of every segment file in ``directory``, in log order."""
    out = []
    for name in os.listdir(directory):
        first = parse_segment_name(name)
        if first is not None:
            out.append((first, os.path.join(directory, name)))
    out.sort()
    return out


def plan_splits(directory: str, opts: ReadOptions) -> list[JournalSplit]:
    """Splits covering what ``opts`` can want, skipping whole segments by position and time."""
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"journal directory {directory!r} does not exist")
    segs = segment_paths(directory)
    fail = opts.fail_on_data_loss
    if fail and segs and 0 < opts.after_position < segs[0][0] - 1:
        raise DataLossError(f"{directory}: the journal starts at position {segs[0][0]}; the records "
                            f"after position {opts.after_position} before it are gone (retention?)")
    splits: list[JournalSplit] = []
    for i, (first, path) in enumerate(segs):
        nxt = segs[i + 1][0] if i + 1 < len(segs) else None
        newest = nxt is None
        if nxt is not None and nxt - 1 <= opts.after_position:
            continue  # every record here is at or before the start
        if opts.until_position is not None and first > opts.until_position:
            break
        try:
            size = os.path.getsize(path)
        except FileNotFoundError:
            if opts.fail_on_data_loss:
                raise DataLossError(f"{path}: segment disappeared while planning") from None
            continue
        summ, _why = _summary.read(_summary.summary_path(path))
        if summ is not None and (summ.first_position != first or summ.size > size):
            summ = None
        if fail and summ is not None and summ.sealed and summ.count and nxt is not None \
                and summ.last_position + 1 < nxt:
            raise DataLossError(f"{directory}: positions {summ.last_position + 1} to {nxt - 1} are "
                                f"missing after {os.path.basename(path)} (a segment file is gone)")
        if summ is not None and summ.count:
            if opts.start_us is not None and summ.sealed and summ.last_ts < opts.start_us:
                continue
            if opts.end_us is not None and summ.first_ts > opts.end_us:
                break
        splits.extend(_cut(path, first, size, summ, opts, newest))
    return splits


def _cut(path, first, size, summ, opts: ReadOptions, newest: bool) -> list[JournalSplit]:
    start = HEADER_SIZE
    if summ is None or not summ.count:
        return [JournalSplit(path, start, size, first, newest)]
    seg = Segment(path, first)
    _summary.apply_to(summ, seg)
    idx = seg.index
    # skip what precedes the wanted positions / times: the records before index entry j have
    # smaller positions and no later timestamps than entry j
    for p, off, ts in zip(idx.positions, idx.offsets, idx.timestamps, strict=False):
        if p <= opts.after_position + 1 or (opts.start_us is not None and ts < opts.start_us):
            start = max(start, off)
        else:
            break
    cuts = [start]
    for off in idx.offsets:
        if off - cuts[-1] >= opts.target_bytes and off < summ.size:
            cuts.append(off)
    if summ.size > cuts[-1]:
        cuts.append(summ.size)
    if size > cuts[-1]:
        cuts.append(size)
    out = [JournalSplit(path, a, b, first, newest and b == size)
           for a, b in zip(cuts, cuts[1:], strict=False)]
    return out or [JournalSplit(path, start, size, first, newest)]


# ----------------------------------------------------------------------------- reading
def _frames(split: JournalSplit, fail: bool) -> Iterator[tuple]:
    """``(prefix, offset, payload)`` of every intact frame in ``split``."""
    try:
        cursor = FrameCursor(split.path, split.start)
    except FileNotFoundError:
        if fail:
            raise DataLossError(f"{split.path}: segment is missing (removed by retention?)") from None
        return
    try:
        while True:
            try:
                frame = cursor.next(split.stop)
            except JournalCorruptError as exc:
                off = exc.offset if exc.offset is not None else cursor.offset
                if split.tail and _is_torn_tail(split, off):
                    return
                if fail:
                    raise DataLossError(f"{exc} (failOnDataLoss=true)") from exc
                resume = _resync(split, off)
                if resume is None:
                    return
                cursor.close()
                cursor = FrameCursor(split.path, resume)
                continue
            if frame is None:
                return
            yield frame
    finally:
        cursor.close()


def _tail_bytes(split: JournalSplit, off: int) -> bytes:
    with open(split.path, "rb") as f:
        f.seek(off)
        return f.read(split.stop - off)


def _is_torn_tail(split: JournalSplit, off: int) -> bool:
    """True when the bytes from ``off`` to the split's end hold no valid frame: an append
    still in flight (or cut by a crash) rather than damage before intact records."""
    data = _tail_bytes(split, off)
    return find_next_valid_frame(data, -1) is None if len(data) >= PREFIX_SIZE else True


def _resync(split: JournalSplit, off: int) -> int | None:
    data = _tail_bytes(split, off)
    nxt = find_next_valid_frame(data, 0)
    return None if nxt is None else off + nxt


def records(split: JournalSplit, opts: ReadOptions) -> Iterator[tuple]:
    """``(prefix, offset, record)`` of the wanted records of ``split`` (decoded once)."""
    dec = FrameDecoder()
    match = opts.topic_matcher()
    after, until = opts.after_position, opts.until_position
    t0, t1 = opts.start_us, opts.end_us
    internal = opts.include_internal
    for prefix, off, payload in _frames(split, opts.fail_on_data_loss):
        kind, pos, ts = prefix[3], prefix[6], prefix[9]
        if pos <= after:
            continue
        if until is not None and pos > until:
            return
        if t1 is not None and ts > t1:
            return
        if (t0 is not None and ts < t0) or (kind >= INTERNAL_KIND_MIN and not internal):
            continue
        rec = dec.decode(prefix, payload)
        if match is not None and not match(rec.topic):
            continue
        yield prefix, off, rec


def read_split(split: JournalSplit, opts: ReadOptions) -> Iterator:
    """The split's rows as ``pyarrow.RecordBatch``es of at most ``opts.batch_rows`` rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = arrow_schema()
    seg_name = os.path.basename(split.path)
    n_rows = opts.batch_rows
    # the per-row columns (bookmark and segment are built per batch)
    cols: list[list] = [[] for _ in range(18)]
    (c_pub, c_seq, c_pos, c_ts, c_topic, c_cmd, c_kind, c_key, c_cid, c_client, c_cs,
     c_exp, c_mt, c_hdr, c_data, c_bin, c_fields, c_off) = cols
    from amps_emulator.config.message_types import registry_for_config_file
    from amps_emulator.protocol import bodyview

    registry = registry_for_config_file(opts.config) if opts.config else None
    commands = COMMANDS
    pub_names: dict[int, str] = {}
    empty = pa.scalar("")

    def flush():
        f = schema.field
        pub = pa.array(c_pub, type=pa.string())
        seq = pa.array(c_seq, type=pa.int64())
        n = len(c_seq)
        arrays = [pc.binary_join_element_wise(pub, pc.cast(seq, pa.string()), empty, "|"), pub, seq]
        arrays += [pa.array(c, type=f(i + 1).type) for i, c in enumerate(cols[2:-1], 2)]
        arrays += [pa.repeat(pa.scalar(seg_name), n), pa.array(c_off, type=pa.int64())]
        for c in cols:
            c.clear()
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    for _prefix, off, rec in records(split, opts):
        kind = rec.kind
        pid = rec.publisher_id
        name = pub_names.get(pid)
        if name is None:
            name = pub_names[pid] = str(pid)
        c_pub.append(name)
        c_seq.append(rec.sequence)
        c_pos.append(rec.position)
        c_ts.append(rec.timestamp)
        c_topic.append(rec.topic)
        c_cmd.append(commands.get(kind) or f"kind_{kind}")
        c_kind.append(kind)
        c_key.append(rec.sow_key)
        c_cid.append(rec.correlation_id)
        c_client.append(rec.client_name)
        c_cs.append(rec.client_seq)
        c_exp.append(rec.expiration)
        c_mt.append(rec.message_type or None)
        c_hdr.append(list(rec.headers.items()) if rec.headers else None)
        body = rec.body
        text = None
        if kind < 16 or kind >= 32:
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError:
                pass
        mt = rec.message_type
        typed = bool(mt) and mt != "json" and (kind < 16 or kind >= 32)
        c_data.append(text)
        # another type than json: its exact bytes always, and the fields its codec reads
        c_bin.append(body if typed or text is None else None)
        c_fields.append(bodyview.fields_json(body, mt, registry) if typed else None)
        c_off.append(off)
        if len(c_pos) >= n_rows:
            yield flush()
    if c_pos:
        yield flush()


def last_position(directory: str, hint: tuple[str, int, int] | None = None
                  ) -> tuple[int, tuple[str, int, int] | None]:
    """The position of the last complete record on disk, and a resume hint
    ``(segment path, offset after it, position)`` so the next call scans only new bytes."""
    segs = segment_paths(directory)
    if not segs:
        return (hint[2] if hint else 0), hint
    first, path = segs[-1]
    start, pos = HEADER_SIZE, first - 1
    if hint is not None and hint[0] == path:
        start, pos = hint[1], hint[2]
    elif hint is not None:
        pos = max(pos, hint[2])
    summ, _ = _summary.read(_summary.summary_path(path))
    if summ is not None and summ.first_position == first and summ.count and summ.size > start:
        start, pos = summ.size, summ.last_position
    size = os.path.getsize(path)
    split = JournalSplit(path, start, size, first, True)
    end = start
    for prefix, off, _payload in _frames(split, True):
        pos = prefix[6]
        end = off + PREFIX_SIZE + prefix[5]
    return pos, (path, end, pos)
