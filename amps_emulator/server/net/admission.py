"""How many sockets one transport keeps open at once (``MaxConnections``).

A transport's :class:`ConnectionCap` counts the sockets its protocol accepted and has not
seen close. A socket accepted past the cap is reset at once, before it can send a byte or
cost more than its descriptor for a moment, so a flood on one port leaves descriptors for
the other transports and the Admin interface. The first refusal logs one line; refusals
after it are counted and logged as one line per :data:`LOG_INTERVAL`, so a flood does not
become a flood of log lines.

The socket-facing protocol of a plain transport calls :meth:`ConnectionCap.admit` from its
``connection_made`` and :meth:`ConnectionCap.release` from its ``connection_lost`` when it
was admitted. A TLS transport counts a socket from its accept instead, its handshake included
(:mod:`.tls_listen`: a peer that never finishes one holds a descriptor and TLS state all the
same): the cap is taken at the accept (:meth:`ConnectionCap.take`) and held by the socket's
:class:`Ticket`, which its protocol is given in the cap's place, and which gives the place
back once, whichever way the socket ends (a failed or timed-out handshake, a close). The
replication port caps its sockets the same way (its stream server's handler admits
``writer.transport``); the Admin interface has its own cap, which answers 503 over HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

log = logging.getLogger("amps_emulator.connection")

__all__ = ["LOG_INTERVAL", "RESERVED_DESCRIPTORS", "Admits", "ConnectionCap", "Gate", "Ticket",
           "accepted_at", "descriptor_share", "linger_reset", "reset"]

#: seconds between two log lines about refused connections on one transport
LOG_INTERVAL = 10.0
#: descriptors kept out of the client transports' default share: journal and SOW files, the
#: Admin interface, replication links, log files
RESERVED_DESCRIPTORS = 256
_LINGER_RESET = struct.pack("ii", 1, 0)


@runtime_checkable
class _Socket(Protocol):
    """What :func:`reset` uses of a transport (asyncio's, or a wrapper's socket)."""

    def get_extra_info(self, name: str, default: Any = None) -> Any: ...

    def abort(self) -> None: ...


class Admits(Protocol):
    """What a socket-facing protocol is given to count itself under its transport's cap: a
    :class:`ConnectionCap` (counted at ``connection_made``) or a :class:`Ticket` (counted at
    the accept already)."""

    def admit(self, transport: asyncio.BaseTransport) -> bool: ...

    def release(self) -> None: ...


class Gate(Protocol):
    """A cap as the accepting side sees it (:meth:`ConnectionCap.take`, ``release``)."""

    def take(self) -> bool: ...

    def release(self) -> None: ...


class Ticket:
    """One socket's place under ``gate``, taken at its accept: its protocol's ``admit`` finds
    it counted already, and :meth:`release` gives the place back once, whoever calls it first
    (the protocol's ``connection_lost``, or the accepting side when the handshake fails, times
    out or is cancelled)."""

    __slots__ = ("_gate", "accepted", "held")

    def __init__(self, gate: Gate, accepted: float | None = None) -> None:
        self._gate = gate
        self.held = True
        #: when its socket was accepted (loop time; None: not known): its logon timeout
        #: counts from then, a TLS handshake included (:func:`accepted_at`)
        self.accepted = accepted

    def admit(self, transport: asyncio.BaseTransport) -> bool:
        if not self.held:  # (given back already: the accepting side gave up on it)
            reset(transport)
        return self.held

    def release(self) -> None:
        if self.held:
            self.held = False
            self._gate.release()


def accepted_at(cap: Admits | None, now: float) -> float:
    """When the socket ``cap`` counts was accepted: a :class:`Ticket`'s accept time (so a
    TLS handshake the protocol never saw counts toward the logon timeout, which bounds the
    whole time before a logon), else ``now`` (``connection_made`` is the accept)."""
    accepted = getattr(cap, "accepted", None)
    return now if accepted is None else accepted


def reset(transport: asyncio.BaseTransport | _Socket) -> None:
    """Close ``transport`` with a reset: nothing buffered is sent, no TIME_WAIT is kept."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        linger_reset(sock)
    if isinstance(transport, _Socket):
        transport.abort()
    else:  # (every stream transport aborts; a bare BaseTransport can only close)
        transport.close()


def linger_reset(sock: socket.socket) -> None:
    """Make closing ``sock`` a reset (SO_LINGER with a zero timeout), where it can be."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    except OSError:
        pass


def descriptor_share(transports: int) -> int | None:
    """The default ``MaxConnections`` of each of ``transports`` client transports: the
    process's open-file limit less :data:`RESERVED_DESCRIPTORS`, shared evenly (at least 16
    each); None when the limit is unknown or unlimited."""
    try:
        import resource
    except ImportError:  # not on this platform
        return None
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return None
    return max(16, (soft - RESERVED_DESCRIPTORS) // max(1, transports))


class ConnectionCap:
    """The open sockets of the transport ``name``: at most ``limit`` (None: no cap)."""

    def __init__(self, name: str, limit: int | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.limit = limit
        self.open = 0
        self.refused = 0  # sockets refused since the server started
        self._clock = clock
        self._logged_at: float | None = None  # when the last refusal line was logged
        self._unlogged = 0  # refusals since that line

    def admit(self, transport: asyncio.BaseTransport) -> bool:
        """Count a socket just accepted; past the cap, reset it and return False."""
        if self.take():
            return True
        reset(transport)
        return False

    def take(self) -> bool:
        """Count one more socket; past the cap, count and log the refusal (rate-limited) and
        return False: the caller closes the socket."""
        if self.limit is None or self.open < self.limit:
            self.open += 1
            return True
        self.refused += 1
        self._unlogged += 1
        now = self._clock()
        if self._logged_at is None or now - self._logged_at >= LOG_INTERVAL:
            if self._logged_at is None or self._unlogged == 1:
                log.warning("transport %r: %d connections open, its MaxConnections: refusing "
                            "new connections until one closes", self.name, self.open)
            else:
                log.warning("transport %r: refused %d connections in %.0fs (MaxConnections "
                            "%d)", self.name, self._unlogged, now - self._logged_at, self.limit)
            self._logged_at = now
            self._unlogged = 0
        return False

    def release(self) -> None:
        """An admitted socket closed."""
        self.open -= 1
