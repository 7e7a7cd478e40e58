"""A small blocking AMPS client over the project's own codec (for the command-line client).

It speaks the ``amps`` protocol exactly as the wire notes describe the official client's
frames (compact headers, the official header keys only, ``cid`` on commands that want acks),
so it works against any AMPS server, the emulator or 60East's. One socket, one thread:
:meth:`Client.execute` sends a command and yields what comes back for it until the ack that
ends it.
"""

from __future__ import annotations

import itertools
import json
import math
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlsplit

from amps_emulator.protocol.codec import FrameDecoder, frame, header_end

VERSION = "amps-emulator-client/0.1"


class ClientError(Exception):
    """A failure ack (its ``reason``), a refused connection, or a timeout."""


def parse_uri(uri: str) -> tuple[str, int, str | None, str | None, str]:
    """``tcp://[user[:password]@]host:port/amps/json`` → host, port, user, password, type."""
    parts = urlsplit(uri)
    if parts.scheme != "tcp" or not parts.hostname or not parts.port:
        raise ClientError(f"want tcp://host:port/amps/json, got {uri!r}")
    segs = [s for s in parts.path.split("/") if s]
    mtype = segs[-1] if len(segs) >= 2 else "json"
    return (parts.hostname, parts.port, unquote(parts.username) if parts.username else None,
            unquote(parts.password) if parts.password else None, mtype)


def split_payload(payload: bytes) -> list[tuple[dict, bytes]]:
    """One received frame as messages: a batched ``sow`` frame becomes one message per
    record (the outer header's fields under the record's own)."""
    end = header_end(payload)
    if end < 0:
        raise ClientError(f"malformed frame from the server: {payload[:80]!r}")
    outer = json.loads(payload[:end])
    if outer.get("c") != "sow":
        return [(outer, payload[end:])]
    out = []
    pos = end
    while pos < len(payload):
        n = header_end(payload[pos:])
        if n < 0:
            raise ClientError(f"malformed sow batch from the server: {payload[:80]!r}")
        rend = pos + n
        rec = json.loads(payload[pos:rend])
        n = int(rec.get("l", len(payload) - rend))
        out.append(({**outer, **rec}, payload[rend:rend + n]))
        pos = rend + n
    return out


class Client:
    def __init__(self, uri: str, name: str = "amps-emulator-client", timeout: float = 10.0
                 ) -> None:
        self.uri = uri
        self.name = name
        self.timeout = timeout
        self.host, self.port, self.user, self.password, self.message_type = parse_uri(uri)
        self.sock: socket.socket | None = None
        self._decoder = FrameDecoder()
        self._pending: list[tuple[dict, bytes]] = []
        self._cids = itertools.count(1)
        self.server_version: str | None = None

    # -- connection -------------------------------------------------------------------------
    def connect(self) -> Client:
        try:
            self.sock = socket.create_connection((self.host, self.port), self.timeout)
        except OSError as exc:
            raise ClientError(f"cannot connect to {self.host}:{self.port}: {exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        hdr: dict[str, Any] = {"c": "logon", "cid": self.cid(), "client_name": self.name,
                               "mt": self.message_type, "a": "processed", "version": VERSION}
        if self.user:
            hdr["user_id"] = self.user
        if self.password:
            hdr["pw"] = self.password
        ack = self.wait_ack(self.send(hdr), "processed")
        self.server_version = ack.get("version")
        return self

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None

    def __enter__(self) -> Client:
        return self.connect()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def cid(self) -> str:
        return f"cli{next(self._cids)}"

    # -- frames -----------------------------------------------------------------------------
    def send(self, header: dict[str, Any], body: bytes = b"") -> str | None:
        assert self.sock is not None, "not connected"
        self.sock.sendall(frame(header, body))
        return header.get("cid")

    def receive(self, timeout: float | None = None) -> tuple[dict, bytes] | None:
        """The next message, or None when ``timeout`` passes first (``None``: the client's
        timeout, and then it is an error; ``math.inf``: wait for as long as it takes)."""
        if self._pending:
            return self._pending.pop(0)
        assert self.sock is not None, "not connected"
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while not self._pending:
            left = deadline - time.monotonic()
            if left <= 0:
                if timeout is None:
                    raise ClientError(f"no answer within {limit:g}s")
                return None
            self.sock.settimeout(None if left == math.inf else left)
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                continue
            if not data:
                raise ClientError("the server closed the connection")
            for payload in self._decoder.feed(data):
                self._pending.extend(split_payload(payload))
        return self._pending.pop(0)

    def wait_ack(self, cid: str | None, ack_type: str) -> dict:
        """Read until the ``ack_type`` ack of ``cid``; a failure ack raises ClientError."""
        while True:
            msg = self.receive()
            assert msg is not None
            h, _ = msg
            if h.get("c") == "ack" and h.get("cid") == cid and h.get("a") == ack_type:
                if h.get("status") == "failure":
                    raise ClientError(h.get("reason", "failure"))
                return h

    def execute(self, header: dict[str, Any], body: bytes = b"", until: str = "completed",
                idle: float | None = None) -> Iterator[tuple[dict, bytes]]:
        """Send a command and yield every message it brings (acks included) until its
        ``until`` ack (``""``: never; ``idle``: stop after that long without a message)."""
        cid = self.send(header, body)
        while True:
            msg = self.receive(idle)
            if msg is None:
                return
            h = msg[0]
            if h.get("c") == "ack" and h.get("cid") == cid:
                if h.get("status") == "failure":
                    raise ClientError(h.get("reason", "failure"))
                yield msg
                if h.get("a") == until:
                    return
                continue
            yield msg

    def publish(self, topic: str, body: bytes, expiration: int | None = None,
                sow_key: str | None = None) -> None:
        h: dict[str, Any] = {"c": "p", "t": topic}
        if expiration is not None:
            h["e"] = str(expiration)
        if sow_key is not None:
            h["k"] = sow_key
        self.send(h, body)

    def flush(self) -> float:
        """Round trip that returns once the server processed everything sent before it."""
        t0 = time.perf_counter()
        self.wait_ack(self.send({"c": "flush", "cid": self.cid(), "a": "completed"}),
                      "completed")
        return time.perf_counter() - t0
