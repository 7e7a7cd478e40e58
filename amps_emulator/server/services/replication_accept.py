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

Only then is anything answered: the validation checks, a bootstrap (served and closed), or
this instance's hello and the link itself, both ways (``ReplicationService._run_link``): a
passive Destination (no InetAddr) that names the peer replicates over this connection, and
the records the peer sends are applied when its identity may replicate their topic
(``replicated-topics``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import msgspec

from amps_emulator.config.model import Destination
from amps_emulator.protocol.codec import ProtocolError
from amps_emulator.replication.bootstrap_link import serve_bootstrap
from amps_emulator.replication.gate import DestinationState
from amps_emulator.replication.link import Sender
from amps_emulator.replication.peer_auth import LogonRefused, PeerIdentity, log_on_peer
from amps_emulator.replication.stream import PRE_AUTH_FRAME, read_frame, send
from amps_emulator.replication.wire import (
    Hello,
    LinkRefused,
    NotAnEmulator,
    check_peer,
    classify_hello,
    refuse_frame,
)

if TYPE_CHECKING:
    from amps_emulator.server.services.replication import ReplicationService

log = logging.getLogger("amps_emulator.replication")

ON_CONNECT_INCOMING = "amps-action-on-connect-incoming-replication"
ON_DISCONNECT_INCOMING = "amps-action-on-disconnect-incoming-replication"


def passive_for(service: ReplicationService, remote: Hello) -> Destination | None:
    """The passive Destination (no InetAddr) that names the instance which connected."""
    for dest in service.config.replication.destinations:
        if dest.passive and dest.group == remote.group and dest.name in (dest.group, remote.name):
            return dest
    return None


async def log_on(service: ReplicationService, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
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


async def accept(service: ReplicationService, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
    """One connection to the replication transport, from its first byte to its close."""
    peer = str(writer.get_extra_info("peername"))
    me = asyncio.current_task()
    if me is not None:  # stop() cancels the links it accepted too
        service.track(me)
    passive: DestinationState | None = None  # the passive destination replicating over this link
    upstream: str | None = None  # the peer's name once its link is accepted
    identity: PeerIdentity | None = None
    reason: str | None = None
    try:
        admitted = await log_on(service, reader, writer, peer)
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
            await serve_bootstrap(service, remote, remote.bootstrap, writer, reader)
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
        await service.run_link(remote, reader, writer, sending,
                               admit=identity.admits if identity.checks_topics else None)
    except NotAnEmulator as exc:
        log.error("replication transport: connection from %s closed: %s", peer, exc)
    except LinkRefused as exc:
        reason = exc.reason
        log.error("replication link from %s refused by the upstream: %s", peer, exc.reason)
    except (OSError, asyncio.IncompleteReadError, ProtocolError) as exc:
        reason = str(exc) or type(exc).__name__
        log.warning("replication link from %s lost: %s", peer, reason)
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
        if me is not None:
            service.untrack(me)


__all__ = ["ON_CONNECT_INCOMING", "ON_DISCONNECT_INCOMING", "accept", "log_on", "passive_for"]
