"""Journal record type and its on-disk frame: THE format reference for external readers.

Everything is little-endian. A journal directory holds segment files (see ``segment.py`` for
the 24-byte file header and file naming); after the file header a segment is a sequence of
frames, back to back, with no padding and no trailer::

    frame = 52-byte prefix || payload (payload_len bytes)

    offset size type  field
    ------ ---- ----- ---------------------------------------------------------------------
       0     4  u32   crc32: zlib.crc32 (IEEE 802.3 polynomial, as in zip/PNG/Spark's
                      crc32()) of bytes [4, 52 + payload_len) of this frame, i.e. of every
                      byte after this field: the rest of the prefix and the payload
       4     1  u8    magic 0xA7 (frame marker)
       5     1  u8    version: 1 (readers must refuse other values, never skip them)
       6     1  u8    kind: a RecordKind code (unknown codes are preserved, not rejected)
       7     1  u8    flags: bit 0 = client_seq present; other bits reserved (written 0)
       8     4  u32   payload_len
      12     8  u64   position: global log position, strictly increasing in log order
                      (normally +1 per frame; gaps only after a keep-readable salvage)
      20     8  u64   publisher_id (bookmark part 1; 0 for journal-internal records)
      28     8  u64   sequence     (bookmark part 2; currently equal to position)
      36     8  i64   timestamp: microseconds since the Unix epoch, UTC, non-decreasing
                      in log order
      44     8  u64   client_seq: the publish command's ``s`` (0 when flags bit 0 is clear)
      52     n        payload: one MessagePack array (msgspec encoding), elements in order:
                        0 topic           str
                        1 message_type    str   ("" when not recorded)
                        2 client_name     str
                        3 correlation_id  str | nil
                        4 sow_key         str | nil
                        5 expiration      int | nil   (seconds, the publish's ``e`` header)
                        6 headers         map str -> str (extra headers, e.g. options)
                        7 body            bin
                      Later versions may append elements; readers ignore extra trailing
                      elements (msgspec does).

The bookmark of a record is ``f"{publisher_id}|{sequence}|"``. ``publisher_id`` is derived
from ``client_name`` by :func:`protocol.bookmarks.publisher_id_for` (so the prefix also serves
as the "client name hash" that recovery uses for publish de-duplication without decoding
the payload).

Records of kind CHECKPOINT (64) are journal-internal: the body is a MessagePack map
``{"publishers": [[publisher_id, last_sequence], ...], "clients": [[publisher_id, max_s], ...]}``
written as the first record of every rolled segment, so per-publisher sequence and
de-duplication state survive retention deleting the segments that held the originals.
Tools replaying messages should skip kinds >= 64.

The fixed prefix exists so that recovery (and index lookups) can check the CRC and read
position, bookmark, timestamp and client sequence with one ``struct.unpack_from`` per record,
without decoding the MessagePack payload.
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Callable, Iterable

import msgspec

from amps_emulator import accel
from amps_emulator.protocol.bookmarks import Bookmark
from amps_emulator.protocol.topics import qualify

__all__ = [
    "FRAME_MAGIC",
    "FRAME_VERSION",
    "PREFIX",
    "PREFIX_SIZE",
    "FLAG_CLIENT_SEQ",
    "JournalRecord",
    "RecordKind",
    "FrameEncoder",
    "append_record",
    "room_for",
    "frame_size",
    "FrameDecoder",
    "Checkpoint",
    "INTERNAL_KIND_MIN",
    "MAX_PAYLOAD",
]

FRAME_MAGIC = 0xA7
FRAME_VERSION = 1
FLAG_CLIENT_SEQ = 0x01
#: crc, magic, version, kind, flags, payload_len, position, publisher_id, sequence, timestamp, client_seq
PREFIX = struct.Struct("<IBBBBIQQQqQ")
PREFIX_SIZE = PREFIX.size  # 52
_PREFIX_REST = struct.Struct("<BBBBIQQQqQ")  # the prefix without its leading crc
_CRC = struct.Struct("<I")
#: Sanity bound on payload_len during recovery: larger values are treated as damage.
MAX_PAYLOAD = 1 << 30


class RecordKind(enum.IntEnum):
    """What a record records. Codes are grouped so new kinds fit in without a format
    version bump: 1-15 publishes, 16-31 queue events, 32-47 SOW events, 64+ journal-internal.
    """

    PUBLISH = 1
    DELTA_PUBLISH = 2
    SOW_DELETE = 3
    # queue events (reserved for the queue issue)
    QUEUE_ACK = 16
    QUEUE_CANCEL = 17
    QUEUE_EXPIRE = 18
    QUEUE_LEASE = 19
    QUEUE_LEASE_EXPIRE = 20
    QUEUE_TRANSFER = 21
    QUEUE_BATCH = 22  # several queue events of one command: msgpack [[kind, payload], ...]
    # SOW events (reserved)
    SOW_EXPIRE = 32
    SOW_UPDATE = 33
    # journal-internal
    CHECKPOINT = 64


INTERNAL_KIND_MIN = 64


class JournalRecord(msgspec.Struct, frozen=True, gc=False):
    """One record in the log. ``kind`` is an int so unknown codes survive; compare with RecordKind.

    Build it with keywords; the journal's append path alone passes all fields positionally
    (faster), so the field order is part of this module's contract."""

    position: int
    kind: int
    topic: str
    publisher_id: int
    sequence: int
    timestamp: int
    client_name: str
    client_seq: int | None = None
    correlation_id: str | None = None
    sow_key: str | None = None
    expiration: int | None = None
    message_type: str = ""
    headers: dict[str, str] = {}
    body: bytes = b""

    @property
    def bookmark(self) -> Bookmark:
        return Bookmark(self.publisher_id, self.sequence)

    @property
    def key(self) -> str:
        """The server's key of the record's topic (:func:`protocol.topics.qualify`): the name
        for json (and for records that name no type), name and type for another type."""
        mt = self.message_type
        return self.topic if not mt or mt == "json" else qualify(self.topic, mt)

    @property
    def bookmark_str(self) -> str:
        return f"{self.publisher_id}|{self.sequence}|"  # (and bookmark_strs below)

    @property
    def is_internal(self) -> bool:
        return self.kind >= INTERNAL_KIND_MIN


