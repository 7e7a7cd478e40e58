"""One SOW record, its on-disk encoding, and the AMPS timestamp text.

A :class:`Record` carries the SowKey, the JSON body as bytes, the bookmark and journal
position of the publish that produced it, the time AMPS processed that publish
(``timestamp``, UNIX seconds), the absolute expiration deadline (UNIX seconds, ``None`` = never)
and optional small headers (e.g. a correlation id).  The decoded body is produced on demand
(``record.doc``) and cached on the record, so it is decoded at most once.  Records handed out by
a store are shared: treat them, and their ``doc``, as read-only.

LMDB value layout (big-endian), version 1::

    off  size
      0    1  u8   body offset if < 256, else 0 (then read the u32 at 32)
      1    1  u8   version (1)
      2    2  u16  bookmark length (UTF-8 bytes)
      4    4  u32  headers length (JSON bytes, 0 = none)
      8    8  u64  journal position (0 = none)
     16    8  f64  timestamp (UNIX seconds)
     24    8  f64  expiration deadline (UNIX seconds, 0.0 = none)
     32    4  u32  body offset
     36       bookmark bytes, headers JSON, then the body up to the end of the value

Byte 0 lets a scan find the body with one index operation and a slice (no struct unpack).
"""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

import msgspec

from amps_emulator import accel

__all__ = ["Record", "FIXED", "encode_record", "decode_record", "body_of", "amps_timestamp",
           "VERSION", "StoredRecords", "sow_frames", "sow_frames_py", "sow_values", "value_head",
           "sow_values_py", "stored_timestamp"]

VERSION = 1
#: the fixed part of the value layout (see the module docstring)
FIXED = _FIXED = struct.Struct(">BBHIQddI")
_FIXED_SIZE = _FIXED.size  # 36
_UNSET: Any = object()
_json_decode = msgspec.json.decode
_json_encode = msgspec.json.encode


def _decode_doc(data: bytes) -> Any:
    try:
        return _json_decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None


class Record:
    """A SOW record.  See the module docstring."""

    __slots__ = ("sow_key", "data", "bookmark", "timestamp", "expiration", "position",
                 "headers", "seq", "_doc")

    # Positional arguments allowed (in this order) so that the hot paths (a publish, a
    # record read back) skip keyword-argument matching.
    def __init__(self, sow_key: str, data: bytes, bookmark: str = "", timestamp: float = 0.0,
                 expiration: float | None = None, position: int = 0,
                 headers: dict | None = None, doc: Any = _UNSET, seq: int = 0) -> None:
        self.sow_key = sow_key
        self.data = data
        self.bookmark = bookmark
        self.timestamp = timestamp
        self.expiration = expiration
        self.position = position
        self.headers = headers
        self.seq = seq
        self._doc = doc

    @property
    def doc(self) -> Any:
        """The decoded JSON body (``None`` if the body is not JSON); decoded once."""
        d = self._doc
        if d is _UNSET:
            d = self._doc = _decode_doc(self.data)
        return d

    def doc_by(self, decode: Callable[[bytes], Any]) -> Any:
        """The body as ``decode`` reads it (a message type's codec), kept as :attr:`doc`
        unless the body was decoded already."""
        d = self._doc
        if d is _UNSET:
            d = self._doc = decode(self.data)
        return d

    def keep_doc(self, doc: Any) -> None:
        """``doc`` is the body as its type reads it (a query decoded the whole body): kept
        as :attr:`doc` unless the body was decoded already."""
        if self._doc is _UNSET:
            self._doc = doc

    @property
    def has_doc(self) -> bool:
        return self._doc is not _UNSET

    def expired(self, now: float) -> bool:
        e = self.expiration
        return e is not None and e <= now

    def with_data(self, data: bytes, doc: Any = _UNSET) -> Record:
        """A copy with another body (used for ``select`` projections)."""
        return Record(self.sow_key, data, bookmark=self.bookmark, timestamp=self.timestamp,
                      expiration=self.expiration, position=self.position, headers=self.headers,
                      doc=doc, seq=self.seq)

    @property
    def ts(self) -> str:
        """``timestamp`` as AMPS prints it in the ``ts`` header."""
        return amps_timestamp(self.timestamp)

    def __repr__(self) -> str:
        return (f"Record(sow_key={self.sow_key!r}, data={self.data!r}, bookmark={self.bookmark!r}, "
                f"position={self.position}, expiration={self.expiration})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return (self.sow_key == other.sow_key and self.data == other.data
                and self.bookmark == other.bookmark and self.timestamp == other.timestamp
                and self.expiration == other.expiration and self.position == other.position
                and self.headers == other.headers)

    __hash__ = None  # type: ignore[assignment]


