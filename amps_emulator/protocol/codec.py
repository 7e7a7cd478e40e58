"""Sans-IO codec for the AMPS "amps" protocol: bytes in, commands out; replies to bytes.

Framing (``docs/design/amps-wire-protocol.md`` section 1): every frame is a 4-byte
big-endian payload length, then the payload, which is one flat JSON header object
immediately followed by the body bytes. The decoder checks the length prefix against a
configurable maximum *before* buffering anything of the payload, so a hostile
length prefix costs nothing.

Two error types (the h11 split): :class:`ProtocolError` means the peer broke the framing or
sent something that cannot be a header; the connection must be closed.
:class:`protocol.reasons.CommandError` means one command was bad but the stream is intact;
the server answers with a failure ack and carries on.

Outbound, headers are written compactly (no whitespace, raw UTF-8, never ``\\uXXXX``
escapes) and with client-known keys only; see :mod:`protocol.headers`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, Protocol, cast

import msgspec

from amps_emulator import accel
from amps_emulator.protocol import reasons
from amps_emulator.protocol.command import Command, decode_header, finish_command
from amps_emulator.protocol.headers import ACK_TYPES, CLIENT_KNOWN_KEYS
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.protocol.topics import display_name

DEFAULT_MAX_FRAME = 64 * 1024 * 1024

# A flat JSON object: strings (with escapes) or anything that is not a quote or a brace.
_HEADER_RE = re.compile(rb'\{(?:"(?:[^"\\]|\\.)*"|[^"{}])*\}', re.DOTALL)
_CID_RE = re.compile(rb'"(?:cid|cmd_id)"\s*:\s*"((?:[^"\\]|\\.)*)"')

_decode_header = msgspec.json.Decoder(dict).decode
_json_encode = msgspec.json.encode


class ProtocolError(Exception):
    """The peer broke the protocol; the connection cannot continue."""


def header_end(payload: bytes) -> int:
    """Index just past the header object's closing brace, or -1 if there is none.

    Fast path: the first ``}`` ends the header when the header has no backslash and an even
    number of quotes before it (so that ``}`` is not inside a string). Otherwise a regular
    expression that understands strings and escapes decides.
    """
    if payload[:1] != b"{":
        return -1
    end = payload.find(b"}")
    if end < 0:
        return -1
    if payload.count(b'"', 0, end) % 2 == 0 and payload.find(b"\\", 0, end) < 0:
        return end + 1
    m = _HEADER_RE.match(payload)
    return -1 if m is None else m.end()


def split_frame(payload: bytes | SplitPayload) -> tuple[dict[str, Any], bytes]:
    """Split one frame payload into (header dict, body bytes).

    Raises :class:`ProtocolError` if the payload does not start with a flat JSON object.
    """
    if isinstance(payload, SplitPayload):
        return split_frame(payload.head)[0], payload.body
    end = header_end(payload)
    if end < 0:
        raise ProtocolError("frame does not start with a JSON header object")
    try:
        header = _decode_header(payload[:end])
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ProtocolError(f"header is not valid JSON: {exc}") from None
    return header, payload[end:]


#: (end of header, topic, ack type, cid, seq) of a plain publish header, else None
_PublishParts = tuple[int, str | None, str | None, str | None, int | None]
_parse_publish_header: Callable[[bytes], _PublishParts | None] | None = None
if accel.COMPILED:
    from amps_emulator._speedups import parse_publish_header

    _parse_publish_header = parse_publish_header

#: one field of a plain publish header: "c", "t", "a" or "cid" with a string value free of
#: escapes and control characters, or "s" with a JSON integer or a string of digits
_PLAIN_FIELD = re.compile(rb'"(c|t|a|cid)":"([^"\\\x00-\x1f]*)"|"s":(?:(0|[1-9][0-9]*)|"([0-9]+)")')
_U64 = 1 << 64


def parse_publish_header_py(payload: bytes) -> _PublishParts | None:
    """The pure-Python twin of ``_speedups.parse_publish_header``: the header of a plain
    publish (``c`` is ``p`` or ``publish``; maybe ``t``, ``a``, ``cid``, ``s``, each once; no
    whitespace) read without the general decoder; None for any other header."""
    if payload[:1] != b"{":
        return None
    texts: dict[bytes, bytes] = {}
    seq: int | None = None
    match = _PLAIN_FIELD.match
    i = 1
    while True:
        m = match(payload, i)
        if m is None:
            return None
        name = m.group(1)
        if name is None:  # "s": a JSON integer, or a string of digits (the JavaScript client)
            if seq is not None:
                return None
            seq = int(m.group(3) or m.group(4))
            if seq >= _U64:
                return None
        elif name in texts:
            return None
        else:
            texts[name] = m.group(2)
        i = m.end()
        sep = payload[i:i + 1]
        i += 1
        if sep == b"}":
            break
        if sep != b",":
            return None
    if texts.get(b"c") not in (b"p", b"publish"):
        return None
    try:
        topic, ack, cid = (None if v is None else v.decode()
                           for v in (texts.get(b"t"), texts.get(b"a"), texts.get(b"cid")))
    except UnicodeDecodeError:
        return None
    return i, topic, ack, cid, seq


#: the plain-publish header reader the publish runs use (``server.messaging.publish_runs``): compiled
#: when built, else its pure twin
plain_publish: Callable[[bytes], _PublishParts | None] = \
    _parse_publish_header if _parse_publish_header is not None else parse_publish_header_py


def parse_command(payload: bytes | SplitPayload) -> Command:
    """Decode one frame payload into a :class:`Command`.

    A :class:`SplitPayload` (a large frame) is its header decoded as a payload of its own,
    its body attached as it is (no copy).

    A header that is broken or mistyped but whose ``cid`` is readable raises
    :class:`CommandError` (``header malformed``) carrying ``cid`` so the server can
    answer; one with no recoverable header raises :class:`ProtocolError`.

    Fast path (every well-formed frame): the header is decoded up to the first ``}``
    straight away. When that brace is inside a string (or the header is otherwise not
    flat), those bytes cannot be a complete JSON document (the string or an inner
    object is still open) and the decoder fails; then (and on any other failure) the
    frame takes the original path, where :func:`header_end` finds the real end. A
    prefix that does decode ends at the same brace ``header_end`` would pick, so the
    result is always the same, without scanning for quotes and backslashes first.

    Before that, with the compiled hot path, the header of a plain publish (``c``, ``t`` and
    maybe ``a``, ``cid``, ``s``: what the official clients send) is read in C, and the command
    built from its values; the extension declines every other header, and an ack type outside
    the single known ones goes the general way too (:func:`finish_command` checks lists).
    """
    if isinstance(payload, SplitPayload):
        cmd = parse_command(payload.head)
        cmd.body = payload.body
        return cmd
    if _parse_publish_header is not None:
        parts = _parse_publish_header(payload)
        if parts is not None:
            end, topic, ack_type, cid, seq = parts
            if ack_type is None or ack_type in ACK_TYPES:
                return Command(command="publish", body=payload[end:], topic=topic,
                               ack_type=ack_type, wire_cid=cid, wire_seq=seq, seq=seq)
    end = payload.find(b"}") + 1
    if end > 0 and payload[:1] == b"{":
        try:
            cmd = decode_header(payload[:end])
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            pass  # (ValidationError included) not a header up to the first brace: the slow path
        else:
            return finish_command(cmd, payload[end:])
    end = header_end(payload)
    if end > 0:
        try:
            cmd = decode_header(payload[:end])
        except msgspec.ValidationError as exc:
            raise _mistyped(payload, exc) from None
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            pass  # (RecursionError: a value nested too deep to decode)
        else:
            return finish_command(cmd, payload[end:])
    raise _malformed(payload, "header is not a flat JSON object")


def _mistyped(payload: bytes, exc: msgspec.ValidationError) -> Exception:
    """Valid JSON, wrong field types: the stream is intact, so answer if possible."""
    err = _malformed(payload, f"bad header field: {exc}")
    if isinstance(err, ProtocolError):
        err = CommandError(reasons.HEADER_MALFORMED, str(err))
        err.cid = None
    return err


def _malformed(payload: bytes, detail: str) -> Exception:
    m = _CID_RE.search(payload[:4096])
    if m is None:
        return ProtocolError(detail)
    err = CommandError(reasons.HEADER_MALFORMED, detail)
    err.cid = m.group(1).decode("utf-8", "replace")
    return err


def scan_frames_py(data: bytes, need: int, limit: int) -> tuple[list[bytes], int, int]:
    """Cut every complete payload out of ``data`` (one copy each); ``need``: the payload length
    of a frame whose length prefix was already read (-1: none). Returns the payloads, the offset
    of the first byte not consumed and the pending payload length (-1: at a length prefix). A
    length prefix above ``limit`` stops the scan with that length as the pending one (the caller
    refuses the stream). The pure-Python twin of ``_speedups.scan_frames``."""
    out: list[bytes] = []
    append = out.append
    pos = 0
    n = len(data)
    while True:
        if need < 0:
            if n - pos < 4:
                break
            need = int.from_bytes(data[pos:pos + 4], "big")
            if need > limit:
                break
            pos += 4
        if n - pos < need:
            break
        append(data[pos:pos + need])
        pos += need
        need = -1
    return out, pos, need


if accel.COMPILED:
    from amps_emulator._speedups import scan_frames
else:
    scan_frames = scan_frames_py


def payloads_of(data: bytes) -> list[bytes]:
    """The payloads of a run of whole frames the server wrote (a wrapping transport translates
    them one by one); a trailing partial frame, never expected, is left out."""
    return scan_frames(bytes(data), -1, len(data))[0]


#: a frame whose payload is larger than this is assembled apart (:class:`FrameDecoder` with
#: ``split``): its header's bytes and its body, each read copied into place as it arrives
LARGE_FRAME = 1 << 20
#: a large frame's header must end within this many bytes to be assembled apart (else the
#: frame is buffered whole, as a small one)
HEADER_LIMIT = 64 << 10


class SplitPayload:
    """The payload of a large frame as :class:`FrameDecoder` assembled it: the header object's
    bytes (``head``) and the body (``body``), never joined (:func:`parse_command` and
    :func:`split_frame` take either form). ``len`` is the payload's."""

    __slots__ = ("body", "head")

    def __init__(self, head: bytes, body: bytes) -> None:
        self.head = head
        self.body = body

    def __len__(self) -> int:
        return len(self.head) + len(self.body)

    def __bytes__(self) -> bytes:
        return self.head + self.body


