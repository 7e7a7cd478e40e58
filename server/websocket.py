"""The ``websocket`` protocol: a framing in front of the ordinary :class:`Connection`.

The official JavaScript client (npm ``amps``) speaks AMPS over WebSocket. The socket-facing
:class:`WebSocketProtocol` does the HTTP upgrade and RFC 6455 framing with ``wsproto`` (driven
from this asyncio protocol, on the server's own loop) and otherwise only translates:

* inbound, the client's first message names its mode (``text`` for JSON, ``binary``); then
  every command is a 4-byte message holding a little-endian count N, followed by N messages:
  the header, then the body in N-1 parts. Each command becomes the same payload (header
  bytes followed by body bytes) that the TCP framing produces, and goes to the same
  :meth:`Connection.received`.
* outbound, the :class:`Connection` writes its usual length-prefixed frames into this
  object (it is the connection's transport). Each frame is split into one message for the
  header and one for the body. A ``p``/``oof`` with no body carries ``"l":0`` and no body
  message; a batched ``sow`` frame becomes its header with ``bs`` (the record count)
  followed by a header message and a body message per record; anything else (acks, groups,
  heartbeats) is its header alone.

Everything else (commands, acks, heartbeats, flow control, the slow-consumer limit, which
counts the bytes queued here through :meth:`get_write_buffer_size`) is the TCP code path.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
from typing import TYPE_CHECKING, Any

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from amps_emulator.protocol import reasons
from amps_emulator.protocol.codec import header_end
from amps_emulator.server.connection import Connection

if TYPE_CHECKING:
    from amps_emulator.server.app import Listener, Server

log = logging.getLogger("amps_emulator.websocket")

MAX_PARTS = 4096  # body parts one command may announce
_HANDSHAKE_LIMIT = 64 * 1024  # bytes of HTTP request accepted before the upgrade
_C_PREFIX = b'{"c":"'
_L_RE = re.compile(rb'"l":(\d+)')
_WITH_BODY = frozenset((b"p", b"publish", b"oof"))

# Close codes (RFC 6455 section 7.4.1)
_CLOSE_NORMAL = 1000
_CLOSE_PROTOCOL = 1002
_CLOSE_TOO_BIG = 1009


class _Framing(Exception):
    """The peer broke the client's command framing; the connection closes."""


def _command_of(header: bytes) -> bytes:
    """The ``c`` value of an encoded outbound header (the server always writes it first)."""
    if header.startswith(_C_PREFIX):
        end = header.find(b'"', len(_C_PREFIX))
        if end > 0:
            return header[len(_C_PREFIX):end]
    m = re.search(rb'"c"\s*:\s*"([^"]*)"', header)
    return m.group(1) if m else b""


def split_frames(data: bytes) -> list[tuple[bytes, bool]]:
    """The WebSocket messages for a run of server frames, each ``(bytes, is_body)``."""
    out: list[tuple[bytes, bool]] = []
    pos, n = 0, len(data)
    view = memoryview(data)
    while pos + 4 <= n:
        size = int.from_bytes(view[pos:pos + 4], "big")
        payload = bytes(view[pos + 4:pos + 4 + size])
        pos += 4 + size
        end = header_end(payload)
        if end < 0:  # not produced by this server; never expected
            log.error("websocket: dropping an outbound frame without a header")
            continue
        header, body = payload[:end], payload[end:]
        c = _command_of(header)
        if c == b"sow":
            out.extend(_sow_messages(header, body))
        elif c in _WITH_BODY:
            if body:
                out.append((header, False))
                out.append((body, True))
            else:
                out.append((header[:-1] + b',"l":0}', False))
        else:
            out.append((header, False))
    return out