def encode_record(rec: Record) -> bytes:
    bm = rec.bookmark.encode("utf-8") if rec.bookmark else b""
    hd = _json_encode(rec.headers) if rec.headers else b""
    off = _FIXED_SIZE + len(bm) + len(hd)
    fixed = _FIXED.pack(off if off < 256 else 0, VERSION, len(bm), len(hd), rec.position,
                        rec.timestamp, rec.expiration or 0.0, off)
    return b"".join((fixed, bm, hd, rec.data))


def sow_values_py(version: int, bodies: list, bookmarks: list[str], positions: list[int],
                  timestamps: list[float]) -> list[bytes]:
    """The stored value of each record without expiration or headers (body ``bodies[i]``,
    bookmark, position, timestamp), as :func:`encode_record` lays it out; ``version``: the
    layout's (:data:`VERSION`)."""
    return [value_head(version, bookmark.encode("utf-8"), position, timestamp) + data
            for data, bookmark, position, timestamp
            in zip(bodies, bookmarks, positions, timestamps, strict=True)]


def value_head(version: int, bm: bytes, position: int, timestamp: float) -> bytes:
    """What comes before the body in the stored value of a record without expiration or
    headers (:func:`sow_values_py`): the fixed part, then the bookmark ``bm``."""
    off = _FIXED_SIZE + len(bm)
    return _FIXED.pack(off if off < 256 else 0, version, len(bm), 0, position, timestamp, 0.0,
                       off) + bm


def body_of(value) -> Any:
    """The body part of an encoded record (a slice of the same type: bytes or memoryview)."""
    o = value[0]
    if o:
        return value[o:]
    return value[int.from_bytes(value[32:36], "big"):]


def decode_record(sow_key: str, value) -> Record:
    o0, ver, blen, hlen, pos, ts, exp, off = _FIXED.unpack_from(value, 0)
    if ver != VERSION:
        raise ValueError(f"SOW record {sow_key!r}: unknown record version {ver}")
    p = _FIXED_SIZE
    bm = str(value[p:p + blen], "utf-8") if blen else ""
    if hlen:
        p += blen
        headers = _json_decode(value[p:p + hlen])
    else:
        headers = None
    # positional: (sow_key, data, bookmark, timestamp, expiration, position, headers)
    return Record(sow_key, bytes(value[off:]), bm, ts, exp if exp else None, pos, headers)


def amps_timestamp(t: float) -> str:
    """UNIX seconds -> ``YYYYMMDDTHHMMSS.ffffffZ`` (UTC), the AMPS timestamp format."""
    us = int(round(t * 1_000_000))
    secs, frac = divmod(us, 1_000_000)
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(secs)) + f".{frac:06d}Z"


def stored_timestamp(value: bytes) -> float:
    """The ``timestamp`` of a stored value (what :func:`decode_record` reads)."""
    return _TIMESTAMP.unpack_from(value, 16)[0]


_TIMESTAMP = struct.Struct(">d")


#: bytes of the insert sequence that begins a stored record's LMDB key (the SowKey follows)
KEY_SEQ = 8


class StoredRecords(Sequence[Record]):
    """Records a query read, kept as the store's rows: (LMDB key, stored value) pairs, the
    key being the record's 8-byte insert sequence then its SowKey as UTF-8, the value laid
    out as above. The server frames them straight from the values
    (:func:`sow_frames`) without building a :class:`Record` each; anything else that reads
    them gets Records built as it reads (:func:`decode_record`, so the same as a store read).
    A slice is another :class:`StoredRecords`."""

    __slots__ = ("rows",)

    def __init__(self, rows: list[tuple[bytes, bytes]] | None = None) -> None:
        self.rows: list[tuple[bytes, bytes]] = [] if rows is None else rows

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int) -> Record: ...

    @overload
    def __getitem__(self, i: slice) -> StoredRecords: ...

    def __getitem__(self, i: int | slice) -> Record | StoredRecords:
        if isinstance(i, slice):
            return StoredRecords(self.rows[i])
        k, v = self.rows[i]
        return decode_record(str(k[KEY_SEQ:], "utf-8"), v)

    def __iter__(self) -> Iterator[Record]:
        for k, v in self.rows:
            yield decode_record(str(k[KEY_SEQ:], "utf-8"), v)

    def extend(self, other: StoredRecords) -> None:
        self.rows.extend(other.rows)


