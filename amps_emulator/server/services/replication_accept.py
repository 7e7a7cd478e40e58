"""The incoming side of replication: one connection to the ``amps-replication`` transport
(:func:`accept`, the listener's connection handler).

Until the peer has logged on the connection is bounded and served nothing:

* its first frame must come within the server's logon timeout (measured on the server clock;
  a silent connection is closed with one log line) and be at most
  :data:`~amps_emulator.replication.stream.PRE_AUTH_FRAME` bytes (a longer length is refused
  before any of the frame is read);
* it must be an emulator's hello (anything else: one log line, closed), whose logon the
  transport's Authentication and Entitlement accept, with ``replication-logon``
  (:func:`~amps_emulator.replication.peer_auth.log_on_peer`); a refused peer gets a
  ``repl_refuse`` naming the reason, logged on both sides, and the connection closes.

The listener's handler is :func:`serve`: the transport keeps at most its ``MaxConnections``
sockets open (one past it is reset at its accept, with the rate-limited log line of
:class:`~amps_emulator.server.net.admission.ConnectionCap`), and what each connection makes
the server hold counts in the server's memory budget (:class:`MeteredLink`), which closes the
largest holders when everything held together is over it.

Only then is anything answered: the validation checks, a bootstrap (served and closed), or
this instance's hello and the link itself, both ways (``ReplicationService._run_link``): a
passive Destination (no InetAddr) that names the peer replicates over this connection, and
the records the peer sends are applied when its identity may replicate their topic
(``replicated-topics``).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING

import msgspec

from amps_emulator.config.model import Destination, ReplicationListener
from amps_emulator.protocol.codec import ProtocolError
from amps_emulator.replication import stream as link_stream
from amps_emulator.replication.bootstrap_link import serve_bootstrap
from amps_emulator.replication.gate import DestinationState
from amps_emulator.replication.link import Sender
from amps_emulator.replication.peer_auth import LogonRefused, PeerIdentity, log_on_peer
from amps_emulator.replication.stream import PRE_AUTH_FRAME, FrameSource, read_frame, send
from amps_emulator.replication.wire import (
    Hello,
    LinkRefused,
    NotAnEmulator,
    check_peer,
    classify_hello,
    refuse_frame,
)
from amps_emulator.server.net.admission import Admits, ConnectionCap, Ticket
from amps_emulator.server.net.connection import BUDGET_STEP
from amps_emulator.server.net.tls_listen import TLSServer, bind_tcp, stream_protocol

if TYPE_CHECKING:
    from amps_emulator.server.core.budget import MemoryBudget
    from amps_emulator.server.services.replication import ReplicationService

log = logging.getLogger("amps_emulator.replication")

ON_CONNECT_INCOMING = "amps-action-on-connect-incoming-replication"
ON_DISCONNECT_INCOMING = "amps-action-on-disconnect-incoming-replication"


class Intake:
    """What the replication transport lets in: at most its ``MaxConnections`` sockets at once,
    each counted in the server's memory ``budget`` (None: none is kept)."""

    def __init__(self, listener: ReplicationListener | None, budget: MemoryBudget | None) -> None:
        self.cap = ConnectionCap(listener.name if listener is not None else "amps-replication",
                                 listener.max_connections if listener is not None else None)
        self.budget = budget

    def meter(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str,
              name: str | None = None) -> MeteredLink:
        """The connection of ``reader`` and ``writer``, counted in the budget until
        :meth:`unmeter` (a connector's link to its Destination: ``name`` says so)."""
        link = MeteredLink(reader, writer, peer, self.budget, name=name)
        if self.budget is not None:
            self.budget.add(link)
        return link

    def unmeter(self, link: FrameSource) -> None:
        """``link`` (of :meth:`meter`) closed: it holds nothing any more."""
        if self.budget is not None and isinstance(link, MeteredLink):
            self.budget.discard(link)


