"""A small blocking AMPS client for Spark tasks, over the project's sans-IO codec.

Spark tasks need three things from a server: a ``sow`` query, a bounded bookmark replay, and
publishing with persisted acks. This module does exactly that with ``protocol.codec``
(``FrameDecoder`` for length-prefixed frames, ``split_frame`` for header/body, ``frame`` to
encode) over a plain socket, so it talks to the emulator and to a real AMPS alike; the
official client stays a test dependency.

Loss- and duplicate-free publishing (:class:`ReliablePublisher`): every message carries the
publisher sequence ``s`` the caller gives it (deterministic per Spark partition, so a retried
task sends the same numbers), under a ``client_name`` that is the same for every attempt of
that partition. The server keeps the highest ``s`` it persisted per client name and drops
(but still acks) anything at or below it, which is AMPS's own duplicate detection. The
publisher keeps every message until a cumulative ``persisted`` ack covers it; when the
connection breaks (the server was killed, restarted, failed over) it reconnects until a
deadline, logs on again under the same name and resends what is not yet acked. A message is
therefore either persisted once or the task fails (and Spark's retry sends it again, once).
"""

from __future__ import annotations

import collections
import itertools
import select
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

from amps_emulator.protocol.codec import FrameDecoder, frame, split_frame

__all__ = ["AmpsError", "Connection", "ReliablePublisher", "parse_uri"]

VERSION = "5.3.4.0:amps-emulator-pipeline"


class AmpsError(RuntimeError):
    """The server refused a command (its ``reason``) or the connection failed."""


def parse_uri(uri: str) -> tuple[str, int, str, str | None, str | None]:
    """``tcp://[user[:pw]@]host:port/amps/json`` -> (host, port, message type, user, pw)."""
    u = urlparse(uri)
    if u.scheme != "tcp" or not u.hostname or not u.port:
        raise ValueError(f"unsupported AMPS URI {uri!r}: expected tcp://host:port/amps/<message type>")
    parts = [p for p in u.path.split("/") if p]
    if len(parts) < 2 or parts[0] != "amps":
        raise ValueError(f"unsupported AMPS URI {uri!r}: the path must be /amps/<message type>")
    return u.hostname, u.port, parts[-1], u.username, u.password


def sow_records(header: dict, body: bytes) -> Iterator[tuple[dict, bytes]]:
    """The records of a (batched) ``sow`` frame: ``{record header with l}DATA`` repeated."""
    rest = body
    while rest:
        rec, after = split_frame(rest)
        n = int(rec.get("l", len(after)))
        yield {**header, **rec}, after[:n]
        rest = after[n:]


