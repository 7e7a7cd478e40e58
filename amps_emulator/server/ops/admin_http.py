"""The HTTP side of the Admin interface (:mod:`server.ops.admin`): what a request may cost,
the one canonical form of its path, and reading it within those limits.

**Limits** (:class:`AdminLimits`). A request's head and body must arrive within one deadline
(``request_deadline``, which also bounds how long a kept-alive connection may sit idle), so
a client that trickles a byte at a time is cut when it runs out. The head is at most
``max_head`` bytes; a body at most ``max_body``, except a snapshot restore's archive, which a
caller entitled to write ``/emulator/snapshot`` may send up to ``max_snapshot`` bytes of (it
is spooled to a file, never held in memory, and has ``snapshot_deadline`` to arrive). At most
``max_connections`` connections are served at once: past that a new one is answered 503 and
closed, so a flood cannot take every descriptor. What a connection holds of its request (the
head and an in-memory body received so far) counts in the server's memory budget while it is
open (:class:`Exchange` is a budget holder): everything held together past the budget closes
the largest holders, an Admin request among them. Credentials and entitlements are checked on
the request head: a refused request is answered and its connection closed without its body
being read.

**Canonical paths** (:func:`parse_target`). Entitlements are checked, and requests routed, on
one form of the path: empty segments (``//``, a trailing ``/``) dropped, each segment
percent-decoded once, ``.json``/``.xml``/``.csv`` taken off the last segment of the ``/amps``
tree only, ``/index.html`` named ``/``. What cannot be put in that form is a 404: a segment
that decodes to ``/`` or a control character, ``.`` and ``..`` segments, and any first
segment but ``amps``, ``emulator``, ``metrics`` and the console's own files. So
``/amps.json/administrator``, ``/ampsX/...`` or ``/emulator//journal`` are never another name
for a resource an entitlement entry guards.

**Writes** (:func:`needs_write`). Requests that change the server's state need the ``admin``
write permission whatever their method: every ``/amps/administrator`` action (AMPS runs them
on a plain GET; ``/amps/administrator/minidump`` writes a dump) and every method but GET/HEAD.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote

import h11

if TYPE_CHECKING:
    from amps_emulator.server.core.budget import MemoryBudget

log = logging.getLogger("amps_emulator.admin")

__all__ = ["AdminLimits", "Deadline", "HttpError", "Target", "TooLarge", "Exchange",
           "ConnectionCap", "parse_target", "needs_write"]

_FORMATS = ("json", "xml", "csv")
_ROOTS = frozenset({"amps", "emulator", "console.js", "console.css", "metrics"})
_FILES = frozenset({"console.js", "console.css", "metrics"})  # a resource of one segment
_MIN_SEND_RATE = 1 << 20  # bytes/s a response is given to drain, beyond the request deadline
_BUDGET_STEP = 64 * 1024  # a request's held bytes growing by this much check the memory budget


@dataclass
class AdminLimits:
    """What one Admin request and the interface as a whole may use (module docstring)."""

    request_deadline: float = 30.0
    max_head: int = 64 * 1024
    max_body: int = 64 * 1024
    max_snapshot: int = 1 << 30
    snapshot_deadline: float = 600.0
    #: bytes a snapshot archive may unpack to (a compressed archive is checked as it unpacks)
    max_extracted: int = 4 << 30
    max_connections: int = 64


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Deadline(Exception):
    """The request did not arrive within its deadline."""


class TooLarge(Exception):
    """The request's body is larger than its limit."""


@dataclass(frozen=True)
class Target:
    """A request target in its canonical form: decoded segments (none empty), the format asked
    for by a ``/amps`` path's suffix, and the query (last value of each name)."""

    segs: tuple[str, ...]
    fmt: str
    query: dict[str, str]

    @property
    def path(self) -> str:
        """The canonical path: what entitlements are checked on and what is routed."""
        return "/" + "/".join(self.segs)


def _segment(raw: str) -> str:
    seg = unquote(raw, errors="strict")  # decoded once: %252F stays the text %2F
    if seg in (".", "..") or "/" in seg or any(c < " " or c == "\x7f" for c in seg):
        raise HttpError(404, f"no resource {raw!r}: not a canonical path segment")
    return seg


