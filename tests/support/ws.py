"""A bare peer of the AMPS WebSocket framing: the websockets package's sans-IO client on a
plain socket (no Node needed), for the framing tests and the attacks on the WebSocket
transport. ``WsPeer(port)`` upgrades and names its mode; ``partial_frame`` writes the start of a
frame announcing more than it sends."""

from __future__ import annotations

import json
import os
import socket
import time

from websockets.client import ClientProtocol
from websockets.frames import Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri


class WsPeer:
    """A minimal client of the AMPS WebSocket framing."""

    def __init__(self, port: int, rcvbuf: int | None = None, mode: str | None = "text") -> None:
        self.sock = socket.socket()
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(10)
        self.sock.connect(("127.0.0.1", port))
        self.ws = ClientProtocol(parse_uri(f"ws://127.0.0.1:{port}/amps/json"), max_size=None)
        self.events: list = []
        self.closed_code: int | None = None
        self.ws.send_request(self.ws.connect())
        self._flush()
        ev = self._next_event()
        assert isinstance(ev, Response) and ev.status_code == 101, ev
        if mode is not None:
            self.text(mode)

    def _flush(self) -> None:
        data = b"".join(self.ws.data_to_send())
        if data:
            self.sock.sendall(data)

    def text(self, s: str) -> None:
        self.ws.send_text(s.encode())
        self._flush()

    def binary(self, b: bytes) -> None:
        self.ws.send_binary(b)
        self._flush()

    def command(self, header: dict, body: str | None = None) -> None:
        self.binary((1 if body is None else 2).to_bytes(4, "little"))
        self.text(json.dumps(header))
        if body is not None:
            self.text(body)

    def _next_event(self, timeout: float = 10.0):
        deadline = time.monotonic() + timeout
        while not self.events:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = self.sock.recv(65536)
            if data:
                self.ws.receive_data(data)
            else:
                self.ws.receive_eof()
            self.events.extend(self.ws.events_received())
            if not data and not self.events:
                return None
        return self.events.pop(0)

    def message(self) -> str | bytes | None:
        """The next whole message; None once the server has closed."""
        parts: list[bytes] = []
        binary = False
        while True:
            ev = self._next_event()
            if ev is None or ev.opcode is Opcode.CLOSE:
                if self.ws.close_rcvd is not None:
                    self.closed_code = self.ws.close_rcvd.code
                return None
            if ev.opcode in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
                if ev.opcode is not Opcode.CONT:
                    binary = ev.opcode is Opcode.BINARY
                parts.append(ev.data)
                if ev.fin:
                    data = b"".join(parts)
                    return data if binary else data.decode()

    def header(self) -> dict:
        m = self.message()
        assert isinstance(m, str), m
        return json.loads(m)

    def logon(self, name: str) -> None:
        self.command({"c": "logon", "cid": "l", "client_name": name, "a": "processed"})
        ack = self.header()
        assert ack["status"] == "success" and ack["a"] == "processed", ack

    def closed_by_server(self) -> bool:
        try:
            while True:
                if self.message() is None:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def partial_frame(self, announced: int, sent: int) -> None:
        """A binary frame's header announcing ``announced`` payload bytes, then ``sent`` of
        them (masked, as a client's are): a message the server has to hold until it is whole."""
        self.sock.sendall(ws_frame_header(announced) + b"x" * sent)


def ws_frame_header(announced: int, opcode: int = 0x2) -> bytes:
    """A client frame's header (FIN, ``opcode``, masked) for ``announced`` payload bytes."""
    if announced < 126:
        size = bytes([0x80 | announced])
    elif announced < 1 << 16:
        size = bytes([0x80 | 126]) + announced.to_bytes(2, "big")
    else:
        size = bytes([0x80 | 127]) + announced.to_bytes(8, "big")
    return bytes([0x80 | opcode]) + size + os.urandom(4)


__all__ = ["WsPeer", "ws_frame_header"]