class MeteredLink:
    """A replication connection (accepted here, or opened to a Destination by its connector)
    as the memory budget sees it (a :class:`~amps_emulator.server.core.budget.Holder`), and
    the :class:`FrameSource` its frames are read through. The server holds for it the frame
    it is reading, counted at its announced size from the moment its length has arrived (a
    frame of ``BUDGET_STEP`` or more checks the budget before any of it is read; once the peer
    compresses, the frame being inflated, told by :meth:`hold`), and the output not yet
    written to it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str,
                 budget: MemoryBudget | None, *, name: str | None = None) -> None:
        """``name``: the link in the budget's log line (default: one accepted from ``peer``)."""
        self.reader = reader
        self.writer = writer
        self.peer = peer
        self.budget = budget
        self.name = name if name is not None else f"replication link from {peer}"
        self.pending = 0  # the size of the frame (or length prefix) being read
        self.why: str | None = None  # why the budget closed it

    @property
    def closed(self) -> bool:
        return self.why is not None or self.writer.is_closing()

    def budget_bytes(self) -> int:
        return self.pending + self.writer.transport.get_write_buffer_size()

    def describe(self) -> str:
        return self.name

    def close(self, why: str, abort: bool = False) -> None:
        if self.why is not None:
            return
        self.why = why
        if abort:
            self.writer.transport.abort()
        else:
            self.writer.close()

    async def read(self, n: int = -1) -> bytes:
        """Compressed bytes, once the peer compresses (at most ``n``: a chunk, not a frame)."""
        if self.why is not None:
            raise ConnectionAbortedError(self.why)
        return await self.reader.read(n)

    def hold(self, n: int) -> None:
        """The server holds a frame of ``n`` bytes for the link from now on (0: none any more):
        one being read, or inflated (a compressed link's, ``replication.compression``). A frame
        of ``BUDGET_STEP`` or more checks the budget first; ``ConnectionAbortedError`` when
        the budget has closed the link."""
        self.pending = n
        if n >= BUDGET_STEP and self.budget is not None:
            self.budget.check()
        if n and self.why is not None:
            self.pending = 0
            raise ConnectionAbortedError(self.why)

    async def readexactly(self, n: int) -> bytes:
        self.hold(n)
        try:
            return await self.reader.readexactly(n)
        except asyncio.IncompleteReadError:
            if self.why is None:
                raise
            raise ConnectionAbortedError(self.why) from None
        finally:
            self.pending = 0


async def listen(service: ReplicationService, listener: ReplicationListener,
                 tls: ssl.SSLContext | None) -> asyncio.Server | TLSServer:
    """The replication transport's server, bound but not yet serving (``start_serving``). With
    TLS a socket counts under ``MaxConnections`` from its accept
    (:class:`~amps_emulator.server.net.tls_listen.TLSServer`), and a handshake never finished
    is dropped after the logon timeout too."""

    def serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  ticket: Ticket | None = None) -> None:
        serve(service, reader, writer, ticket)

    if tls is None:
        return await asyncio.start_server(serve_one, listener.host, listener.port, start_serving=False,
                                          reuse_address=True, limit=link_stream.READ_LIMIT)
    timeout = service.logon_timeout if service.logon_timeout > 0 else None
    return TLSServer(asyncio.get_running_loop(), await bind_tcp(listener.host, listener.port),
                     stream_protocol(serve_one, link_stream.READ_LIMIT), tls, timeout,
                     service.intake.cap)


def serve(service: ReplicationService, reader: asyncio.StreamReader,
          writer: asyncio.StreamWriter, ticket: Ticket | None = None) -> None:
    """The replication transport's connection handler, called as the connection is made:
    admitted within ``MaxConnections`` (one past it is reset now; ``ticket``: its place taken
    at its accept already), counted in the memory budget while it is open, and served by a
    task of the service (:func:`accept`), which its ``stop()`` counts from now on, so it
    cancels and awaits the task even if its first step comes after stop() has begun. Once
    stop() has begun, the connection is closed at once and nothing runs for it."""
    intake = service.intake
    gate: Admits = ticket if ticket is not None else intake.cap
    if service.stopping:
        log.debug("replication transport: connection from %s closed: the server stops",
                  writer.get_extra_info("peername"))
        writer.transport.abort()
        if ticket is not None:
            ticket.release()
        return
    if not gate.admit(writer.transport):
        return
    link = intake.meter(reader, writer, str(writer.get_extra_info("peername")))

    def release() -> None:
        writer.close()
        gate.release()
        intake.unmeter(link)

    def ended(task: asyncio.Task[None]) -> None:  # (also when cancelled before its first step)
        release()
        if not task.cancelled() and task.exception() is not None:
            log.error("replication link from %s failed", link.peer, exc_info=task.exception())

    task = service.spawn(accept(service, link, writer))
    if task is None:  # (never: stop() has not begun, as checked above)
        release()
    else:
        task.add_done_callback(ended)


def passive_for(service: ReplicationService, remote: Hello) -> Destination | None:
    """The passive Destination (no InetAddr) that names the instance which connected."""
    for dest in service.config.replication.destinations:
        if dest.passive and dest.group == remote.group and dest.name in (dest.group, remote.name):
            return dest
    return None


