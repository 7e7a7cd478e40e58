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

import struct
import time
from collections.abc import Callable
from typing import Any

import msgspec

__all__ = ["Record", "FIXED", "encode_record", "decode_record", "body_of", "amps_timestamp",
           "VERSION"]

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