def bookmark_strs_py(recs: Iterable[JournalRecord]) -> list[str]:
    """``[r.bookmark_str for r in recs]`` without a property call per record (half the
    cost). The pure-Python twin of the compiled ``_speedups.bookmark_strs`` (which declines,
    None, a record whose publisher_id or sequence is not an int in 0..2**64-1)."""
    return [f"{r.publisher_id}|{r.sequence}|" for r in recs]


def bookmark_strs(recs: list[JournalRecord]) -> list[str]:
    """The ``bookmark_str`` of each of ``recs`` (the keyed publish run's hot path): compiled
    when built, else (or for a record it declines) :func:`bookmark_strs_py`."""
    if _bookmark_strs is not None and recs.__class__ is list:
        out = _bookmark_strs(recs)
        if out is not None:
            return out
    return bookmark_strs_py(recs)


class _Payload(msgspec.Struct, array_like=True, gc=False):
    topic: str
    message_type: str
    client_name: str
    correlation_id: str | None = None
    sow_key: str | None = None
    expiration: int | None = None
    headers: dict[str, str] = {}
    body: bytes = b""


class Checkpoint(msgspec.Struct, gc=False):
    """Body of a CHECKPOINT record."""

    publishers: list[tuple[int, int]] = []
    clients: list[tuple[int, int]] = []


class FrameEncoder:
    """Encodes the journal's CHECKPOINT payloads (holds a reusable msgspec encoder); records
    are framed by :func:`append_record`."""

    __slots__ = ("_enc",)

    def __init__(self) -> None:
        self._enc = msgspec.msgpack.Encoder()

    def encode_checkpoint(self, cp: Checkpoint) -> bytes:
        return self._enc.encode(cp)


_payload_encode = msgspec.msgpack.Encoder().encode