async def log_on(service: ReplicationService, reader: FrameSource, writer: asyncio.StreamWriter,
                 peer: str) -> tuple[Hello, PeerIdentity] | None:
    """The peer's hello and identity once it has logged on; None when it was refused or gave up
    (logged here). The logon timeout runs on the server clock until the decision."""
    timeout = service.logon_timeout
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        writer.transport.abort()

    timer = service.timebase.call_later(timeout, expire) if timeout > 0 else None
    try:
        first = await read_frame(reader, PRE_AUTH_FRAME)
        remote, logon = classify_hello(first)
        identity = await log_on_peer(service.security, logon, peer)
    except (OSError, asyncio.IncompleteReadError):
        if not expired:
            raise
        log.error("replication link from %s closed: no logon within %gs", peer, timeout)
        return None
    except ProtocolError as exc:  # a frame larger than a hello before the logon
        log.error("replication link from %s closed before its logon: %s", peer, exc)
        return None
    except LogonRefused as exc:
        log.error("replication link from %s refused: %s", peer, exc.detail)
        send(writer, refuse_frame(exc.reason))
        await writer.drain()
        return None
    finally:
        if timer is not None:
            timer.cancel()
    if expired:  # the decision came too late: the connection is gone
        log.error("replication link from %s closed: no logon within %gs", peer, timeout)
        identity.close()
        return None
    return remote, identity


async def accept(service: ReplicationService, link: MeteredLink, writer: asyncio.StreamWriter) -> None:
    """One connection to the replication transport, from its first byte to its close (its
    frames read through ``link``)."""
    peer = link.peer
    passive: DestinationState | None = None  # the passive destination replicating over this link
    upstream: str | None = None  # the peer's name once its link is accepted
    identity: PeerIdentity | None = None
    reason: str | None = None
    try:
        admitted = await log_on(service, link, writer, peer)
        if admitted is None:
            return
        remote, identity = admitted
        local = service.hello()
        try:
            check_peer(local, remote, expected_group=None, expected_name=None, checks={})
        except LinkRefused as exc:
            log.error("replication link from %s refused: %s", peer, exc.reason)
            send(writer, refuse_frame(exc.reason))
            await writer.drain()
            return
        if remote.bootstrap is not None:
            send(writer, local.encode())
            await writer.drain()
            await serve_bootstrap(service, remote, remote.bootstrap, writer, link.reader)
            return
        dest = passive_for(service, remote)
        # what a passive destination sends is acked at most once per its AckConflationInterval
        reply = local if dest is None else msgspec.structs.replace(
            local, ack_interval=dest.ack_conflation_interval)
        send(writer, reply.encode())
        await writer.drain()
        log.info("replication link from %r (%s, user %r) accepted", remote.name, peer, identity.user)
        upstream = remote.name
        service.incoming[remote.name] = peer
        service.fire(ON_CONNECT_INCOMING, remote.name, AMPS_REPLICATION_PEER_NAME=remote.name,
                     AMPS_REPLICATION_GROUP_NAME=remote.group)
        sending: tuple[Sender, DestinationState] | None = None
        if dest is not None and dest.name not in service.connected:
            st = service.state(dest.name)
            if st.cut:
                log.info("replication destination %r (passive): link cut (emulator control), "
                         "nothing sent to %r", dest.name, remote.name)
            else:
                try:  # replicate to it over the connection it made (docs/design/replication.md 1.3)
                    sending = (service.start_sender(dest, st, local, remote), st)
                    passive = st
                    service.link_opened(dest.name, writer)
                except LinkRefused as exc:
                    log.error("replication destination %r (passive) refused: %s", dest.name, exc.reason)
        await service.run_link(remote, link, writer, sending,
                               admit=identity.admits if identity.checks_topics else None)
    except NotAnEmulator as exc:
        log.error("replication transport: connection from %s closed: %s", peer, exc)
    except LinkRefused as exc:
        reason = exc.reason
        log.error("replication link from %s refused by the upstream: %s", peer, exc.reason)
    except (OSError, asyncio.IncompleteReadError, ProtocolError) as exc:
        reason = str(exc) or type(exc).__name__
        # (the memory budget that closed it has said so, naming the link)
        log.log(logging.WARNING if link.why is None else logging.DEBUG,
                "replication link from %s lost: %s", peer, reason)
    except asyncio.CancelledError:
        # stop(): ends normally, since asyncio's stream server logs a cancelled handler
        log.debug("replication link from %s closed: the server stops", peer)
    finally:
        if passive is not None:
            service.link_closed(passive, writer, reason)
        if upstream is not None:
            service.incoming.pop(upstream, None)
            service.fire(ON_DISCONNECT_INCOMING, upstream, AMPS_REPLICATION_PEER_NAME=upstream)
        if identity is not None:
            identity.close()
        writer.close()


__all__ = ["ON_CONNECT_INCOMING", "ON_DISCONNECT_INCOMING", "Intake", "MeteredLink", "accept", "log_on",
           "passive_for", "serve"]
