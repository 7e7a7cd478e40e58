"""The legacy ``fix``, ``nvfix`` and ``xml`` protocols: a translation in front of a Connection.

As :mod:`server.net.websocket` does for WebSocket, :class:`LegacyProtocol` faces the socket and is
the transport of an ordinary :class:`Connection`: inbound, each length-prefixed payload's
legacy header becomes the JSON header the command parser reads
(:func:`protocol.legacy.to_amps_payload`); outbound, the frames the connection writes are
rewritten in the legacy format (:func:`protocol.legacy.from_amps_frames`).  Everything else
(commands, acks, heartbeats, flow control, limits) is the TCP code path.  A payload that is not
a header of the protocol closes the connection, as a broken ``amps`` frame does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from amps_emulator.protocol import reasons
from amps_emulator.protocol.codec import FrameDecoder, Payload, ProtocolError
from amps_emulator.protocol.legacy_headers import LegacyFormatError, from_amps_frames, to_amps_payload
from amps_emulator.server.core.ports import ListenerInfo
from amps_emulator.server.net.admission import Admits, accepted_at
from amps_emulator.server.net.connection import Connection
from amps_emulator.server.net.socket_wrapper import StreamSocket, WrappedSocket

__all__ = ["LegacyProtocol"]


class LegacyProtocol(WrappedSocket, asyncio.Protocol, asyncio.Transport):
    """The socket side of one legacy-protocol client (a protocol to the socket) and the
    transport of its Connection."""

    def __init__(self, make_connection: Callable[[], Connection], listener: ListenerInfo,
                 protocol: str, cap: Admits | None = None) -> None:
        asyncio.Transport.__init__(self)
        self.protocol = protocol
        self.listener = listener
        self.decoder = FrameDecoder(listener.max_frame)
        self.conn = make_connection()
        self.conn.inbound_extra = self._partial
        self.sock: StreamSocket | None = None
        self._cap = cap
        self._admitted = False

    def _partial(self) -> int:
        return self.decoder.buffered

    # -- asyncio.Protocol (socket facing) -------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._cap is not None:
            if not self._cap.admit(transport):  # over the transport's MaxConnections
                self.conn.closed = True
                return
            self._admitted = True
        self.attach(transport)
        host = self.conn.host
        if host.logon_timeout:  # (from its socket's accept: a TLS handshake counts)
            self.conn.logon_deadline = accepted_at(self._cap, host.loop.time()) + host.logon_timeout
        self.conn.connection_made(self)

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        if conn.closed:
            return
        decoder = self.decoder
        try:
            payloads: list[Payload] = [to_amps_payload(self.protocol, p) for p in decoder.feed(data)]
        except (ProtocolError, LegacyFormatError) as exc:
            conn.close(f"{reasons.DISCONNECT_PROTOCOL}: {self.protocol}: {exc}")
            return
        conn.bytes_in += len(data)
        if not conn.note_inbound(decoder.buffered):
            return
        conn.received(payloads)
        if not conn.logged_on and decoder.pending > self.listener.logon_frame_limit:
            conn.frame_before_logon(decoder.pending)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._cap is not None:
            if not self._admitted:  # refused at connection_made: never opened
                return
            self._admitted = False
            self._cap.release()
        self.conn.connection_lost(exc)

    def pause_writing(self) -> None:
        self.conn.pause_writing()

    def resume_writing(self) -> None:
        self.conn.resume_writing()

    # -- the Connection's transport --------------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.sock is not None and not self.sock.is_closing():
            self.sock.write(from_amps_frames(self.protocol, bytes(data)))

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