def _sow_messages(outer: bytes, rest: bytes) -> list[tuple[bytes, bool]]:
    """A batched sow frame ``{outer}{k,l}data...`` as ``{outer,bs}`` then header/body pairs."""
    records: list[tuple[bytes, bool]] = []
    pos = 0
    while pos < len(rest):
        end = header_end(rest[pos:])
        if end < 0:
            break
        rec_header = rest[pos:pos + end]
        m = _L_RE.search(rec_header)
        length = int(m.group(1)) if m else len(rest) - pos - end
        body_start = pos + end
        records.append((rec_header, False))
        records.append((rest[body_start:body_start + length], True))
        pos = body_start + length
    head = outer[:-1] + b',"bs":' + str(len(records) // 2).encode() + b"}"
    return [(head, False), *records]


class WebSocketProtocol(asyncio.Protocol):
    """The socket side of one WebSocket client; the transport of its :class:`Connection`."""

    def __init__(self, server: "Server", listener: "Listener") -> None:
        self.server = server
        self.listener = listener
        self.ws = WSConnection(ConnectionType.SERVER)
        self.sock: asyncio.Transport | None = None
        self.conn: Connection | None = None
        self.text_bodies = True  # the client's mode: "text" (JSON) or "binary"
        self.authorization: str | None = None  # user from an Authorization: Basic header
        self._mode_known = False
        self._handshake_bytes = 0
        # the message being assembled (wsproto may deliver one in pieces)
        self._msg = bytearray()
        # the command being assembled: parts still expected, header, body parts
        self._expect = 0
        self._parts: list[bytes] = []
        self._size = 0
        self._closing = False

    # -- asyncio.Protocol (socket facing) -------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.sock = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.conn is None:
            self._handshake_bytes += len(data)
        try:
            self.ws.receive_data(data)
            events = list(self.ws.events())
        except (RemoteProtocolError, LocalProtocolError) as exc:
            self._fail(f"websocket protocol error: {exc}", _CLOSE_PROTOCOL)
            return
        payloads: list[bytes] = []
        for ev in events:
            if isinstance(ev, Request):
                self._upgrade(ev)
            elif isinstance(ev, (TextMessage, BytesMessage)):
                data_part = ev.data.encode("utf-8") if isinstance(ev.data, str) else ev.data
                self._msg += data_part
                if self._size + len(self._msg) > self.listener.max_frame:
                    self._fail(f"{reasons.DISCONNECT_PROTOCOL}: command larger than "
                               f"{self.listener.max_frame} bytes", _CLOSE_TOO_BIG)
                    return
                if ev.message_finished:
                    msg, self._msg = bytes(self._msg), bytearray()
                    try:
                        payload = self._message(msg, isinstance(ev, BytesMessage))
                    except _Framing as exc:
                        self._fail(f"{reasons.DISCONNECT_PROTOCOL}: {exc}", _CLOSE_PROTOCOL)
                        return
                    if payload is not None:
                        payloads.append(payload)
            elif isinstance(ev, Ping):
                self._write(self.ws.send(ev.response()))
            elif isinstance(ev, CloseConnection):
                if not self._closing:
                    self._closing = True
                    try:
                        self._write(self.ws.send(ev.response()))
                    except LocalProtocolError:
                        pass
                if self.sock is not None:
                    self.sock.close()
                return
        if self.conn is None:
            if self._handshake_bytes > _HANDSHAKE_LIMIT and self.sock is not None:
                self.sock.abort()
            return
        self.conn.received(payloads)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is not None:
            self.conn.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.conn is not None:
            self.conn.pause_writing()

    def resume_writing(self) -> None:
        if self.conn is not None:
            self.conn.resume_writing()

    # -- the upgrade ------------------------------------------------------------------------
    def _upgrade(self, req: Request) -> None:
        path = req.target.split("?", 1)[0].rstrip("/")
        parts = path.split("/")
        want = self.listener.message_type
        ok = len(parts) >= 3 and parts[-2] == "amps" and (want is None or parts[-1] == want)
        if not ok:
            expected = f"/amps/{want}" if want else "/amps/<message type>"
            log.info("websocket: refused upgrade for %r (this transport serves %s)",
                     req.target, expected)
            body = f"AMPS websocket transport: connect to {expected}\n".encode()
            self._write(self.ws.send(RejectConnection(
                status_code=404, headers=[(b"content-type", b"text/plain"),
                                          (b"content-length", str(len(body)).encode())],
                has_body=True)))
            self._write(self.ws.send(RejectData(data=body)))
            if self.sock is not None:
                self.sock.close()
            return
        for name, value in req.extra_headers:
            if name.lower() == b"authorization" and value[:6].lower() == b"basic ":
                try:
                    self.authorization = base64.b64decode(value[6:].strip()).decode(
                        "utf-8", "replace").split(":", 1)[0]
                except ValueError:
                    pass
        self._write(self.ws.send(AcceptConnection()))
        self.conn = Connection(self.server, self.listener)
        self.conn.connection_made(self)  # type: ignore[arg-type]

    # -- inbound commands -----------------------------------------------------------------------
    def _message(self, msg: bytes, binary: bool) -> bytes | None:
        """Take one complete client message; return a command payload when one is whole."""
        if not self._mode_known:
            mode = msg.decode("utf-8", "replace").strip().lower()
            if mode not in ("text", "binary"):
                raise _Framing(f"first message must be 'text' or 'binary', not {mode[:20]!r}")
            self.text_bodies = mode == "text"
            self._mode_known = True
            return None
        if self._expect == 0:
            if not binary or len(msg) != 4:
                raise _Framing("expected a 4-byte part count before a command")
            count = int.from_bytes(msg, "little")
            if not 1 <= count <= MAX_PARTS:
                raise _Framing(f"a command of {count} parts")
            self._expect = count
            self._parts = []
            self._size = 0
            return None
        self._parts.append(msg)
        self._size += len(msg)
        self._expect -= 1
        if self._expect:
            return None
        parts, self._parts, self._size = self._parts, [], 0
        header = parts[0]
        bodies = parts[1:]
        if len(bodies) <= 1:
            return header + (bodies[0] if bodies else b"")
        # several body parts (a composite message): each part length-prefixed, as AMPS
        # stores composite bodies
        return header + b"".join(len(p).to_bytes(4, "big") + p for p in bodies)

    # -- the Connection's transport --------------------------------------------------------------
    def write(self, data: bytes) -> None:
        send = self.ws.send
        out = []
        try:
            for item, is_body in split_frames(data):
                if is_body and not self.text_bodies:
                    out.append(send(BytesMessage(data=item)))
                    continue
                try:
                    text = item.decode("utf-8")
                except UnicodeDecodeError:
                    out.append(send(BytesMessage(data=item)))
                else:
                    out.append(send(TextMessage(data=text)))
        except LocalProtocolError:  # the client is already closing
            return
        self._write(b"".join(out))

    def _write(self, data: bytes) -> None:
        if data and self.sock is not None and not self.sock.is_closing():
            self.sock.write(data)

    def get_write_buffer_size(self) -> int:
        return self.sock.get_write_buffer_size() if self.sock is not None else 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if self.sock is not None:
            self.sock.set_write_buffer_limits(high=high, low=low)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.sock.get_extra_info(name, default) if self.sock is not None else default

    def pause_reading(self) -> None:
        if self.sock is not None:
            self.sock.pause_reading()

    def resume_reading(self) -> None:
        if self.sock is not None:
            self.sock.resume_reading()

    def is_closing(self) -> bool:
        return self.sock is None or self.sock.is_closing()

    def close(self) -> None:
        """Orderly close: a WebSocket close frame, then the socket."""
        self._send_close(_CLOSE_NORMAL, "")
        if self.sock is not None:
            self.sock.close()

    def abort(self) -> None:
        if self.sock is not None:
            self.sock.abort()

    def _send_close(self, code: int, reason: str) -> None:
        if self._closing:
            return
        self._closing = True
        try:
            self._write(self.ws.send(CloseConnection(code=code, reason=reason[:120])))
        except LocalProtocolError:
            pass

    def _fail(self, why: str, code: int) -> None:
        if self.conn is not None:
            self._send_close(code, why)
            self.conn.close(why)
        else:
            log.info("websocket: closing before the upgrade: %s", why)
            if self.sock is not None:
                self.sock.abort()