class Connection:
    """One logged-on connection. ``send`` encodes a frame; ``messages`` yields decoded
    (header, body) pairs, ``sow`` frames split into their records."""

    def __init__(self, uri: str, client_name: str, timeout: float = 30.0) -> None:
        self.host, self.port, self.message_type, self.user, self.pw = parse_uri(uri)
        self.client_name = client_name
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._dec = FrameDecoder()
        self._pending: collections.deque = collections.deque()
        self.sock = socket.create_connection((self.host, self.port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.logon_ack = self._logon()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def next_id(self) -> str:
        return f"p{next(self._ids)}"

    def send(self, header: dict, body: bytes = b"") -> None:
        self.sock.sendall(frame(header, body))

    def _read(self, wait: float | None) -> bool:
        """Read what arrived (waiting up to ``wait`` seconds; None: the connection timeout)."""
        if wait is not None:
            ready, _, _ = select.select([self.sock], [], [], wait)
            if not ready:
                return False
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("the server closed the connection")
        for payload in self._dec.feed(data):
            header, body = split_frame(payload)
            if header.get("c") == "sow":
                self._pending.extend(sow_records(header, body))
            else:
                self._pending.append((header, body))
        return True

    def poll(self, wait: float | None = 0.0) -> list[tuple[dict, bytes]]:
        """Messages that arrived, waiting up to ``wait`` seconds for the first."""
        if not self._pending:
            self._read(wait)
            while self._read(0.0):
                pass
        out = list(self._pending)
        self._pending.clear()
        return out

    def messages(self) -> Iterator[tuple[dict, bytes]]:
        """Every message, blocking (the socket timeout bounds each wait)."""
        while True:
            if not self._pending:
                self._read(None)
            while self._pending:
                yield self._pending.popleft()

    def _logon(self) -> dict:
        cid = self.next_id()
        h = {"c": "logon", "cid": cid, "client_name": self.client_name, "mt": self.message_type,
             "a": "processed", "version": VERSION}
        if self.user:
            h["user_id"] = self.user
        if self.pw:
            h["pw"] = self.pw
        self.send(h)
        for header, _ in self.messages():
            if header.get("c") == "ack" and header.get("cid") == cid:
                if header.get("status", "success") != "success":
                    raise AmpsError(f"logon failed: {header.get('reason')}")
                return header
        raise AmpsError("no logon ack")  # pragma: no cover - messages() never ends

    def query(self, command: dict) -> Iterator[tuple[dict, bytes]]:
        """Run a command that ends with a ``completed`` ack (a ``sow``, a bounded bookmark
        ``subscribe``); yield its records (``sow`` or ``p``) until then."""
        cid = self.next_id()
        h = dict(command, cid=cid, a="processed,completed")
        h.setdefault("sub_id" if h["c"] != "sow" else "query_id", cid)
        self.send(h)
        for header, body in self.messages():
            c = header.get("c")
            if c == "ack" and header.get("cid") == cid:
                if header.get("status", "success") != "success":
                    raise AmpsError(f"{h['c']} on {h.get('t')!r} failed: {header.get('reason')}")
                if header.get("a") == "completed":
                    return
            elif c in ("sow", "p", "publish"):
                yield header, body


class ReliablePublisher:
    """Publishes with persisted acks; reconnects and resends until ``reconnect_timeout``.

    ``publish(topic, body, s)`` with strictly increasing ``s``; ``flush()`` returns once every
    message is persisted. ``max_in_flight`` bounds the messages kept for resending.
    """

    def __init__(self, uri: str, client_name: str, *, reconnect_timeout: float = 60.0,
                 max_in_flight: int = 4096, connect_timeout: float = 10.0) -> None:
        self.uri = uri
        self.client_name = client_name
        self.reconnect_timeout = reconnect_timeout
        self.max_in_flight = max_in_flight
        self.connect_timeout = connect_timeout
        self.unacked: collections.OrderedDict[int, tuple[str, bytes]] = collections.OrderedDict()
        self.acked = 0  # highest s covered by a persisted ack
        self.reconnects = 0
        self.conn: Connection | None = None
        self._connect(first=True)

    # -- connection -------------------------------------------------------------------------
    def _connect(self, first: bool = False) -> None:
        deadline = time.monotonic() + self.reconnect_timeout
        delay = 0.05
        while True:
            try:
                self.conn = Connection(self.uri, self.client_name, timeout=self.connect_timeout)
                break
            except (OSError, AmpsError) as exc:
                if time.monotonic() + delay > deadline:
                    raise AmpsError(f"cannot reach {self.uri} as {self.client_name!r}: {exc}") from exc
                time.sleep(delay)  # backoff between reconnect attempts, not a readiness wait
                delay = min(delay * 2, 1.0)
        if not first:
            self.reconnects += 1
        # the logon ack tells what the server already persisted for this name (AMPS sends
        # it when it keeps a transaction log): those need no resend
        s = self.conn.logon_ack.get("s")
        if s is not None:
            self._acked_upto(int(s))
        for seq, (topic, body) in list(self.unacked.items()):
            self._send(topic, body, seq)

    def _retrying(self, fn, *args):
        """Run ``fn`` on the connection; when the connection breaks, reconnect (which resends
        every unacked message) and run it again, except a send: the resend covered it."""
        while True:
            try:
                return fn(*args)
            except (OSError, ConnectionError):
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                self._connect()
                if fn == self._send:
                    return None

    def _connection(self) -> Connection:
        conn = self.conn
        if conn is None:
            raise AmpsError(f"publisher {self.client_name!r} to {self.uri} is closed")
        return conn

    def _send(self, topic: str, body: bytes, s: int) -> None:
        self._connection().send({"c": "p", "t": topic, "a": "persisted", "s": s}, body)

    # -- acks ---------------------------------------------------------------------------------
    def _acked_upto(self, s: int) -> None:
        if s <= self.acked:
            return
        self.acked = s
        while self.unacked:
            first = next(iter(self.unacked))
            if first > s:
                break
            del self.unacked[first]

    def _drain(self, wait: float) -> None:
        for header, _ in self._connection().poll(wait):
            if header.get("c") != "ack" or header.get("a") != "persisted" or "s" not in header:
                continue
            if header.get("status", "success") != "success" and header.get("reason") != "duplicate":
                raise AmpsError(f"publish s={header['s']} refused: {header.get('reason')}")
            self._acked_upto(int(header["s"]))

    # -- API ----------------------------------------------------------------------------------
    def publish(self, topic: str, body: bytes, s: int) -> None:
        if s <= self.acked:
            return  # the server already persisted it (a retried task, or after a reconnect)
        self.unacked[s] = (topic, body)
        self._retrying(self._send, topic, body, s)
        self._retrying(self._drain, 0.0)
        while len(self.unacked) >= self.max_in_flight:
            self._retrying(self._drain, 1.0)

    def flush(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while self.unacked:
            if time.monotonic() > deadline:
                raise AmpsError(f"{len(self.unacked)} messages not persisted after {timeout}s")
            self._retrying(self._flush_once)

    def _flush_once(self) -> None:
        conn = self._connection()
        cid = conn.next_id()
        conn.send({"c": "flush", "cid": cid, "a": "processed"})
        end = time.monotonic() + conn.timeout
        while self.unacked and time.monotonic() < end:
            for header, _ in conn.poll(1.0):
                if header.get("c") == "ack" and header.get("a") == "persisted" and "s" in header:
                    self._acked_upto(int(header["s"]))
                elif header.get("c") == "ack" and header.get("cid") == cid:
                    end = min(end, time.monotonic() + 1.0)  # processed: acks came before it

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def json_default(value: Any) -> Any:
    """msgspec ``enc_hook`` for Spark row values JSON has no type for."""
    import datetime
    import decimal

    if isinstance(value, decimal.Decimal):
        return float(value) if value != value.to_integral_value() else int(value)
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    raise TypeError(f"cannot publish a {type(value).__name__} as JSON")
