"""The replication links over asyncio: the listener on the ``amps-replication`` transport and
one connector per active ``Replication/Destination`` (one with an InetAddr).

Both drive the sans-IO halves of :mod:`.link` and :mod:`.wire`:

* connector: connect to the Destination's InetAddr list in order, send this instance's
  :class:`~.wire.Hello` (with the Destination's AckConflationInterval), read the peer's (or
  its ``repl_refuse``), check it, then start a :class:`~.link.Sender` at what the peer lacks
  (resync). A failed, lost, refused or ``cut`` link is retried after the Destination's
  ReconnectTimeout, measured on the server clock.
  The hello carries the logon of the Destination's ``Authenticator``.
* listener (:mod:`.replication_accept`): nothing is answered or served before the peer's
  hello, within the logon timeout and a small size, has logged it on with the transport's
  Authentication/Entitlement (``replication-logon``); anything else gets one log line and a
  close. A hello that asks for a bootstrap is served and closed. Otherwise answer with this
  instance's hello; a passive Destination (no InetAddr) that names the peer replicates over
  this connection, and the records the peer sends are applied if its ``replicated-topics``
  allow their topic.

Either way the connection then runs in both directions (:meth:`ReplicationService.run_link`):
a sender writes records as they become durable here, and the peer's ``repl_ack`` moves it
and the sync gate (:class:`~.gate.AckGate`); records the peer sends go to a
:class:`~.link.Receiver` whose :class:`~.link.ApplyPort` is ``publish.apply_replicated``,
acknowledged once durable here and acknowledged by this instance's sync destinations that
forward them, at most once per the peer's AckConflationInterval; a ``repl_qreq`` (a
replicated queue's transfer request) goes either way and is answered by the queues here. A
sender whose Destination has Compression writes through :mod:`.compression` (a peer's
``repl_z`` switches the reading side the same way).

The journal tells the links of new and newly durable records through :meth:`notify`, which
the server calls at the end of every turn and after every group sync.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable, Coroutine
from functools import partial
from typing import TYPE_CHECKING, Protocol

import msgspec

from amps_emulator.config.model import Config, Destination, DestinationTransport, ReplicationAddress
from amps_emulator.config.tls import server_context
from amps_emulator.config.values import is_regex
from amps_emulator.journal import Journal, JournalRecord
from amps_emulator.protocol.codec import ProtocolError, split_frame
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.replication import stream as link_stream
from amps_emulator.replication.bootstrap import needs_bootstrap
from amps_emulator.replication.bootstrap_link import fill_then_start
from amps_emulator.replication.compression import LinkReader, next_frame, outbound
from amps_emulator.replication.gate import AckGate, DestinationState, describe_destination
from amps_emulator.replication.link import Receiver, Selection, Sender, ack_position
from amps_emulator.replication.peer_auth import logon_for_link
from amps_emulator.replication.stream import FrameSource, LinkWriter, Wakeup, no_delay, read_frame, send
from amps_emulator.replication.wire import (
    Hello,
    LinkRefused,
    Logon,
    NotAnEmulator,
    Route,
    RouteTopic,
    TopicFacts,
    check_peer,
    classify_first_frame,
    destination_checks,
    fact_key,
    refuse_frame,
    transfer_request,
    transfer_request_frame,
)
from amps_emulator.server.core.turn import from_any_thread
from amps_emulator.server.services.replication_accept import Intake, listen

if TYPE_CHECKING:
    from amps_emulator.auth import TransportSecurity
    from amps_emulator.server.core.budget import MemoryBudget
    from amps_emulator.server.core.clock import SystemClock, TestClock
    from amps_emulator.server.core.ports import ReplicationControl
    from amps_emulator.server.messaging.broker import Broker

log = logging.getLogger("amps_emulator.replication")

#: the replication action triggers (``amps-action-on-...``), fired through ``on_event``
ON_CONNECT = "amps-action-on-connect-replication"
ON_DISCONNECT = "amps-action-on-disconnect-replication"
ON_RESYNC_COMPLETE = "amps-action-on-replication-resync-complete"
ON_DOWNGRADE = "amps-action-on-downgrade-replication"
ON_UPGRADE = "amps-action-on-upgrade-replication"


def _no_event(module: str, variables: dict[str, str]) -> None:
    """The default ``on_event``: no actions engine listens."""


class QueueTransferPort(Protocol):
    """The replicated queues of this instance, as the links see them: a peer asks for messages
    this instance owns (``repl_qreq``)."""

    def transfer_requested(self, queue: str, bookmarks: list[str], requester: str) -> None: ...


class ReplicationService:
    """Every replication link of one instance."""

    def __init__(self, config: Config, broker: Broker, journal: Callable[[], Journal],
                 timebase: SystemClock | TestClock, *, apply: Callable[[JournalRecord], None],
                 apply_run: Callable[[list[JournalRecord], Callable[[JournalRecord], None]], None]
                 | None = None,
                 on_event: Callable[[str, dict[str, str]], None] = _no_event,
                 logon_timeout: float = 30.0, budget: MemoryBudget | None = None) -> None:
        """``logon_timeout``: seconds (server clock) an incoming connection has to log on with
        its hello (0: forever); ``budget``: the server's memory budget, where they count."""
        self.config = config
        self.broker = broker
        self.journal = journal
        self.timebase = timebase
        #: the message path for a replicated record (``publish.apply_replicated``)
        self.apply = apply
        #: the message path for a replicated batch's records (``publish.apply_replicated_run``),
        #: handing the ones it does not take itself to the second argument
        self.apply_run = apply_run
        self.name = config.name
        self.group = config.group_name
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.wakeups: set[Wakeup] = set()
        self.stopping = False
        #: destination name -> the connected peer's instance name (for the Admin and tests)
        self.connected: dict[str, str] = {}
        #: destination name -> its sender while connected (what it sent: ``messages_out``)
        self.senders: dict[str, Sender] = {}
        #: upstream instance name -> the receiver of its link while connected
        self.receivers: dict[str, Receiver] = {}
        #: destination name -> the last upstream position it acknowledged (kept while it is away)
        self.acked: dict[str, int] = {}
        self.listen_port: int | None = None
        #: the replication action triggers: ``on_event(module, variables)``
        self.on_event = on_event
        #: every destination's state and the sync gate on persisted acks
        self.gate = AckGate(config.replication.destinations, journal, timebase.time,
                            min_sync=config.replication.min_sync_destinations)
        #: destination name -> the open link's writer (closed by ``cut`` and ``reconnect``)
        self._links: dict[str, asyncio.StreamWriter] = {}
        #: destination name -> set when a cut link may connect again
        self._restored: dict[str, asyncio.Event] = {}
        #: upstream instance name -> its incoming link (for the Admin)
        self.incoming: dict[str, str] = {}
        #: peer instance name -> the open links with it, newest last (a transfer request goes to
        #: the peer that sends us records over one of them; it answers on whichever it sends on)
        self._upstreams: dict[str, list[LinkWriter]] = {}
        #: the replicated queues (set by the root when this instance has queues)
        self.queue_port: QueueTransferPort | None = None
        #: names of this instance's queues whose records replicate (distributed, group local)
        self.replicated_queues: frozenset[str] = frozenset()
        self.logon_timeout = logon_timeout
        self.intake = Intake(config.replication_listener, budget)
        listener, layer = config.replication_listener, broker.security
        #: who may log on to the replication transport (None: no Authentication/Entitlement
        #: configured anywhere, every peer is accepted)
        self.security: TransportSecurity | None = \
            layer.transport(listener.name) if layer is not None and listener is not None else None

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        boot = self.config.replication.bootstrap
        txcfg = self.config.transaction_log
        directory = txcfg.journal_directory if txcfg is not None else None
        if boot is not None and needs_bootstrap(self.journal(), directory):
            # filled from the source first: the links (and peers' links in) start afterwards
            self.spawn(fill_then_start(self, boot, directory))
            return
        await self.start_links()

    async def start_links(self) -> None:
        listener = self.config.replication_listener
        if listener is not None:
            tls = (server_context(listener.certificate, listener.private_key, listener.ciphers,
                                  verify_client=listener.verify_client, ca_file=listener.ca_file,
                                  ca_path=listener.ca_path, protocols=listener.secure_socket_protocols)
                   if listener.tls and listener.certificate and listener.private_key else None)
            # bound, not yet serving: stop() closes it even if it stops while it starts
            server = self._server = await listen(self, listener, tls)
            if self.stopping:  # (it stopped meanwhile: stop() may have closed none yet)
                server.close()
                return
            await server.start_serving()
            self.listen_port = server.sockets[0].getsockname()[1]
            log.info("replication transport %r listening on port %d", listener.name, self.listen_port)
        for dest in self.config.replication.destinations:
            if not dest.passive:
                self.spawn(self._connector(dest))

    async def stop(self) -> None:
        """Cancel every task of the service and await it; none starts from now on (:meth:`spawn`,
        and no connection is accepted: :func:`.replication_accept.serve`)."""
        self.stopping = True
        if self._server is not None:
            self._server.close()
        while self._tasks:  # until none is left, each awaited
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
                if task.done():
                    self._tasks.discard(task)
        if self._server is not None:  # (again: the bootstrap's start_links may have opened it)
            self._server.close()
            await self._server.wait_closed()

    def apply_replicated(self, rec: JournalRecord) -> None:
        """The :class:`~.link.ApplyPort`: through the message path like a local publish. The
        record is in the journal already; one this instance cannot apply (its SOW topic has
        other Keys) is logged, and the link goes on."""
        try:
            self.apply(rec)
        except CommandError as exc:
            log.error("replicated record %s on %r is in the transaction log but could not be "
                      "applied here: %s", rec.bookmark_str, rec.topic, exc)

    def apply_replicated_run(self, recs: list[JournalRecord]) -> None:
        """The :class:`~.link.ApplyPort`'s batch: :meth:`apply_replicated` for each, in order."""
        if self.apply_run is None:
            for rec in recs:
                self.apply_replicated(rec)
        else:
            self.apply_run(recs, self.apply_replicated)

    def pins(self) -> list[int]:
        """Journal positions retention must keep (docs/design/replication.md 2.5): per Destination, the
        first record it has not acknowledged. A destination not connected since start-up pins
        the whole log: what its instance holds is known only once it connects."""
        journal = self.journal()
        out: list[int] = []
        for dest in self.config.replication.destinations:
            sender = self.senders.get(dest.name)
            acked = sender.acked_through if sender is not None else self.acked.get(dest.name)
            out.append(journal.first_position if acked is None else acked + 1)
        return out

    def link_opened(self, dest_name: str, writer: asyncio.StreamWriter) -> None:
        """``dest_name`` replicates over ``writer`` (closed by :meth:`cut`, :meth:`reconnect`)."""
        self._links[dest_name] = writer

    def link_closed(self, st: DestinationState, writer: asyncio.StreamWriter, reason: str | None) -> None:
        """The link of destination ``st`` over ``writer`` ended."""
        if self._links.get(st.name) is writer:
            del self._links[st.name]
        self._link_down(st, reason)

    async def logon_for(self, transport: DestinationTransport) -> Logon:
        """What a link through ``transport`` logs on with: its Authenticator's credentials,
        else the instance's (:class:`LinkRefused` when a password source has gone or the
        exec authenticator's program fails)."""
        return await logon_for_link(self.config.replication.authenticator_for(transport))

    def _forget_sender(self, dest_name: str) -> None:
        sender = self.senders.pop(dest_name, None)
        if sender is not None:
            self.acked[dest_name] = sender.acked_through

    def reachable(self, name: str) -> bool:
        """Whether instance ``name`` is connected to this one by a link, either way."""
        return any(not w.is_closing() for w in self._upstreams.get(name, ()))

    def request_transfer(self, owner: str, queue: str, bookmarks: list[str]) -> bool:
        """Ask ``owner``, over a link with it (the one it replicates to us on, when both ways
        are up), for messages of ``queue`` it owns; False when no link with it is up."""
        for writer in reversed(self._upstreams.get(owner, ())):
            if not writer.is_closing():
                writer.write(transfer_request_frame(queue, bookmarks))
                return True
        return False

    def notify(self) -> None:
        """Records were appended or became durable: the links look again."""
        for ev in self.wakeups:
            ev.set()

    # -- the sync gate ---------------------------------------------------------------------
    def safe_for(self, path: tuple[str, ...], upstream_group: str | None) -> int:
        """How far a replicated record that came along ``path`` may be acknowledged upstream:
        durable here and acknowledged by this instance's sync destinations that forward it."""
        return self.gate.safe_for(self.journal().durable_position, path, upstream_group)

    def _gate_moved(self) -> None:
        """What the sync destinations allow grew: release the waiting acks here and upstream."""
        txlog = self.broker.txlog
        if txlog is not None:
            txlog.release_gated()
        self.notify()  # the incoming links' ackers look again (chains)
        self.broker.turn.request()

    def _progress(self, st: DestinationState, acked_through: int) -> None:
        before = self.gate.safe(self.journal().durable_position)
        st.acked_through = acked_through
        if st.upgrade_pending and self.gate.caught_up(st):
            self.upgrade_destination(st.name)
        if self.gate.safe(self.journal().durable_position) != before:
            self._gate_moved()

    def _acked(self, sender: Sender, st: DestinationState, position: int, wake: Wakeup) -> None:
        """The peer acknowledged everything up to ``position``: the sync gate moves, and a
        sender whose window was full may send on (``wake``: its link's)."""
        full = sender.window_full
        sender.on_ack(position)
        self._progress(st, sender.acked_through)
        if full and not sender.window_full:
            wake.set()

    def fire(self, module: str, st_name: str, reason: str | None = None, **more: str) -> None:
        variables = {"AMPS_DESTINATION_NAME": st_name, **more}
        if reason is not None:
            variables["AMPS_REASON"] = reason
        try:
            self.on_event(module, variables)
        except Exception:  # an action's failure never ends a link
            log.exception("replication: running the %s actions failed", module)

    def state(self, name: str) -> DestinationState:
        st = self.gate.states.get(name)
        if st is None:
            raise LookupError(f"no replication destination {name!r}")
        return st

    # -- downgrade / upgrade (server.ports.ReplicationControl) and the Admin's actions -------
    def downgrade(self, age: float, grace_period: float) -> list[str]:
        names = self.gate.downgrade(age, grace_period)
        for name in names:
            self._downgraded(name, f"oldest unacknowledged message older than {age:g}s")
        return names

    def upgrade(self, age: float, grace_period: float = 0.0) -> list[str]:
        names = self.gate.upgrade(age, grace_period)
        for name in names:
            self._upgraded(name)
        return names

    def downgrade_destination(self, name: str) -> bool:
        """The Admin's downgrade: ``name`` becomes async now (False: it is not sync, or
        MinSyncDestinations forbids it)."""
        if not self.gate.set_async(self.state(name)):
            return False
        self._downgraded(name, "administrator")
        return True

    def upgrade_destination(self, name: str) -> bool:
        """The Admin's upgrade: a downgraded ``name`` becomes sync once it has caught up (now,
        when it has). False: it was not downgraded."""
        st = self.state(name)
        if not st.downgraded:
            return False
        if not self.gate.caught_up(st):
            st.upgrade_pending = True
            log.info("replication destination %r: upgrade to sync once it has caught up", name)
            return True
        self.gate.set_sync(st)
        self._upgraded(name)
        return True

    def _downgraded(self, name: str, reason: str) -> None:
        log.warning("replication destination %r downgraded to async (%s): acks no longer wait "
                    "for it", name, reason)
        self.fire(ON_DOWNGRADE, name, reason)
        self._gate_moved()

    def _upgraded(self, name: str) -> None:
        log.warning("replication destination %r upgraded to sync", name)
        self.fire(ON_UPGRADE, name)

    def reconnect(self, name: str) -> bool:
        """The Admin's reconnect: drop the link now; it connects again (True: one was open)."""
        self.state(name)
        writer = self._links.get(name)
        if writer is None:
            return False
        writer.close()
        return True

    # -- emulator link controls (``/emulator/replication/<destination>``) -------------------
    def cut(self, name: str) -> None:
        """Take the link to ``name`` down and keep it down until :meth:`restore`."""
        st = self.state(name)
        st.cut = True
        self._restored.setdefault(name, asyncio.Event()).clear()
        writer = self._links.get(name)
        if writer is not None:
            writer.close()
        log.warning("replication destination %r: link cut (emulator control)", name)

    def restore(self, name: str) -> None:
        st = self.state(name)
        st.cut = False
        self._restored.setdefault(name, asyncio.Event()).set()
        log.warning("replication destination %r: link restored (emulator control)", name)

    def hold(self, name: str) -> None:
        """Count none of ``name``'s further acks until :meth:`release` (it looks lagging)."""
        st = self.state(name)
        if st.held_at is None:
            st.held_at = st.acked_through

    def release(self, name: str) -> None:
        st = self.state(name)
        if st.held_at is not None:
            st.held_at = None
            self._gate_moved()

    def describe(self, name: str) -> dict[str, object]:
        """The Monitoring Reference's fields of ``/amps/instance/replication/<destination>``,
        plus the emulator's ``held``/``cut``/``acked_position``."""
        return describe_destination(self.gate, self.state(name), self.name, self.timebase.monotonic())

    def spawn(self, coro: Coroutine[object, object, None]) -> asyncio.Task[None] | None:
        """``coro`` as a task :meth:`stop` cancels and awaits, counted from its creation (not
        from its first step, which may come after stop() has begun); None once stop() has
        begun (``coro`` is closed, never run)."""
        if self.stopping:
            coro.close()
            return None
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- what this instance says about itself ------------------------------------------------
    def hello(self) -> Hello:
        """What this instance tells a peer: its Name, Group, per-publisher high-water marks, and
        the facts the validation checks read (SOW topics, queues, recorded topics, Destinations)."""
        journal = self.journal()
        config = self.config
        txcfg = config.transaction_log
        facts: dict[str, TopicFacts] = {}

        def recorded(name: str, mtype: str) -> bool:
            return txcfg is not None and txcfg.records(name, mtype)

        for dest in config.replication.destinations:  # literal topics replicated without a SOW
            for t in dest.topics:
                if not is_regex(t.name):
                    facts[fact_key(t.name, t.message_type)] = TopicFacts(
                        txlog=recorded(t.name, t.message_type), sow_keys=None, queue=None, underlying=None)
        for s in config.sow_topics:
            facts[fact_key(s.name, s.message_type)] = TopicFacts(
                txlog=recorded(s.name, s.message_type), sow_keys=tuple(s.keys), queue=None, underlying=None)
        for q in config.queues:
            facts[fact_key(q.name, q.message_type)] = TopicFacts(
                txlog=recorded(q.name, q.message_type), sow_keys=None, queue=q.kind,
                underlying=q.underlying_topic)
        routes = tuple(
            Route(name=d.name, group=d.group, pass_through=d.pass_through,
                  topics=tuple(RouteTopic(name=t.name, message_type=t.message_type, filter=t.filter,
                                          validations=tuple(sorted(t.validations))) for t in d.topics))
            for d in config.replication.destinations)
        txlog = tuple((t.name, t.message_type) for t in txcfg.topics) if txcfg is not None else ()
        return Hello(name=self.name, group=self.group, hw=journal.high_water_marks(), facts=facts,
                     txlog=txlog, routes=routes)

    # -- upstream ------------------------------------------------------------------------------
    async def _connector(self, dest: Destination) -> None:
        addresses: list[tuple[ReplicationAddress, float, ssl.SSLContext | None, DestinationTransport]] = []
        for tr in dest.transports:
            tls = tr.client_context()
            addresses += [(a, tr.reconnect_timeout(i), tls, tr) for i, a in enumerate(tr.addresses)]
        st = self.state(dest.name)
        restored = self._restored.setdefault(dest.name, asyncio.Event())
        refused: dict[str, str] = {}  # address -> the last refusal's reason
        while not self.stopping:
            for addr, retry, tls, tr in addresses:
                while st.cut:  # an emulator ``cut``: no connection until restored
                    await restored.wait()
                try:
                    reader, writer = await asyncio.open_connection(addr.host, addr.port, ssl=tls,
                                                                   limit=link_stream.READ_LIMIT)
                except OSError as exc:  # ssl.SSLError too: a certificate VerifyClient refuses
                    log.debug("replication destination %r: %s unreachable (%s)", dest.name,
                              addr.inet_addr, exc)
                    await self._retry(st, retry)
                    continue
                if st.cut:  # cut while connecting
                    writer.close()
                    continue
                reason: str | None = None
                self._links[dest.name] = writer
                # (what the peer sends counts in the memory budget, as on an accepted link)
                link = self.intake.meter(reader, writer, addr.inet_addr, f"replication link to {dest.name!r}")
                try:
                    await self._run_upstream(dest, st, link, writer, await self.logon_for(tr))
                except (OSError, asyncio.IncompleteReadError, ProtocolError, NotAnEmulator) as exc:
                    reason = str(exc) or type(exc).__name__  # (the budget that closed it said so)
                    log.log(logging.WARNING if link.why is None else logging.DEBUG, "replication "
                            "destination %r (%s): link lost: %s", dest.name, addr.inet_addr, reason)
                except LinkRefused as exc:
                    reason = exc.reason
                    # once per reason: the link is retried every ReconnectTimeout
                    level = logging.DEBUG if refused.get(addr.inet_addr) == exc.reason else logging.ERROR
                    refused[addr.inet_addr] = exc.reason
                    log.log(level, "replication destination %r (%s) refused: %s", dest.name,
                            addr.inet_addr, exc.reason)
                except Exception as exc:  # a bug must not end the link for good: say it, retry
                    reason = f"internal error: {exc!r}"
                    log.exception("replication destination %r (%s): link failed", dest.name,
                                  addr.inet_addr)
                finally:
                    writer.close()
                    self.intake.unmeter(link)
                    self.link_closed(st, writer, reason)
                await self._retry(st, retry)

    def _link_down(self, st: DestinationState, reason: str | None) -> None:
        """The link of destination ``st`` ended (or never got past its handshake)."""
        self.connected.pop(st.name, None)
        self._forget_sender(st.name)
        if st.connected:
            st.disconnected(self.timebase.time())
            self.fire(ON_DISCONNECT, st.name, reason)

    async def _retry(self, st: DestinationState, seconds: float) -> None:
        """Wait ``seconds`` before the next connection attempt; ``st.retry_at`` says when
        (server monotonic time) meanwhile, so a test on the test clock knows what to advance."""
        st.retry_at = self.timebase.monotonic() + seconds
        try:
            await self.wait(seconds)
        finally:
            st.retry_at = None

    async def wait(self, seconds: float) -> None:
        """Wait ``seconds`` on the server clock (a test clock advances it by hand)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def elapsed() -> None:
            if not done.done():
                done.set_result(None)

        handle = self.timebase.call_later(seconds, elapsed)
        try:
            await done
        finally:
            handle.cancel()

    async def _run_upstream(self, dest: Destination, st: DestinationState, reader: LinkReader,
                            writer: asyncio.StreamWriter, logon: Logon) -> None:
        local = self.hello()
        # the hello logs on; the peer acks what this Destination sends at most once per its
        # AckConflationInterval
        send(writer, msgspec.structs.replace(local, ack_interval=dest.ack_conflation_interval).encode(logon))
        await writer.drain()
        first = await read_frame(reader)
        h, _ = split_frame(first)
        if h.get("c") == "repl_refuse":
            raise LinkRefused(str(h.get("reason")))
        remote = classify_first_frame(first)
        try:
            sender = self.start_sender(dest, st, local, remote)
        except LinkRefused as exc:
            send(writer, refuse_frame(exc.reason))
            await writer.drain()
            raise
        await self.run_link(remote, reader, writer, (sender, st))

    def start_sender(self, dest: Destination, st: DestinationState, local: Hello, remote: Hello) -> Sender:
        """Check the peer for this Destination (:class:`LinkRefused`), then a sender started at
        what the peer lacks (resync), registered as the destination's, its state connected."""
        keep, filters = destination_checks(dest, local)
        check_peer(local, remote, expected_group=dest.group, expected_name=dest.name,
                   checks=keep, filters=filters)
        # a Filter reads a typed record with this instance's codecs
        selection = Selection(dest, remote.name, self.broker.bodies.decode_typed,
                              queues=self.replicated_queues)
        sender = Sender(self.journal(), selection, local_name=self.name, local_group=self.group)
        sender.start(remote.hw)
        self.connected[dest.name] = remote.name
        self.senders[dest.name] = sender
        st.connected_to(remote.name, remote.group, self.timebase.time())
        log.info("replication destination %r%s connected to %r (%s)", dest.name,
                 " (passive)" if dest.passive else "", remote.name, st.replication_type)
        self.fire(ON_CONNECT, dest.name, AMPS_REPLICATION_PEER_NAME=remote.name,
                  AMPS_REPLICATION_GROUP_NAME=remote.group)
        self._progress(st, sender.acked_through)
        return sender

    async def run_link(self, remote: Hello, reader: LinkReader, writer: asyncio.StreamWriter,
                       sending: tuple[Sender, DestinationState] | None, *,
                       admit: Callable[[str], bool] | None = None) -> None:
        """One connection after the handshake, in both directions. ``sending`` (if this side
        sends on it: the sender and its destination's state) writes records and reads the
        peer's acks, which move the sync gate; records the peer sends are applied by a receiver
        (created when the first arrives) and acknowledged once durable here and acknowledged by
        this instance's sync destinations that forward them, at most once per the peer's
        AckConflationInterval. Transfer requests of replicated queues go both ways: the peer's
        are answered by this instance's queues (:meth:`request_transfer` sends ours). ``admit``
        (an incoming link from a peer whose identity is checked): whether it may replicate a
        topic (a record or transfer request it refuses is dropped)."""
        broker = self.broker
        receiver: Receiver | None = None
        no_delay(writer)  # a frame (or an ack) goes at once, never held back for the next
        wake = Wakeup()
        self.wakeups.add(wake)
        links = self._upstreams.setdefault(remote.name, [])
        wire = outbound(writer, sending[0].selection.dest if sending else None, remote.codecs)  # Compression
        links.append(wire)
        timer_set = False
        resynced = False

        def due() -> None:
            nonlocal timer_set
            timer_set = False
            wake.set()

        async def read() -> None:
            nonlocal receiver
            source: FrameSource = reader
            while True:
                source, payload = await next_frame(reader, source)  # decompressed once the peer says
                h, body = split_frame(payload)
                c = h.get("c")
                if c == "repl_ack":
                    if sending is None:
                        raise ProtocolError("replication ack on a link this instance does not send on")
                    self._acked(*sending, ack_position(payload), wake)
                    continue
                if c == "repl_qreq":  # the peer asks for queue messages this instance owns
                    queue, bookmarks = transfer_request(h)
                    if self.queue_port is not None and (admit is None or admit(queue)):
                        self.queue_port.transfer_requested(queue, bookmarks, remote.name)
                    continue
                if receiver is None:
                    receiver = Receiver(self.journal(), self, ack_interval=remote.ack_interval,
                                        safe=self.safe_for, local_name=self.name, admit=admit)
                    self.receivers[remote.name] = receiver
                receiver.handle_frame(h, body)  # raises LinkRefused on repl_refuse
                broker.turn.request()  # the journal writes (and syncs) what arrived at the turn's end

        loop = asyncio.get_running_loop()
        if sending is not None:  # (a compressed segment it reads is decompressed in a worker)
            sending[0].wake = partial(from_any_thread, loop, wake.set)
        reading = loop.create_task(read())
        reading.add_done_callback(lambda _: wake.set())  # (the link is gone: the loop hears it)
        try:
            while True:
                wake.clear()
                out: list[bytes | bytearray] = []
                if sending is not None:
                    sender, st = sending
                    before = sender.messages_out, sender.bytes_out
                    out = sender.poll()
                    st.messages_out += sender.messages_out - before[0]
                    st.bytes_out += sender.bytes_out - before[1]
                    self._progress(st, sender.acked_through)
                    if not resynced and sender.next_position > sender.resync_until:
                        resynced = True
                        self.fire(ON_RESYNC_COMPLETE, st.name, AMPS_REPLICATION_PEER_NAME=remote.name)
                if receiver is not None:
                    now = self.timebase.monotonic()
                    ack = receiver.take_ack(now)
                    if ack is not None:
                        out.append(ack)
                    elif receiver.pending and not timer_set:
                        delay = receiver.ack_wait(now)
                        if delay > 0:  # conflated: look again when the interval is over
                            timer_set = True
                            self.timebase.call_later(delay, due)
                if out:
                    send(wire, out)
                    await writer.drain()
                    continue  # look again before waiting: a poll sends at most 1000 records
                await wake.wait()
                if reading.done():
                    reading.result()  # the link is gone: raises what ended it
                    raise ConnectionResetError("replication peer closed the link")
        finally:
            if receiver is not None and self.receivers.get(remote.name) is receiver:
                del self.receivers[remote.name]
            links.remove(wire)
            if not links and self._upstreams.get(remote.name) is links:
                del self._upstreams[remote.name]
            self.wakeups.discard(wake)
            reading.cancel()


if TYPE_CHECKING:
    def _is_replication_control(service: ReplicationService) -> ReplicationControl:
        """The type checker proves the service is what the downgrade/upgrade actions need."""
        return service


__all__ = ["QueueTransferPort", "ReplicationService", "read_frame", "send"]