def append_record_py(
    buf: bytearray,
    kind: int,
    position: int,
    publisher_id: int,
    sequence: int,
    timestamp: int,
    client_seq: int | None,
    topic: str,
    message_type: str,
    client_name: str,
    correlation_id: str | None,
    sow_key: str | None,
    expiration: int | None,
    headers: dict[str, str],
    body: bytes,
) -> int:
    """Append the frame of a record given field by field to ``buf`` (the journal's append
    path, which holds them as locals: no record attribute lookups); return the frame size.

    The pure-Python encoder: one msgspec encode for the payload, one ``pack`` for the prefix
    after the CRC, the CRC chained over both (no concatenation), three appends to ``buf``.
    (Measured: packing into ``buf`` in place with ``pack_into`` and a CRC over a memoryview is
    slower.) ``_speedups.append_record`` writes the same bytes in C, and hands it any argument
    outside the plain shapes the journal passes.
    """
    payload = _payload_encode(
        (topic, message_type, client_name, correlation_id, sow_key, expiration, headers, body))
    n = len(payload)
    rest = _PREFIX_REST.pack(
        FRAME_MAGIC,
        FRAME_VERSION,
        kind,
        0 if client_seq is None else FLAG_CLIENT_SEQ,
        n,
        position,
        publisher_id,
        sequence,
        timestamp,
        0 if client_seq is None else client_seq,
    )
    buf += _CRC.pack(zlib.crc32(payload, zlib.crc32(rest)))
    buf += rest
    buf += payload
    return PREFIX_SIZE + n


def frame_size_py(
    topic: str,
    message_type: str,
    client_name: str,
    correlation_id: str | None,
    sow_key: str | None,
    expiration: int | None,
    headers: dict[str, str],
    body: bytes,
) -> int:
    """The size of the frame of a record with these payload fields (the memory journal counts
    its segments' sizes so). The pure-Python twin of ``_speedups.frame_size``, which counts
    without encoding."""
    return PREFIX_SIZE + len(_payload_encode(
        (topic, message_type, client_name, correlation_id, sow_key, expiration, headers, body)))


def room_for(bodies: list[bytes], start: int, fixed: int, size: int, count: int, limit: int) -> int:
    """Where a run of plain publishes (``bodies`` from ``start``, each framed in ``fixed``
    bytes plus its body's) leaves a segment holding ``count`` records in ``size`` bytes
    whose size limit is ``limit``: the index of the first record that must go to the next
    segment (``len(bodies)``: they all fit). A segment rolls before a record once it holds
    at least one and has reached its limit, as it does one record at a time."""
    n = len(bodies)
    if size + (fixed + 4) * (n - start) + sum(map(len, bodies[start:])) < limit:
        return n  # (the common case: far from the end of the segment)
    for j in range(start, n):
        if count and size >= limit:
            return j
        length = len(bodies[j])
        size += fixed + length + (0 if length < 256 else 1 if length < 65536 else 3)
        count += 1
    return n


if accel.COMPILED:
    from amps_emulator import _speedups

    _speedups.set_fallbacks(append_record_py, frame_size_py)
    #: append one record's frame to a bytearray (the compiled encoder when it is built)
    append_record = _speedups.append_record
    frame_size = _speedups.frame_size

    _bookmark_strs: Callable[[list[JournalRecord]], list[str] | None] | None = \
        _speedups.bookmark_strs
    #: ``zlib.crc32``'s value, what the frames and summaries carry: the extension's when it
    #: is built (several times faster where the CPU folds with PCLMULQDQ, so recovery and
    #: replay check frames sooner; like zlib's, it lets other threads run on long inputs)
    crc32: Callable[..., int] = _speedups.crc32
else:
    append_record = append_record_py
    frame_size = frame_size_py
    _bookmark_strs = None
    crc32 = zlib.crc32


class FrameDecoder:
    """Decodes frames back into records (reusable msgspec decoders)."""

    __slots__ = ("_dec", "_cp")

    def __init__(self) -> None:
        self._dec = msgspec.msgpack.Decoder(_Payload)
        self._cp = msgspec.msgpack.Decoder(Checkpoint)

    def decode(self, prefix: tuple, payload) -> JournalRecord:
        """Build a record from an unpacked PREFIX tuple and its payload bytes (CRC already checked)."""
        _crc, _m, _v, kind, flags, _n, position, pub, seq, ts, cs = prefix
        p = self._dec.decode(payload)
        return JournalRecord(
            position=position,
            kind=kind,
            topic=p.topic,
            publisher_id=pub,
            sequence=seq,
            timestamp=ts,
            client_name=p.client_name,
            client_seq=cs if flags & FLAG_CLIENT_SEQ else None,
            correlation_id=p.correlation_id,
            sow_key=p.sow_key,
            expiration=p.expiration,
            message_type=p.message_type,
            headers=p.headers,
            body=p.body,
        )

    def decode_checkpoint(self, payload) -> Checkpoint:
        """The Checkpoint carried by a CHECKPOINT frame's payload."""
        return self._cp.decode(self._dec.decode(payload).body)