# JSON string escapes of the bytes of a key or a bookmark, as msgspec writes them
_ESCAPES = {**{i: b"\\u%04x" % i for i in range(0x20)},
            0x08: b"\\b", 0x09: b"\\t", 0x0A: b"\\n", 0x0C: b"\\f", 0x0D: b"\\r",
            0x22: b'\\"', 0x5C: b"\\\\"}
_NEEDS_ESCAPE = re.compile(rb'[\x00-\x1f"\\]')


def _escaped(text: bytes) -> bytes:
    """``text`` with the bytes JSON escapes in a string escaped (no quotes added)."""
    return _NEEDS_ESCAPE.sub(lambda m: _ESCAPES[m.group()[0]], text)


#: (version, bookmark length, body offset) of a stored value
_LAYOUT = struct.Struct(">xBH28xI")


def sow_frames_py(prefix: bytes, rows: list[tuple[bytes, bytes]], with_key: bool,
                  stamps: list[bytes] | None, start: int, end: int, batch: int,
                  joined: bool = False) -> Any:
    """The ``sow`` frames of stored rows ``start..end-1`` ((LMDB key, stored value) pairs, as
    :class:`StoredRecords` keeps them: the SowKey follows the key's 8-byte insert sequence),
    ``batch`` to a frame: ``prefix`` (the outer header), then for each record its header
    ``{"k":KEY,"bm":BOOKMARK[,"ts":STAMP],"l":LENGTH}`` and its body, as
    :func:`protocol.codec.sow_batch` writes them. ``with_key``: write ``k`` (not with the
    ``no_sowkey`` option); ``stamps``: the ``ts`` texts by row (``None``: no ``ts``);
    ``joined``: one ``bytes`` of the frames back to back instead of the list (what one write
    of them takes). The pure-Python twin of ``_speedups.sow_frames``."""
    if not 0 <= start <= end <= len(rows) or batch < 1 \
            or (stamps is not None and len(stamps) < end):
        raise ValueError("sow_frames: bad range")
    frames = []
    unpack = _LAYOUT.unpack_from
    needs_escape = _NEEDS_ESCAPE.search
    for first in range(start, end, batch):
        parts = [prefix]
        append = parts.append
        for i in range(first, min(end, first + batch)):
            row = rows[i]
            if not isinstance(row, tuple) or len(row) != 2 or not isinstance(row[0], bytes) \
                    or not isinstance(row[1], bytes):
                raise TypeError("sow_frames() needs rows of (bytes, bytes)")
            k, v = row
            if len(k) < KEY_SEQ:
                raise ValueError(f"stored SOW row {i}: no insert sequence in its key")
            k = k[KEY_SEQ:]
            n = len(v)
            if n < _FIXED_SIZE:
                raise ValueError(f"stored SOW record {i}: not a version 1 record")
            version, blen, off = unpack(v)
            if version != VERSION or _FIXED_SIZE + blen > n or off > n:
                raise ValueError(f"stored SOW record {i}: not a version 1 record")
            bm = v[_FIXED_SIZE:_FIXED_SIZE + blen]
            if needs_escape(bm) is not None:
                bm = _escaped(bm)
            if with_key:
                if needs_escape(k) is not None:
                    k = _escaped(k)
                head = b'{"k":"%s","bm":"%s"' % (k, bm)
            else:
                head = b'{"bm":"%s"' % bm
            if stamps is not None:
                stamp = stamps[i]
                if not isinstance(stamp, bytes):
                    raise TypeError("sow_frames() needs bytes stamps")
                head += b',"ts":"%s"' % stamp
            append(head + b',"l":%d}' % (n - off))
            append(v[off:])
        payload = b"".join(parts)
        if len(payload) > 0xFFFFFFFF:
            raise ValueError("sow_frames: a frame over 4 GiB")
        frames.append(len(payload).to_bytes(4, "big") + payload)
    return b"".join(frames) if joined else frames


if accel.COMPILED:
    from amps_emulator._speedups import sow_frames, sow_values
else:
    sow_frames = sow_frames_py
    sow_values = sow_values_py
