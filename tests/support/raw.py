"""A minimal hand-rolled AMPS peer on a plain socket (no client library): for frames the
official client would never send, and for reading exactly what the server writes."""

from __future__ import annotations

import json
import socket
import time

from amps_emulator.protocol.codec import split_frame


class RawClient:
    """A minimal hand-rolled AMPS peer on a plain socket."""

    def __init__(self, port: int, sock: socket.socket | None = None) -> None:
        self.sock = sock if sock is not None else socket.create_connection(("127.0.0.1", port),
                                                                           timeout=10)
        self.buf = b""

    @classmethod
    def unix(cls, path: str) -> RawClient:
        """A peer on an amps-unix transport's socket."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(path)
        return cls(0, sock)

    def send(self, header: dict, body: bytes = b"") -> None:
        h = json.dumps(header, separators=(",", ":")).encode()
        self.sock.sendall((len(h) + len(body)).to_bytes(4, "big") + h + body)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self, timeout: float = 10.0) -> tuple[dict, bytes] | None:
        """Next frame, or None when the server closed the connection."""
        self.sock.settimeout(timeout)
        while True:
            if len(self.buf) >= 4:
                n = int.from_bytes(self.buf[:4], "big")
                if len(self.buf) >= 4 + n:
                    payload, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    return split_frame(payload)
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk

    def closed_by_server(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if self.recv_frame(deadline - time.monotonic()) is None:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
        return False

    def logon(self, name: str) -> dict:
        self.send({"c": "logon", "cid": "l0", "client_name": name, "a": "processed", "mt": "json"})
        header, _ = self.recv_frame()
        return header

    def close(self) -> None:
        self.sock.close()


def closed_by_server(sock: socket.socket, timeout: float = 10.0) -> bool:
    """The server closed ``sock`` (end of stream or reset) within ``timeout``; whatever it
    wrote before is read and dropped."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True