def parse_target(raw: bytes) -> Target:
    """The canonical :class:`Target` of a request target (``HttpError`` 400/404 when it has
    none; see the module docstring)."""
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise HttpError(400, "the request target is not ASCII") from None
    if not text.startswith("/"):
        raise HttpError(400, "the request target must be a path")
    path, _, query_text = text.partition("?")
    try:
        segs = [_segment(s) for s in path.split("/") if s]
        query = {k: v[-1] for k, v in parse_qs(query_text, errors="strict").items()}
    except UnicodeDecodeError:
        raise HttpError(400, "the request target is not UTF-8 once decoded") from None
    fmt = ""
    if segs and segs[0].partition(".")[0] == "amps" and len(segs[-1]) > 0:
        stem, dot, ext = segs[-1].rpartition(".")
        if dot and stem and ext in _FORMATS:
            fmt, segs[-1] = ext, stem
    if segs == ["index.html"]:
        segs = []
    if segs and (segs[0] not in _ROOTS or segs[0] in _FILES and len(segs) > 1):
        raise HttpError(404, f"no resource /{'/'.join(segs)}")
    return Target(tuple(segs), fmt, query)


def needs_write(target: Target, method: str) -> bool:
    """Whether the request changes the server's state (module docstring)."""
    if method not in ("GET", "HEAD"):
        return True
    segs = target.segs
    if segs[:2] != ("amps", "administrator"):
        return False
    rest = segs[2:]
    if rest[:1] == ("minidump",):
        return True  # writes a minidump
    if rest[:1] == ("actions",):
        return len(rest) > 1  # runs the on-admin actions of that path
    return len(rest) > 2  # <kind>/<name>/<action>: disconnect, disable, upgrade, ...


