"""A bookmark replay framed straight from the journal's stored frames.

A replay of a literal topic without a filter, select list, ``rate`` or ``timestamp`` option
(what a client replaying a topic mostly asks for) delivers each publish of the topic as it is
stored: ``{"c":"p","t":TOPIC,"sids":SID,"bm":"PUB|SEQ|"[,"x":..][,"k":..][,"e":..]}BODY``,
all of which the journal frame carries (``journal.record``). :func:`deliver` reads the
segment files in large ``pread``\\ s (``FileJournal.stored_frames``) and
:func:`replay_frames` (compiled when built) checks each frame (magic, CRC, version) and writes
the deliveries into one buffer, with no record decoded and no Python per record; one
``send`` per step of up to :data:`STEP_BYTES`.

Whatever it does not handle (a frame it cannot read, a publish whose payload is not in the
plain shapes, records still in the write buffer, the memory journal) it leaves, at the
position where it is, to the general path (``replay._deliver_chunk``), which reads the same
log by records; the two agree frame for frame on what they both deliver.
"""

from __future__ import annotations

import struct
import zlib
from typing import TYPE_CHECKING, Any

from amps_emulator import accel
from amps_emulator.protocol.codec import json_str
from amps_emulator.protocol.topics import split_topic

if TYPE_CHECKING:
    from amps_emulator.journal import FileJournal, MemoryJournal
    from amps_emulator.server.core.processors import Meter

#: frames a step of a replay writes at most (then the loop serves others, and the socket
#: drains: the connection's flow control pauses the replay while it is backed up)
STEP_BYTES = 1 << 20
#: journal bytes a step reads at most (a replay whose topic is rare in the log)
SCAN_BYTES = 8 << 20
#: bytes read from a segment at a time
READ_BYTES = 1 << 20

#: why replay_frames stopped: the end of the whole frames given, a record past the limit,
#: the budget (records or bytes), a frame for the general path
END, LIMIT, BUDGET, GENERAL = 0, 1, 2, 3

_PREFIX = struct.Struct("<IBBBBIQQQqQ")
_PREFIX_SIZE = 52
_MAX_RECORDS = 1 << 62

#: what replay_frames returns: (offset, next_pos, last position, last publisher id, last
#: sequence, deliveries, frames, why, records read, their bodies' bytes)
Result = tuple[int, int, int, int, int, int, bytes, int, int, int]


class _Decline(Exception):
    """A payload outside the shapes :func:`replay_frames_py` handles."""


def _take(data: bytes, p: int, end: int, n: int) -> int:
    if end - p < n:
        raise _Decline
    return p + n


def _str(data: bytes, p: int, end: int, nil_ok: bool = False) -> tuple[bytes | None, int]:
    if p >= end:
        raise _Decline
    b = data[p]
    p += 1
    if 0xA0 <= b <= 0xBF:
        n = b & 0x1F
    elif b in (0xD9, 0xDA, 0xDB):
        w = {0xD9: 1, 0xDA: 2, 0xDB: 4}[b]
        q = _take(data, p, end, w)
        n = int.from_bytes(data[p:q], "big")
        p = q
    elif b == 0xC0 and nil_ok:
        return None, p
    else:
        raise _Decline
    q = _take(data, p, end, n)
    return data[p:q], q


def _int(data: bytes, p: int, end: int) -> tuple[int | None, int]:
    if p >= end:
        raise _Decline
    b = data[p]
    p += 1
    if b <= 0x7F:
        return b, p
    if b >= 0xE0:
        return b - 0x100, p
    if b == 0xC0:
        return None, p
    if 0xCC <= b <= 0xD3:
        w = 1 << ((b - 0xCC) & 3)
        q = _take(data, p, end, w)
        return int.from_bytes(data[p:q], "big", signed=b >= 0xD0), q
    raise _Decline


def _count(data: bytes, p: int, end: int, fix_lo: int, fix_mask: int, c16: int) -> tuple[int, int]:
    if p >= end:
        raise _Decline
    b = data[p]
    p += 1
    if fix_lo <= b <= fix_lo + fix_mask:
        return b & fix_mask, p
    if b in (c16, c16 + 1):
        w = 2 if b == c16 else 4
        q = _take(data, p, end, w)
        return int.from_bytes(data[p:q], "big"), q
    raise _Decline


def _payload(data: bytes, p: int, end: int) -> tuple[bytes, bytes, bytes | None, bytes | None,
                                                      int | None, bytes]:
    """(topic, type, correlation id, SowKey, expiration, body) of a record's payload."""
    count, p = _count(data, p, end, 0x90, 0x0F, 0xDC)
    if count < 8:
        raise _Decline
    topic, p = _str(data, p, end)
    mt, p = _str(data, p, end)
    _client, p = _str(data, p, end)
    corr, p = _str(data, p, end, True)
    key, p = _str(data, p, end, True)
    exp, p = _int(data, p, end)
    pairs, p = _count(data, p, end, 0x80, 0x0F, 0xDE)
    for _ in range(pairs * 2):
        _, p = _str(data, p, end)
    if p >= end or data[p] not in (0xC4, 0xC5, 0xC6):
        raise _Decline
    w = {0xC4: 1, 0xC5: 2, 0xC6: 4}[data[p]]
    q = _take(data, p + 1, end, w)
    n = int.from_bytes(data[p + 1:q], "big")
    body_end = _take(data, q, end, n)
    assert topic is not None and mt is not None
    return topic, mt, corr, key, exp, data[q:body_end]


