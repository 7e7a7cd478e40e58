"""The ``websocket`` protocol: a framing in front of the ordinary :class:`Connection`.

The official JavaScript client (npm ``amps``) speaks AMPS over WebSocket. The socket-facing
:class:`WebSocketProtocol` does the HTTP upgrade and RFC 6455 framing with the ``websockets``
package's sans-IO protocol (driven from this asyncio protocol, on the server's own loop) and
otherwise only translates:

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
import logging
import re
from collections.abc import Callable

import msgspec
from websockets.exceptions import InvalidState
from websockets.frames import CloseCode, Frame, Opcode
from websockets.http11 import Request
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.typing import BytesLike

from amps_emulator.protocol import reasons
from amps_emulator.protocol.codec import header_end, payloads_of
from amps_emulator.server.core.ports import ListenerInfo
from amps_emulator.server.net.connection import Connection
from amps_emulator.server.net.socket_wrapper import StreamSocket, WrappedSocket

log = logging.getLogger("amps_emulator.websocket")

MAX_PARTS = 4096  # body parts one command may announce
_C_PREFIX = b'{"c":"'
_L_RE = re.compile(rb'"l":(\d+)')
_WITH_BODY = frozenset((b"p", b"publish", b"oof"))
_DATA_OPCODES = (Opcode.TEXT, Opcode.BINARY, Opcode.CONT)


_decode_header = msgspec.json.Decoder(dict).decode


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
    for payload in payloads_of(data):
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


class WebSocketProtocol(WrappedSocket, asyncio.Protocol):
    """The socket side of one WebSocket client; the transport of its :class:`Connection`."""

    def __init__(self, make_connection: Callable[[], Connection], listener: ListenerInfo) -> None:
        #: builds the Connection behind this socket once the upgrade succeeds (the server's
        #: ``Listener.protocol_factory`` binds it to its host and listener)
        self.make_connection = make_connection
        self.listener = listener
        # max_size: one client message; a whole command is checked against it below too
        self.ws = ServerProtocol(max_size=listener.max_frame, logger=log)
        self.sock: StreamSocket | None = None
        self.conn: Connection | None = None
        self.text_bodies = True  # the client's mode: "text" (JSON) or "binary"
        #: the message type the upgrade's path names (``/amps/<type>``): the JavaScript client
        #: sends no ``mt`` at logon, so the path is what gives the connection its type
        self.path_type: str | None = None
        self._mode_known = False
        # the message being assembled from fragments
        self._msg: list[BytesLike] = []
        self._msg_binary = False
        # the command being assembled: parts still expected, and those received
        self._expect = 0
        self._parts: list[bytes] = []
        self._size = 0

    # -- asyncio.Protocol (socket facing) -------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.attach(transport)

    def data_received(self, data: bytes) -> None:
        ws = self.ws
        ws.receive_data(data)
        payloads: list[bytes] = []
        try:
            for ev in ws.events_received():
                if isinstance(ev, Request):
                    self._upgrade(ev)
                elif isinstance(ev, Frame) and ev.opcode in _DATA_OPCODES:
                    payload = self._frame(ev)
                    if payload is not None:
                        payloads.append(payload)
        except _Framing as exc:
            self._flush_ws()
            self._fail(f"{reasons.DISCONNECT_PROTOCOL}: {exc}", CloseCode.PROTOCOL_ERROR)
            return
        self._flush_ws()  # handshake replies, pongs, close replies
        conn = self.conn
        if conn is None:
            return
        conn.bytes_in += len(data)
        conn.received(payloads)
        if ws.state is not State.OPEN and not conn.closed:
            if ws.parser_exc is not None:  # broken framing, oversized message: already closed
                conn.close(f"{reasons.DISCONNECT_PROTOCOL}: websocket: {ws.parser_exc}")
            elif self.sock is not None:  # the client closed; connection_lost follows
                self.sock.close()

    def eof_received(self) -> bool | None:
        self.ws.receive_eof()
        return None  # close the socket

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is not None:
            self.conn.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.conn is not None:
            self.conn.pause_writing()

    def resume_writing(self) -> None:
        if self.conn is not None:
            self.conn.resume_writing()

    def _flush_ws(self) -> None:
        """Write what the WebSocket protocol has queued (b"" there means: close the socket)."""
        out = self.ws.data_to_send()
        if not out or self.sock is None or self.sock.is_closing():
            return
        data = b"".join(out)
        if data:
            self.sock.write(data)
        if out[-1] == b"":
            self.sock.close()

    # -- the upgrade ------------------------------------------------------------------------
    def _upgrade(self, req: Request) -> None:
        path = req.path.split("?", 1)[0].rstrip("/")
        parts = path.split("/")
        want = self.listener.message_type
        if not (len(parts) >= 3 and parts[-2] == "amps" and (want is None or parts[-1] == want)):
            expected = f"/amps/{want}" if want else "/amps/<message type>"
            log.info("websocket: refused upgrade for %r (this transport serves %s)",
                     req.path, expected)
            self.ws.send_response(self.ws.reject(
                404, f"AMPS websocket transport: connect to {expected}\n"))
            return
        # An Authorization: Basic header (the Node client sends one for user:password@ in
        # the URI) is accepted; the logon command carries the same user, as over TCP.
        self.path_type = parts[-1]
        response = self.ws.accept(req)
        self.ws.send_response(response)
        if response.status_code != 101:  # not a valid upgrade request
            return
        self._flush_ws()
        self.conn = self.make_connection()
        self.conn.connection_made(self)  # type: ignore[arg-type]

    # -- inbound commands -----------------------------------------------------------------------
    def _frame(self, frame: Frame) -> bytes | None:
        """Take one data frame; return a command payload when one is whole."""
        if frame.opcode is not Opcode.CONT:
            self._msg_binary = frame.opcode is Opcode.BINARY
        if not frame.fin:
            self._msg.append(frame.data)
            if self._size + sum(map(len, self._msg)) > self.listener.max_frame:
                raise _Framing(f"command larger than {self.listener.max_frame} bytes")
            return None
        msg: BytesLike
        if self._msg:
            self._msg.append(frame.data)
            msg = b"".join(self._msg)
            self._msg = []
        else:
            msg = frame.data
        return self._message(bytes(msg), self._msg_binary)

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
        if self._size > self.listener.max_frame:
            raise _Framing(f"command larger than {self.listener.max_frame} bytes")
        self._expect -= 1
        if self._expect:
            return None
        parts, self._parts, self._size = self._parts, [], 0
        header = self._typed_logon(parts[0])
        bodies = parts[1:]
        if len(bodies) <= 1:
            return header + (bodies[0] if bodies else b"")
        # several body parts (a composite message): each part length-prefixed, as AMPS
        # stores composite bodies
        return header + b"".join(len(p).to_bytes(4, "big") + p for p in bodies)

    def _typed_logon(self, header: bytes) -> bytes:
        """A logon header that names no message type gets the upgrade path's (as AMPS takes
        a WebSocket connection's type from its URI); any other header is returned as is."""
        path_type = self.path_type
        if path_type is None or b'"logon"' not in header or b'"mt"' in header \
                or b'"message_type"' in header:
            return header
        try:
            fields = _decode_header(header)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            return header  # the command parser reports it
        if fields.get("c", fields.get("cmd")) != "logon":
            return header
        fields["mt"] = path_type
        return msgspec.json.encode(fields)

    # -- the Connection's transport --------------------------------------------------------------
    def write(self, data: bytes) -> None:
        ws = self.ws
        if ws.state is not State.OPEN:
            return
        text_bodies = self.text_bodies
        try:
            for item, is_body in split_frames(data):
                if is_body and not text_bodies:
                    ws.send_binary(item)
                    continue
                try:
                    item.decode("utf-8")
                except UnicodeDecodeError:
                    ws.send_binary(item)
                else:
                    ws.send_text(item)
        except InvalidState:  # the client is already closing
            return
        self._flush_ws()

    def close(self) -> None:
        """Orderly close: a WebSocket close frame, then the socket."""
        self._send_close(CloseCode.NORMAL_CLOSURE, "")
        if self.sock is not None:
            self.sock.close()

    def _send_close(self, code: int, reason: str) -> None:
        if self.ws.state is State.OPEN:
            # a close frame carries at most 123 bytes of reason: cut the UTF-8, not the
            # characters (a reason quoting a client's bytes may hold 3-byte ones)
            self.ws.send_close(code, reason.encode()[:120].decode("utf-8", "ignore"))
            self._flush_ws()

    def _fail(self, why: str, code: int) -> None:
        self._send_close(code, why)
        if self.conn is not None:
            self.conn.close(why)
        elif self.sock is not None:
            self.sock.abort()