#: one frame's payload as :meth:`FrameDecoder.feed` returns it
Payload = bytes | SplitPayload


class BodyFiller(Protocol):
    """A large frame's body being received (``Filler``: compiled, or :class:`FillerPy`)."""

    @property
    def filled(self) -> int: ...
    @property
    def remaining(self) -> int: ...
    def write(self, data: bytes | bytearray | memoryview, start: int) -> int: ...
    def take(self) -> bytes: ...


class FillerPy:
    """The pure-Python twin of ``_speedups.Filler``: ``size`` bytes written piece by piece,
    joined once by ``take`` (the compiled one fills one bytes object and copies nothing at
    the end)."""

    __slots__ = ("_chunks", "filled", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.filled = 0
        self._chunks: list[bytes] = []

    @property
    def remaining(self) -> int:
        return self.size - self.filled

    def write(self, data: bytes | bytearray | memoryview, start: int) -> int:
        n = min(len(data) - start, self.size - self.filled)
        if n > 0:
            with memoryview(data) as view:
                self._chunks.append(view[start:start + n].tobytes())
            self.filled += n
        return max(n, 0)

    def take(self) -> bytes:
        if self.filled != self.size:
            raise ValueError("FillerPy.take: not filled")
        data = b"".join(self._chunks)
        self._chunks = []
        return data


Filler: Callable[[int], BodyFiller] = FillerPy
if accel.COMPILED:
    from amps_emulator._speedups import Filler as _Filler

    Filler = _Filler


class FrameDecoder:
    """Incremental frame reader: ``feed(bytes)`` then iterate ``frames()``.

    Memory is bounded by ``max_frame`` plus one read: a length prefix larger than
    ``max_frame`` raises :class:`ProtocolError` before any of that payload is kept.

    ``split`` (an attribute too): a frame of more than :data:`LARGE_FRAME` bytes comes out as a
    :class:`SplitPayload`. Once its header has arrived, its body is a :class:`Filler` of its
    exact size that each read is copied into as it comes; the complete body is handed out as
    it is, so no pass of the event loop copies 32 MiB (twice: out of the buffer, then the body
    out of the payload) when the last read of a large publish arrives.
    """

    __slots__ = ("_body", "_buf", "_head", "_max", "_need", "_tried", "_whole", "split")

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME, split: bool = False) -> None:
        self._buf = bytearray()
        self._max = max_frame
        self._need = -1  # payload length of the frame being assembled, -1 = reading prefix
        self.split = split  # (may be set later: a connection assembles apart once logged on)
        self._head = b""  # a large frame's header, once read (split)
        self._body: BodyFiller | None = None  # its body being filled (split)
        self._whole = False  # this large frame's header did not end early: buffered whole
        self._tried = 0  # how much of this large frame was buffered when its header was sought

    @property
    def buffered(self) -> int:
        """Bytes this decoder holds for a frame not complete yet: a large frame's body counts
        whole from when its ``Filler`` is made (the whole size is allocated then), not as its
        bytes arrive."""
        body = self._body
        return len(self._buf) + (len(self._head) + body.filled + body.remaining
                                 if body is not None else 0)

    @property
    def pending(self) -> int:
        """The payload length of the frame being received, once its length prefix is read
        (-1: at a length prefix): what a peer announced before sending it."""
        return self._need

    def feed(self, data: bytes) -> list[bytes]:
        """:meth:`feed_payloads` of a decoder without ``split``, whose payloads are all bytes."""
        return cast("list[bytes]", self.feed_payloads(data))

    def feed_payloads(self, data: bytes) -> list[Payload]:
        """Add received bytes; return every payload that is now complete, in order.

        Payloads are cut from the received bytes with one copy each (a slice of a
        ``bytes``); only a frame split across reads goes through the internal buffer, and a
        large one is copied out of it once, when it is complete (or, with ``split``, into its
        body as it arrives).
        """
        body = self._body
        if body is None:
            return self._feed(data)
        taken = body.write(data, 0)
        if body.remaining:
            return []  # the rest of a large body still arriving
        first: list[Payload] = [SplitPayload(self._head, body.take())]
        self._body = None
        self._head = b""
        self._need = -1
        if taken == len(data):
            return first
        with memoryview(data) as view:
            rest = view[taken:].tobytes()  # (what came after it: at most one read)
        return first + self._feed(rest)

    def _feed(self, data: bytes) -> list[Payload]:
        buf = self._buf
        need = self._need
        first = None
        if buf:
            buf += data
            if need >= 0:
                if len(buf) < need:
                    if self.split and need > LARGE_FRAME and not self._whole:
                        self._begin_split()
                    return []  # the rest of a frame still arriving
                # the frame is complete: its payload is the buffer's start (copied once)
                with memoryview(buf) as view:
                    first = view[:need].tobytes()
                    data = view[need:].tobytes()  # (what came after it)
                need = -1
                self._whole = False
                self._tried = 0
            else:
                data = bytes(buf)
            self._buf = bytearray()
        elif data.__class__ is not bytes:
            data = bytes(data)
        found, pos, need = scan_frames(data, need, self._max)
        out: list[Payload] = list(found)
        if first is not None:
            out.insert(0, first)
        if need > self._max:
            self._buf = bytearray()
            self._need = -1
            raise ProtocolError(f"frame length {need} exceeds the maximum of {self._max} bytes")
        n = len(data)
        if pos < n:
            self._buf += memoryview(data)[pos:]
        self._need = need
        if self.split and need > LARGE_FRAME and self._buf:
            self._begin_split()
        return out

    def _begin_split(self) -> None:
        """The buffer holds the start of a large frame's payload: once its header has ended,
        keep the header and move what came of the body into a :class:`Filler`; a header that
        has not ended within :data:`HEADER_LIMIT` bytes leaves the frame to be buffered whole.
        The header is sought again only once the buffer has doubled (or reached the limit):
        a header trickled a byte a read is scanned a few times, not once a byte."""
        buf = self._buf
        n = len(buf)
        if n < 2 * self._tried and n < HEADER_LIMIT:
            return
        self._tried = n
        with memoryview(buf) as view:
            end = header_end(view[:HEADER_LIMIT].tobytes())
            if end < 0:
                self._whole = n >= HEADER_LIMIT
                return
            self._tried = 0
            self._head = view[:end].tobytes()
            body = self._body = Filler(self._need - end)
            body.write(view, end)
        self._buf = bytearray()


