"""A TLS listener that counts a socket against its cap from the moment it is accepted.

``loop.create_server(..., ssl=...)`` tells its protocol of a connection only once the TLS
handshake is over: until then the socket and its TLS state are the loop's, invisible to
``MaxConnections``, so peers that connect and never send a ClientHello (or send it a byte at
a time) could hold descriptors uncounted until their handshake timeout, as many as they
open. :class:`TLSServer` accepts the TCP sockets itself instead and decides at the accept:
past the cap (:class:`~.admission.Gate`) the socket is reset there and then, counted and
logged as the cap's refusals are; otherwise its place is taken (a
:class:`~.admission.Ticket`) and the socket goes, unread, to
``loop.connect_accepted_socket(..., ssl=...)``, whose TLS transport does the handshake (so
no byte of a ClientHello is read by anyone else). The place is given back when the
connection ends, or when its handshake fails, times out or is cancelled.

It stands in for the ``asyncio.Server`` a listener keeps (``sockets``, ``close``,
``wait_closed``), on asyncio's loop and uvloop alike. ``close`` stops accepting and drops the
handshakes under way (like the connections still in the accept queue, they were never
connections the server knew); the connections made stay. :func:`bind_tcp` makes the
listening sockets of a host and port, as ``create_server`` would.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from amps_emulator.server.net.admission import Gate, Ticket, linger_reset

__all__ = ["BACKLOG", "TLSServer", "bind_tcp", "stream_protocol"]

log = logging.getLogger("amps_emulator.connection")

#: the listening sockets' backlog, and the most accepted in one turn (asyncio's default)
BACKLOG = 100
#: seconds before accepting again once the process is out of descriptors (asyncio's)
RETRY_DELAY = 1.0
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


async def bind_tcp(host: str | None, port: int, reuse_addr: bool = True) -> list[socket.socket]:
    """Sockets bound to every address of ``host`` (None or "": every interface) at ``port``
    and listening, non-blocking (``OSError`` naming the address when one cannot be bound;
    none is left open then). The name is looked up off the event loop, as ``create_server``
    does: a transport enabled at run time must not hold every client behind a DNS query."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host or None, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM,
        flags=socket.AI_PASSIVE)
    socks: list[socket.socket] = []
    seen: set[tuple[Any, ...]] = set()
    try:
        for family, kind, proto, _name, addr in infos:
            if (family, addr) in seen:
                continue
            seen.add((family, addr))
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            if reuse_addr:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(addr)
            except OSError as exc:
                raise OSError(exc.errno, f"error while attempting to bind on address {addr!r}: "
                                         f"{exc.strerror}") from None
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


def stream_protocol(handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter, Ticket],
                                      Awaitable[None] | None],
                    limit: int = 2 ** 16) -> Callable[[Ticket], asyncio.BaseProtocol]:
    """A :class:`TLSServer` factory for a stream handler (what ``asyncio.start_server``
    runs): ``handler(reader, writer, ticket)`` is called once the handshake is over (a
    coroutine it returns runs as a task) and releases the ticket when the connection ends."""

    def make(ticket: Ticket) -> asyncio.BaseProtocol:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=limit, loop=loop)
        return asyncio.StreamReaderProtocol(
            reader, lambda r, w: handler(r, w, ticket), loop=loop)

    return make


def _refuse(conn: socket.socket) -> None:
    """Close a socket refused at its accept with a reset (no TIME_WAIT kept)."""
    linger_reset(conn)
    conn.close()


class TLSServer(asyncio.AbstractServer):
    """TLS over ``socks`` (bound and listening): each accepted socket within ``gate`` gets
    ``factory(ticket)``'s protocol once its handshake (at most ``handshake_timeout`` seconds;
    None: the loop's default) is over."""

    def __init__(self, loop: asyncio.AbstractEventLoop, socks: Iterable[socket.socket],
                 factory: Callable[[Ticket], asyncio.BaseProtocol], tls: ssl.SSLContext,
                 handshake_timeout: float | None, gate: Gate) -> None:
        self._loop = loop
        self._socks = list(socks)
        self._factory = factory
        self._tls = tls
        self._timeout = handshake_timeout
        self._gate = gate
        self._serving = False
        self._retry: asyncio.TimerHandle | None = None
        #: the handshakes under way (each a task; it removes itself when done)
        self.handshakes: set[asyncio.Task[None]] = set()

    # -- what a listener uses of asyncio.Server --------------------------------------------
    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._socks)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._serving

    async def start_serving(self) -> None:
        self.start()

    async def serve_forever(self) -> None:
        self.start()
        await asyncio.Future()  # (until cancelled)

    def start(self) -> None:
        """Accept connections (again, after a pause for descriptors)."""
        if self._serving or not self._socks:
            return
        for sock in self._socks:
            sock.setblocking(False)
            sock.listen(BACKLOG)
            self._loop.add_reader(sock.fileno(), self._accept, sock)
        self._serving = True

    def close(self) -> None:
        """Stop accepting (the listening sockets are closed now, so the port is free) and
        drop the handshakes under way; connections already made stay."""
        self._pause()
        for sock in self._socks:
            sock.close()
        self._socks = []
        for task in self.handshakes:
            task.cancel()

    async def wait_closed(self) -> None:
        """Until the handshakes dropped by :meth:`close` have ended."""
        if self.handshakes:
            await asyncio.wait(list(self.handshakes))

    # -- accepting -------------------------------------------------------------------------
    def _pause(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._serving:
            self._serving = False
            for sock in self._socks:
                self._loop.remove_reader(sock.fileno())

    def _resume(self) -> None:
        self._retry = None
        self.start()

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(BACKLOG):
            try:
                conn, _addr = sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    log.warning("accepting on %s failed: %s", sock.getsockname(), exc)
                    return
                # level-triggered readiness would call us again at once: wait a moment
                log.error("accepting on %s: %s; accepting again in %gs", sock.getsockname(),
                          exc, RETRY_DELAY)
                self._pause()
                self._retry = self._loop.call_later(RETRY_DELAY, self._resume)
                return
            if not self._gate.take():  # over the cap: counted and logged there
                _refuse(conn)
                continue
            conn.setblocking(False)
            ticket = Ticket(self._gate, self._loop.time())
            task = self._loop.create_task(self._handshake(conn, ticket))
            self.handshakes.add(task)
            task.add_done_callback(functools.partial(self._ended, conn, ticket))

    def _ended(self, conn: socket.socket, ticket: Ticket, task: asyncio.Task[None]) -> None:
        self.handshakes.discard(task)
        if task.cancelled() and ticket.held:
            # cancelled before its first step (``close`` in the accept's turn): nothing of
            # :meth:`_handshake` ran, so the socket never reached a transport (one that ran
            # gives its place back when cancelled; its transport closes the socket)
            ticket.release()
            _refuse(conn)

    async def _handshake(self, conn: socket.socket, ticket: Ticket) -> None:
        """Hand ``conn`` to a TLS transport; its place is given back here if the handshake
        does not end in a connection (the transport has closed the socket then)."""
        try:
            await self._loop.connect_accepted_socket(
                lambda: self._factory(ticket), conn, ssl=self._tls,
                ssl_handshake_timeout=self._timeout)
        except asyncio.CancelledError:
            ticket.release()
            raise
        except Exception as exc:  # (OSError, ssl.SSLError, a timeout: the loop logs at DEBUG)
            ticket.release()
            log.debug("a TLS handshake ended without a connection: %r", exc)