def replay_frames_py(data: bytes, start: int, next_pos: int, limit: int, name: bytes, mt: bytes,
                     head: bytes, max_records: int, max_bytes: int) -> Result:
    """The pure-Python twin of ``_speedups.replay_frames`` (its comment says what it does)."""
    if not isinstance(data, bytes) or not isinstance(name, bytes) \
            or not isinstance(mt, bytes) or not isinstance(head, bytes):
        raise TypeError("replay_frames(data: bytes, start, next_pos, limit, name: bytes, "
                        "mt: bytes, head: bytes, max_records, max_bytes)")
    size = len(data)
    if not 0 <= start <= size:
        raise ValueError("replay_frames: start out of range")
    json = mt == b"json"
    out: list[bytes] = []
    out_len = 0
    pos = start
    delivered = scanned = read_bytes = 0
    last_pos = last_pub = last_seq = 0
    why = END
    while True:
        if size - pos < _PREFIX_SIZE:
            break
        crc, magic, version, kind, _flags, n, position, pub, seq, _ts, _cs = \
            _PREFIX.unpack_from(data, pos)
        if magic != 0xA7:
            why = GENERAL
            break
        total = _PREFIX_SIZE + n
        if size - pos < total:
            break
        if zlib.crc32(data[pos + 4:pos + total]) != crc or version != 1:
            why = GENERAL
            break
        if position < next_pos:
            pos += total
            continue
        if limit < 0 or position > limit:
            why = LIMIT
            break
        if kind >= 64:
            pos += total
            continue
        try:
            topic, rec_mt, corr, key, exp, body = _payload(data, pos + _PREFIX_SIZE, pos + total)
        except _Decline:
            why = GENERAL
            break
        if kind in (1, 2) and topic == name and (rec_mt == mt or (json and not rec_mt)):
            if (corr is not None and not corr.isascii()) or \
                    (key is not None and not key.isascii()):
                why = GENERAL  # (a JSON string of it is the general path's to write)
                break
            tail = b',"bm":"%d|%d|"' % (pub, seq)
            if corr is not None:
                tail += b',"x":' + json_str(corr.decode())
            if key is not None:
                tail += b',"k":' + json_str(key.decode())
            if exp is not None:
                tail += b',"e":%d' % exp
            header = head + tail + b"}"
            framed = (len(header) + len(body)).to_bytes(4, "big") + header + body
            out.append(framed)
            out_len += len(framed)
            delivered += 1
        next_pos, last_pos, last_pub, last_seq = position + 1, position, pub, seq
        scanned += 1
        read_bytes += len(body)
        pos += total
        if delivered >= max_records or out_len >= max_bytes:
            why = BUDGET
            break
    return (pos, next_pos, last_pos, last_pub, last_seq, delivered, b"".join(out), why, scanned,
            read_bytes)


if accel.COMPILED:
    from amps_emulator._speedups import replay_frames
else:
    replay_frames = replay_frames_py


def eligible(cursor: Any) -> bool:
    """Whether ``cursor``'s replay is one :func:`deliver` frames (see the module docstring):
    a literal topic's (whose read filter and select list, under entitlements, are the
    subscription's own), no filter, select list, rate or ``ts``."""
    sub = cursor.sub
    return (sub.regex is None and sub.filter is None and sub.select is None
            and cursor.rate is None and not cursor.timestamp)


def deliver(journal: FileJournal | MemoryJournal, cursor: Any, limit: int, meter: Meter
            ) -> int | None:
    """Deliver what ``cursor`` may see up to ``limit`` from the stored frames, one step:
    :data:`LIMIT` (reached it), :data:`BUDGET` (a step's worth: more to do, or ``top_n``
    reached), or None: the general path goes on from where this left the cursor (its
    deliveries are queued on the connection already). ``meter`` counts the records read and
    the deliveries sent, as the general path does (the ``bookmark`` processor's)."""
    sub = cursor.sub
    name, mt = split_topic(sub.topic)
    head = b'{"c":"p","t":' + json_str(name) + b',"sids":' + json_str(sub.sub_id)
    name_b, mt_b = name.encode(), mt.encode()
    parts: list[bytes] = []
    framed = scanned = sent = 0
    result: int | None = None
    while True:
        got = journal.stored_frames(cursor.next_pos, cursor.stored_at, READ_BYTES)
        if got is None:
            break
        data, seg, base = got
        remaining = cursor.remaining
        off, next_pos, last_pos, pub, seq, n, frames, why, read, read_bytes = replay_frames(
            data, 0, cursor.next_pos, limit, name_b, mt_b, head,
            _MAX_RECORDS if remaining is None else remaining, STEP_BYTES - framed)
        meter.take(read_bytes, read)
        sent += n
        if last_pos:
            cursor.next_pos, cursor.last_pos = next_pos, last_pos
            cursor.last_bm = f"{pub}|{seq}|"
        cursor.stored_at = (cursor.next_pos, seg, base + off)
        if frames:
            parts.append(frames)
            framed += len(frames)
        if remaining is not None:
            cursor.remaining = remaining - n
        scanned += off
        if why == LIMIT or why == BUDGET:
            result = why
            break
        if why == GENERAL or off == 0 or scanned >= SCAN_BYTES:
            result = None if why == GENERAL or off == 0 else BUDGET
            break
    if parts:
        meter.give(framed, sent)
        cursor.conn.send(parts[0] if len(parts) == 1 else b"".join(parts))
    return result