class Exchange:
    """One connection's requests, read and answered with h11 within :class:`AdminLimits`; a
    holder of the server's memory ``budget`` (:class:`~amps_emulator.server.core.budget.Holder`)
    for what it holds of the current request, checked each time that grows by a read."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 limits: AdminLimits, budget: MemoryBudget | None = None) -> None:
        self.reader = reader
        self.writer = writer
        self.limits = limits
        self.budget = budget
        #: bytes of the current request held in memory: its head, and its body unless spooled
        self.held = 0
        self._mark = _BUDGET_STEP  # held bytes at which the budget is checked next
        self.why: str | None = None  # why the budget closed it
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_head)
        self._loop = asyncio.get_running_loop()
        self._deadline = 0.0
        #: bytes received toward the current request (none: an idle kept-alive connection)
        self.received = 0
        self._head_only = False
        self._answered = False  # a response of this request is under way
        #: headers every answer on this connection carries (CORS, the configured ones; the
        #: Admin interface sets them for each request)
        self.extra: list[tuple[str, str]] = []

    def extend_deadline(self, seconds: float) -> None:
        """Give the rest of this request ``seconds`` from now (a restore's upload)."""
        self._deadline = max(self._deadline, self._loop.time() + seconds)

    async def _event(self) -> Any:
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            left = self._deadline - self._loop.time()
            if left <= 0:
                raise Deadline
            try:
                data = await asyncio.wait_for(self.reader.read(65536), left)
            except TimeoutError:
                raise Deadline from None
            self.received += len(data)
            self.conn.receive_data(data)
            self.held += len(data)
            if self.held >= self._mark and self.budget is not None:
                self._mark = self.held + _BUDGET_STEP
                self.budget.check()

    async def head(self) -> h11.Request | None:
        """The next request's head (None: the peer closed between requests)."""
        self._deadline = self._loop.time() + self.limits.request_deadline
        self.received = self.held = 0
        self._mark = _BUDGET_STEP
        self._answered = False
        event = await self._event()
        if isinstance(event, h11.Request):
            self._head_only = event.method == b"HEAD"
            return event
        return None  # ConnectionClosed (h11 raises on anything else)

    def declared_length(self, req: h11.Request) -> int | None:
        for name, value in req.headers:
            if name == b"content-length":
                return int(value)  # (h11 checked it is a number)
        return None

    async def body(self, sink: Callable[[bytes], Any], limit: int, *, spooled: bool = False) -> None:
        """Read the body into ``sink`` (``TooLarge`` past ``limit`` bytes; ``spooled``: the
        sink keeps it out of memory, so it is not counted as held)."""
        if self.conn.they_are_waiting_for_100_continue:
            self.writer.write(self.conn.send(h11.InformationalResponse(status_code=100, headers=[])))
        got = 0
        while True:
            event = await self._event()
            if isinstance(event, h11.Data):
                got += len(event.data)
                if got > limit:
                    raise TooLarge
                sink(event.data)
                if spooled:
                    self.held -= len(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return
            else:
                raise ConnectionError("closed in the middle of a request body")

    @property
    def closed(self) -> bool:
        return self.why is not None or self.writer.is_closing()

    def budget_bytes(self) -> int:
        return self.held

    def describe(self) -> str:
        return f"Admin connection {self.writer.get_extra_info('peername')}"

    def close(self, why: str, abort: bool = False) -> None:
        if self.why is None:
            self.why = why
            self.writer.transport.abort()

    async def send(self, status: int, headers: list[tuple[str, str]], payload: bytes,
                   close: bool = False) -> bool:
        """Answer the request; whether the connection may carry another one."""
        headers = [*headers, *self.extra]
        if close:
            headers.append(("connection", "close"))
        self._answered = True
        self.writer.write(self.conn.send(h11.Response(status_code=status, headers=headers)))
        if not self._head_only:  # (a HEAD's answer has the headers alone)
            self.writer.write(self.conn.send(h11.Data(data=payload)))
        self.writer.write(self.conn.send(h11.EndOfMessage()))
        allowed = self.limits.request_deadline + len(payload) / _MIN_SEND_RATE
        try:
            await asyncio.wait_for(self.writer.drain(), allowed)
        except TimeoutError:
            self.writer.transport.abort()  # a peer that does not read its answers
            return False
        if close or self.conn.our_state is h11.MUST_CLOSE:
            return False
        try:
            self.conn.start_next_cycle()
        except h11.LocalProtocolError:
            return False
        return True

    async def linger(self) -> None:
        """After answering a request whose body was not read: half-close, and discard what
        the peer still sends for a moment (at most ``max_body`` bytes, one second), so the
        close is not a reset that loses the answer before the peer reads it."""
        try:
            if self.writer.can_write_eof():
                self.writer.write_eof()
            end = min(self._deadline, self._loop.time() + 1.0)
            discarded = 0
            while discarded < self.limits.max_body:
                left = end - self._loop.time()
                if left <= 0:
                    return
                data = await asyncio.wait_for(self.reader.read(65536), left)
                if not data:
                    return
                discarded += len(data)
        except (TimeoutError, OSError):
            return

    def refuse(self, status: int, message: str) -> None:
        """A last answer on a connection about to close, unless one was already under way
        (no drain: it is not waited for). Written as bytes: h11 will not answer a request
        whose head never arrived."""
        if self._answered:
            return
        self._answered = True
        body = json.dumps({"error": message}).encode()
        self.writer.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
                          b"content-length: %d\r\n%sconnection: close\r\n\r\n%s"
                          % (status, HTTPStatus(status).phrase.encode(), len(body),
                             header_lines(self.extra), body))


def header_lines(headers: list[tuple[str, str]]) -> bytes:
    """``headers`` as the lines of a response head (each checked at load time: no CR/LF)."""
    return b"".join(b"%s: %s\r\n" % (n.encode("ascii"), v.encode("latin-1")) for n, v in headers)


_BUSY_BODY = b'{"error": "too many Admin connections; try again"}'


class ConnectionCap:
    """How many Admin connections are open; a new one past ``limit`` is answered 503 and
    closed (over HTTPS: reset at its accept, before any handshake, by
    :class:`~amps_emulator.server.net.tls_listen.TLSServer`, which counts a socket from its
    accept), with one log line each time the cap is reached (not per refused connection)."""

    def __init__(self, limits: AdminLimits, headers: list[tuple[str, str]] | None = None) -> None:
        self.limits = limits
        #: the 503's bytes (``headers``: the configured ones it carries as every answer does)
        self.busy = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\nretry-after: 1\r\n%sconnection: close\r\n\r\n%s"
                     % (len(_BUSY_BODY), header_lines(headers or []), _BUSY_BODY))
        self.open = 0
        self.refused = 0
        self._full = False

    def admit(self, writer: asyncio.StreamWriter) -> bool:
        if self.take():
            return True
        writer.write(self.busy)
        writer.close()
        return False

    def take(self) -> bool:
        """Count one more connection; past the cap, count the refusal (logged when the cap is
        reached) and return False: the caller refuses it."""
        if self.open < self.limits.max_connections:
            self.open += 1
            return True
        self.refused += 1
        if not self._full:
            self._full = True
            log.warning("admin: %d connections open, the most allowed; new connections are "
                        "refused until one closes", self.open)
        return False

    def release(self) -> None:
        self.open -= 1
        if self._full and self.open < self.limits.max_connections:
            self._full = False
            log.info("admin: below %d connections again; %d refused meanwhile",
                     self.limits.max_connections, self.refused)
