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

Bounds: :class:`FrameSizes` follows the inbound byte stream (the HTTP request head, then each
frame's header) without keeping it, so that what the ``websockets`` protocol holds for the
client (a partial request or frame) is known: it counts in the server's memory budget, and
before the logon a frame announcing more than the transport's ``MaxFrameSizeBeforeLogon``
closes the connection as soon as its header arrives. Until the upgrade is done the socket is
its own holder in the budget (:class:`_Upgrading`) and the logon timeout runs from the
accept, so an upgrade trickled a byte at a time is closed when it ends.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
from websockets.exceptions import InvalidState
from websockets.frames import CloseCode, Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.typing import BytesLike

from amps_emulator.protocol import reasons
from amps_emulator.protocol.codec import Payload, header_end, payloads_of
from amps_emulator.server.core.ports import ListenerInfo
from amps_emulator.server.net.admission import Admits, accepted_at, reset
from amps_emulator.server.net.connection import BUDGET_STEP, Connection
from amps_emulator.server.net.socket_wrapper import StreamSocket, WrappedSocket
from amps_emulator.server.net.ws_deflate import deflate_extensions
from amps_emulator.server.net.ws_upgrade import Verdict, decide

if TYPE_CHECKING:
    from amps_emulator.auth import Session
    from amps_emulator.server.core.ports import ConnectionHost

log = logging.getLogger("amps_emulator.websocket")

MAX_PARTS = 4096  # body parts one command may announce
_C_PREFIX = b'{"c":"'
_L_RE = re.compile(rb'"l":(\d+)')
_WITH_BODY = frozenset((b"p", b"publish", b"oof"))
_DATA_OPCODES = (Opcode.TEXT, Opcode.BINARY, Opcode.CONT)


_decode_header = msgspec.json.Decoder(dict).decode


#: the upgrades whose log-on check is running
_DECIDING: set[asyncio.Task] = set()

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


_HEAD_END = b"\r\n\r\n"
_LONGEST_HEADER = 14  # 2 bytes, an 8-byte length, a 4-byte mask


class FrameSizes:
    """Where a WebSocket client's inbound byte stream is, without keeping any of it: in the
    HTTP request head (:attr:`head` bytes so far), or in a frame (its header bytes, the
    payload length it announced and the payload bytes still to come)."""

    __slots__ = ("_hdr", "_left", "_size", "_tail", "head", "in_head")

    def __init__(self) -> None:
        self.in_head = True
        self.head = 0  # bytes of the request head received so far
        self._tail = b""  # its last 3 bytes (the end marker may span two reads)
        self._hdr = bytearray()  # the header of the next frame, as far as it has arrived
        self._size = 0  # payload length of the frame being received (0: between frames)
        self._left = 0  # its payload bytes still to come

    @property
    def receiving(self) -> int:
        """The payload length the frame being received announced (0: between frames)."""
        return 0 if self.in_head else self._size

    @property
    def partial(self) -> int:
        """Bytes of the unfinished request head or frame: what the WebSocket protocol
        holds until it is whole."""
        if self.in_head:
            return self.head
        return len(self._hdr) + self._size - self._left

    def feed(self, data: bytes) -> int:
        """Follow ``data``; return the largest payload length a frame header in it announced
        (0: none was completed)."""
        pos = 0
        n = len(data)
        if self.in_head:
            seen = self._tail + data
            end = seen.find(_HEAD_END)
            if end < 0:
                self.head += n
                self._tail = seen[-3:]
                return 0
            pos = end + len(_HEAD_END) - len(self._tail)
            self.head += pos
            self.in_head = False
            self._tail = b""
        largest = 0
        hdr = self._hdr
        size, left = self._size, self._left
        while pos < n:
            if left:  # inside a payload: skip it
                step = left if left < n - pos else n - pos
                pos += step
                left -= step
                if not left:
                    size = 0
                continue
            if not hdr and n - pos >= _LONGEST_HEADER:  # a whole header here: read it in place
                second = data[pos + 1]
                short = second & 0x7F
                if short < 126:
                    size, head_len = short, 2
                elif short == 126:
                    size, head_len = int.from_bytes(data[pos + 2:pos + 4], "big"), 4
                else:
                    size, head_len = int.from_bytes(data[pos + 2:pos + 10], "big"), 10
                pos += head_len + (4 if second & 0x80 else 0)
            else:  # a header split across reads
                take = min(_header_size(hdr) - len(hdr), n - pos)
                hdr += data[pos:pos + take]
                pos += take
                if len(hdr) < _header_size(hdr):
                    continue
                size = _payload_size(hdr)
                hdr.clear()
            left = size
            if size > largest:
                largest = size
        self._size, self._left = size, left
        return largest


def _header_size(hdr: bytearray) -> int:
    """The length of a frame header whose first bytes are ``hdr`` (2 until it has them)."""
    if len(hdr) < 2:
        return 2
    second = hdr[1]
    short = second & 0x7F
    extended = 2 if short == 126 else 8 if short == 127 else 0
    return 2 + extended + (4 if second & 0x80 else 0)


def _payload_size(hdr: bytearray) -> int:
    short = hdr[1] & 0x7F
    if short == 126:
        return int.from_bytes(hdr[2:4], "big")
    if short == 127:
        return int.from_bytes(hdr[2:10], "big")
    return short


class _Upgrading:
    """A WebSocket socket in its HTTP upgrade, as the memory budget sees it (once upgraded,
    its Connection counts the same bytes)."""

    def __init__(self, ws: WebSocketProtocol) -> None:
        self.ws = ws

    @property
    def closed(self) -> bool:
        return self.ws.sock is None or self.ws.sock.is_closing()

    def budget_bytes(self) -> int:
        return self.ws.inbound_buffered()

    def describe(self) -> str:
        return self.ws.describe()

    def close(self, why: str, abort: bool = False) -> None:
        self.ws.refuse(why)


class WebSocketProtocol(WrappedSocket, asyncio.Protocol):
    """The socket side of one WebSocket client; the transport of its :class:`Connection`."""

    def __init__(self, make_connection: Callable[[], Connection], listener: ListenerInfo,
                 host: ConnectionHost, cap: Admits | None = None) -> None:
        #: builds the Connection behind this socket once the upgrade succeeds (the server's
        #: ``Listener.protocol_factory`` binds it to its host and listener)
        self.make_connection = make_connection
        self.listener = listener
        self.host = host
        self._cap = cap
        self._admitted = False
        self.sizes = FrameSizes()
        self._upgrading: _Upgrading | None = None  # in the budget until the upgrade
        self._deadline: float | None = None  # the logon timeout's end (loop time)
        self._timer: asyncio.TimerHandle | None = None  # the upgrade's part of it
        self._in_mark = BUDGET_STEP
        # max_size: one client message; a whole command is checked against it below too
        self.ws = ServerProtocol(max_size=listener.max_frame, logger=log,  # (inflated: ws_deflate)
                                 extensions=deflate_extensions(listener.per_message_deflate,
                                                               self._frame_limit))
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
        #: the user and session the upgrade logged on (``ws_upgrade``), until the connection's
        #: logon takes them (``get_extra_info("upgrade_logon")``)
        self._upgrade_logon: tuple[str, Session] | None = None
        self._held: list = []  # events after a request whose log-on is being decided

    # -- asyncio.Protocol (socket facing) -------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._cap is not None:
            if not self._cap.admit(transport):  # over the transport's MaxConnections
                return
            self._admitted = True
        self.attach(transport)
        self._upgrading = _Upgrading(self)
        self.host.budget.add(self._upgrading)
        timeout = self.host.logon_timeout
        if timeout:
            loop = self.host.loop
            self._deadline = accepted_at(self._cap, loop.time()) + timeout
            self._timer = loop.call_at(self._deadline, self._upgrade_expired)

    def describe(self) -> str:
        return f"websocket client (upgrade unfinished) [{self.peer()}]"

    def inbound_buffered(self) -> int:
        """Bytes held for the client's input: the unfinished request head or frame in the
        WebSocket protocol, the fragments of an unfinished message, the parts of an
        unfinished command."""
        return self.sizes.partial + sum(map(len, self._msg)) + self._size

    def _frame_limit(self) -> int:
        conn = self.conn
        if conn is None or not conn.logged_on:
            return self.listener.logon_frame_limit
        return self.listener.max_frame

    def _upgrade_expired(self) -> None:
        self._timer = None
        if self.conn is None:
            self.refuse(f"no logon within {self.host.logon_timeout:g}s (the HTTP upgrade did "
                        "not finish)")

    def refuse(self, why: str) -> None:
        """Close a socket whose upgrade is unfinished (its Connection closes itself)."""
        if self.conn is not None:
            self.conn.close(why, abort=True)
            return
        if self.sock is None or self.sock.is_closing():
            return
        log.warning("disconnecting %s: %s", self.describe(), why)
        self._leave_budget()
        reset(self.sock)

    def _leave_budget(self) -> None:
        if self._upgrading is not None:
            self.host.budget.discard(self._upgrading)
            self._upgrading = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def data_received(self, data: bytes) -> None:
        if not self._admitted and self._cap is not None:
            return
        sizes = self.sizes
        largest = sizes.feed(data)
        conn = self.conn
        if conn is None:
            limit = self.listener.logon_frame_limit
            if largest > limit or (sizes.in_head and sizes.head > limit):
                what = f"a frame of {largest}" if largest > limit else \
                    f"an HTTP request head of {sizes.head}"
                self.refuse(f"{reasons.DISCONNECT_PROTOCOL}: {what} bytes before the upgrade "
                            f"(at most {limit} before logon)")
                return
            buffered = self.inbound_buffered()
            if buffered > self._in_mark:
                self._in_mark = buffered + BUDGET_STEP
                if not self.host.check_memory() and (self.sock is None or self.sock.is_closing()):
                    return
        ws = self.ws
        ws.receive_data(data)
        self._events(ws.events_received(), len(data), largest)

    def _events(self, events: list, received: int, largest: int) -> None:
        """Handle what the WebSocket protocol made of ``received`` bytes (``largest``: the
        largest payload a frame header among them announced)."""
        payloads: list[Payload] = []
        try:
            for i, ev in enumerate(events):
                if isinstance(ev, Request):
                    if self._upgrade(ev):  # its log-on is being decided: the rest waits
                        self._held = events[i + 1:]
                        break
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
        conn.bytes_in += received
        if not conn.note_inbound(self.inbound_buffered()):
            return
        conn.received(payloads)
        ws = self.ws
        announced = max(largest, self.sizes.receiving)
        if not conn.logged_on and announced > self.listener.logon_frame_limit:
            conn.frame_before_logon(announced)
        if ws.state is not State.OPEN and not conn.closed:
            if ws.parser_exc is not None:  # broken framing, oversized message: already closed
                conn.close(f"{reasons.DISCONNECT_PROTOCOL}: websocket: {ws.parser_exc}")
            elif self.sock is not None:  # the client closed; connection_lost follows
                self.sock.close()

    def eof_received(self) -> bool | None:
        self.ws.receive_eof()
        return None  # close the socket

    def connection_lost(self, exc: Exception | None) -> None:
        if self._cap is not None:
            if not self._admitted:  # refused at connection_made: never opened
                return
            self._admitted = False
            self._cap.release()
        self._leave_budget()
        if self._upgrade_logon is not None:  # (never taken by a logon)
            self._upgrade_logon[1].close()
            self._upgrade_logon = None
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
    def _upgrade(self, req: Request) -> bool:
        """Answer the upgrade request; whether its log-on is still being decided (the
        protocol's ``WWWAuthenticate`` / ``TrustedAdmin``: :mod:`server.net.ws_upgrade`)."""
        path = req.path.split("?", 1)[0].rstrip("/")
        parts = path.split("/")
        want = self.listener.message_type
        if not (len(parts) >= 3 and parts[-2] == "amps" and (want is None or parts[-1] == want)):
            expected = f"/amps/{want}" if want else "/amps/<message type>"
            log.info("websocket: refused upgrade for %r (this transport serves %s)",
                     req.path, expected)
            self._respond(self.ws.reject(404, f"AMPS websocket transport: connect to {expected}\n"))
            return False
        self.path_type = parts[-1]
        if self.listener.www_authenticate is None and not self.listener.trusted_admin:
            # An Authorization: Basic header (the Node client sends one for user:password@ in
            # the URI) is accepted; the logon command carries the same user, as over TCP.
            self._accept(req)
            return False
        if self.sock is not None:
            self.sock.pause_reading()  # (until decided: nothing more is parsed meanwhile)
        task = self.host.loop.create_task(decide(list(req.headers.raw_items()), self.listener,
                                                 self.host, self.peer()))
        _DECIDING.add(task)  # (the loop keeps only a weak reference to a task)
        task.add_done_callback(_DECIDING.discard)
        task.add_done_callback(lambda done: self._decided(req, done))
        return True

    def peer(self) -> str:
        peer = self.get_extra_info("peername")
        return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)

    def _decided(self, req: Request, done: asyncio.Task[Verdict]) -> None:
        try:
            verdict = done.result()
        except Exception as exc:  # a module's bug refuses the upgrade, never the server
            log.exception("websocket: the upgrade's log-on check failed")
            verdict = Verdict(False, detail=f"internal error: {exc!r}")
        if self.sock is None or self.sock.is_closing():  # (the logon timeout, the peer)
            if verdict.session is not None:
                verdict.session.close()
            return
        if not verdict.accepted:
            log.warning("websocket: refused upgrade from %s (%s): %s", self.peer(),
                        self.listener.name, verdict.detail)
            response = self.ws.reject(401, "AMPS websocket transport: credentials required\n")
            response.headers["WWW-Authenticate"] = self.listener.www_authenticate or "Basic"
            self._respond(response)
            self._flush_ws()
            return
        if verdict.user is not None and verdict.session is not None:
            self._upgrade_logon = (verdict.user, verdict.session)
        self._accept(req)
        held, self._held = self._held, []
        self._events(held, 0, 0)
        if self.sock is not None and not self.sock.is_closing():
            self.sock.resume_reading()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The socket's, and ``upgrade_logon``: the ``(user, session)`` the upgrade logged on,
        handed over once (to the connection's logon, ``Server._authenticate``)."""
        if name == "upgrade_logon":
            got, self._upgrade_logon = self._upgrade_logon, None
            return got if got is not None else default
        return super().get_extra_info(name, default)

    def _respond(self, response: Response) -> None:
        """Send an upgrade answer with the configured ``HTTPHeader`` lines."""
        for name, value in self.listener.http_headers:
            response.headers[name] = value
        self.ws.send_response(response)

    def _accept(self, req: Request) -> None:
        response = self.ws.accept(req)
        self._respond(response)
        if response.status_code != 101:  # not a valid upgrade request
            return
        self._flush_ws()
        self._leave_budget()  # the Connection counts these bytes from now on
        conn = self.conn = self.make_connection()
        conn.inbound_extra = self.inbound_buffered
        conn.logon_deadline = self._deadline
        conn.connection_made(self)  # type: ignore[arg-type]

    # -- inbound commands -----------------------------------------------------------------------
    def _frame(self, frame: Frame) -> bytes | None:
        """Take one data frame; return a command payload when one is whole."""
        if frame.opcode is not Opcode.CONT:
            self._msg_binary = frame.opcode is Opcode.BINARY
        if not frame.fin:
            self._msg.append(frame.data)
            limit = self._frame_limit()
            if self._size + sum(map(len, self._msg)) > limit:
                raise _Framing(f"command larger than {limit} bytes")
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
        limit = self._frame_limit()
        if self._size > limit:
            raise _Framing(f"command larger than {limit} bytes")
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