# ---------------------------------------------------------------------------------------
# Encoding (server -> client)

def frame(header: dict[str, Any], body: bytes = b"") -> bytes:
    """One complete frame: length prefix + compact header + body."""
    h = _json_encode(header)
    return (len(h) + len(body)).to_bytes(4, "big") + h + body


def frame_raw(header_bytes: bytes, body: bytes = b"") -> bytes:
    """Frame an already encoded header."""
    return (len(header_bytes) + len(body)).to_bytes(4, "big") + header_bytes + body


def frame_parts_py(head: bytes, sids: bytes, tail: bytes, body: bytes) -> bytes:
    """One frame whose header is ``head + sids + tail``: a fan-out delivery, its header
    shared by every subscriber but for the ``sids``. The pure-Python twin of
    ``_speedups.frame_parts``."""
    return b"".join(((len(head) + len(sids) + len(tail) + len(body)).to_bytes(4, "big"),
                     head, sids, tail, body))


if accel.COMPILED:
    from amps_emulator._speedups import frame_parts
else:
    frame_parts = frame_parts_py


def json_str(value: str) -> bytes:
    """A JSON string literal as bytes (quotes included), raw UTF-8."""
    return _json_encode(value)


def ack(cid: str | None, ack_type: str, status: str = "success", reason: str | None = None,
        **extra: Any) -> bytes:
    """An ``ack`` frame. ``extra`` keys are client-known header keys (sub_id, query_id, s, bm,
    records_returned, matches, topic_matches, records_deleted, version, client_name, ...)."""
    h: dict[str, Any] = {"c": "ack"}
    if cid is not None:
        h["cid"] = cid
    s = extra.pop("s", None)
    if s is not None:
        # never the last key: the JavaScript client reads it with the pattern "s":(\d+),
        h["s"] = s
    h["a"] = ack_type
    h["status"] = status
    if reason is not None:
        h["reason"] = reason
    for k, v in extra.items():
        if v is not None:
            h[k] = v
    return frame(h)


def sow_batch_prefix(topic: str, query_id: str) -> bytes:
    """The outer header of a batched ``sow`` frame (what its records follow)."""
    return _json_encode({"c": "sow", "t": display_name(topic), "query_id": query_id})


def sow_batch(topic: str, query_id: str, records: Iterable[tuple[dict[str, Any], bytes]]) -> bytes:
    """A batched ``sow`` frame: ``{outer}{record header}DATA{record header}DATA...``.

    Each record header gets ``l`` (exact data length) added; per-record fields are sticky
    on the client, so callers must set the same set of fields on every record.
    """
    parts = [sow_batch_prefix(topic, query_id)]
    for rec_header, data in records:
        rec_header["l"] = len(data)
        parts.append(_json_encode(rec_header))
        parts.append(data)
    payload = b"".join(parts)
    return len(payload).to_bytes(4, "big") + payload


def unknown_keys(header: dict[str, Any]) -> set[str]:
    """Keys in ``header`` that the official client's parser would not understand."""
    return {k for k in header if k not in CLIENT_KNOWN_KEYS}
