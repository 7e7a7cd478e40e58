"""The server instance, and the composition root: it builds the clock, the turn, the broker, the
services and the listeners, owns the sockets, dispatch and the memory budget.

One event loop owns all state; nothing here is module-level, so two servers can run in one
process (tests do). Only the operator tools (:mod:`amps_emulator.server.ops`) import this
module. ``Server.dispatch`` looks a command up in
:data:`amps_emulator.server.handlers.table.HANDLERS` and runs it with the broker as explicit
context; a client with a security session goes through the logon and entitlement gate first.

A publish reads top to bottom in :mod:`~amps_emulator.server.net.connection` (frames in),
``Server.dispatch``, :mod:`~amps_emulator.server.handlers.publish`,
:mod:`~amps_emulator.server.messaging.message_path` (journal, SOW, observers,
:func:`~amps_emulator.server.delivery.fanout.fan_out`) and
:mod:`~amps_emulator.server.core.turn` (the end of the turn: SOW commit, journal, then the
writes, persisted acks first).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import resource
import socket
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

from amps_emulator.auth import Credentials, LogonContext, LogonOutcome, SecurityLayer
from amps_emulator.protocol import reasons
from amps_emulator.protocol.codec import Payload
from amps_emulator.protocol.filter.modules import use_function_modules
from amps_emulator.protocol.msgtypes import build_registry
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.protocol.topics import TOPIC_COMMANDS, check_topic_name, qualify
from amps_emulator.replication.link import QUEUE_KINDS
from amps_emulator.server.core import version
from amps_emulator.server.core.amps_names import (
    CLIENT_DISCONNECTED,
    TRANSPORT_DISABLED,
    amps_id,
    connection_name,
)
from amps_emulator.server.core.budget import MemoryBudget
from amps_emulator.server.core.clock import SystemClock, TestClock
from amps_emulator.server.core.minidump import DEFAULT_DIRECTORY, DEFAULT_MASK, write_minidump
from amps_emulator.server.core.ports import AdminInterface, Client
from amps_emulator.server.core.turn import Turn, contain
from amps_emulator.server.delivery import replay
from amps_emulator.server.handlers import entitle
from amps_emulator.server.handlers.table import HANDLERS
from amps_emulator.server.messaging import message_path as publish
from amps_emulator.server.messaging.broker import Broker
from amps_emulator.server.messaging.publish_runs import PublishRuns
from amps_emulator.server.net.connection import Connection
from amps_emulator.server.net.filter_lanes import FilterLanes
from amps_emulator.server.net.listener import Listener, listeners_from_config
from amps_emulator.server.net.offlining import OfflinePool
from amps_emulator.server.services.actions import Actions
from amps_emulator.server.services.actions.engine import (
    ON_CONNECT,
    ON_DISCONNECT,
    ON_OFFLINE_START,
    ON_OFFLINE_STOP,
)
from amps_emulator.server.services.event_topics import EventTopics
from amps_emulator.server.services.queue_service import QueueService
from amps_emulator.server.services.replication import ReplicationService
from amps_emulator.server.services.sow_service import SowService
from amps_emulator.server.services.txlog import TxLog
from amps_emulator.server.services.views import DerivedTopics, derived_specs
from amps_emulator.sow.auxiliary import LookupSpec, ValueLookups

if TYPE_CHECKING:
    from amps_emulator.auth import Session
    from amps_emulator.journal import JournalRecord
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.core.router import Subscription

log = logging.getLogger("amps_emulator.server")

SERVER_VERSION = version.SERVER_VERSION
LOGON_TIMEOUT = 30.0  # seconds a connection may stay open without logging on (0: forever)
MEMORY_BUDGET = 256 << 20  # bytes of buffered frames, all connections together
_SUBSCRIPTION_COMMANDS = frozenset({"subscribe", "delta_subscribe", "sow_and_subscribe",
                                    "sow_and_delta_subscribe", "unsubscribe"})


def _function_libraries(config: Any) -> frozenset[str]:
    modules = getattr(config, "modules", None)  # (a stand-in config may have none)
    return modules.function_libraries if modules is not None else frozenset()


def _value_lookups(config: Any, sow: SowService) -> ValueLookups | None:
    """VALUE_LOOKUP's lookups over the SOW topics (None: the config declares none)."""
    modules = getattr(config, "modules", None)
    if modules is None or not modules.lookups:
        return None
    return ValueLookups((LookupSpec(d.name, qualify(d.topic, d.message_type), d.return_field,
                                    d.fields) for d in modules.lookups), sow.get)


class Server:
    def __init__(self, config: Any, *, clock: Callable[[], float] = time.monotonic,
                 wallclock: Callable[[], float] = time.time,
                 keep_readable_journal: bool = False,
                 timebase: SystemClock | TestClock | None = None,
                 admin: str | None = None, memory: bool = False,
                 strict_recovery: bool = False, logon_timeout: float = LOGON_TIMEOUT,
                 memory_budget: int = MEMORY_BUDGET,
                 server_version: str = version.SERVER_VERSION) -> None:
        """``timebase``: a :mod:`server.core.clock` clock (a ``TestClock`` for ``--test-clock``);
        without one, real time read through ``clock`` (monotonic) and ``wallclock``.
        ``admin``: ``HOST:PORT`` of the Admin HTTP interface (default: the config's
        ``Admin/InetAddr``, if any), started above the root by ``admin.start_admin``.
        ``server_version``: the AMPS version logon acks and the Admin tree report."""
        self.config = config
        # the function libraries of the config's Modules: what its filters and expressions may
        # call (a context variable, which what the server runs and starts from here inherits)
        use_function_modules(_function_libraries(config))
        self.keep_readable_journal = keep_readable_journal
        self.logon_timeout = logon_timeout
        #: what every open socket buffers (partial inbound frames, stashed frames, unsent
        #: output; a WebSocket's partial frames and HTTP upgrade), together at most
        #: ``memory_budget`` bytes: past it the largest holders are disconnected as slow
        #: consumers (``check_memory``). Other listeners register their sockets with it too.
        self.budget = MemoryBudget(memory_budget)
        if timebase is None:
            system = SystemClock()
            system.monotonic, system.time = clock, wallclock
            timebase = system
        self.timebase: SystemClock | TestClock = timebase
        self.clock: Callable[[], float] = timebase.monotonic
        self.wallclock: Callable[[], float] = timebase.time
        self.started_at = self.wallclock()
        self._loop: asyncio.AbstractEventLoop | None = None  # bound by start()
        self.connections: set[Connection] = set()
        self.listeners: list[Listener] = []
        self._handlers = HANDLERS
        #: the end of every turn: SOW commit, journal, then writes (:mod:`server.core.turn`)
        self.turn = Turn()
        #: what the handlers read (:mod:`server.messaging.broker`): built here, filled in by start()
        self.broker = Broker(instance_name=config.name, timebase=timebase, turn=self.turn,
                             memory=memory, strict_recovery=strict_recovery,
                             server_version=server_version, group_name=config.group_name,
                             # the codecs of every message type the config declares, this
                             # server's own, built before any SOW topic (a topic of another
                             # type than json reads its bodies with them)
                             message_types=build_registry(config.message_type_decls))
        self.broker.drop_client = self.closed
        if config.security is not None:
            self.broker.security = SecurityLayer(config.security, [t.name for t in config.transports])
        #: what the connections hand each command to: its handler, when the config has no
        #: Authentication/Entitlement blocks (the message path pays nothing for them), else
        #: through the logon and entitlement checks first
        self.dispatch: Callable[[Client, Command], None] = \
            self._run_command if self.broker.security is None else self._dispatch_secured
        #: what the connections hand the plain publishes among a read's frames to
        self.publish_runs: Callable[[Client, list[Payload], int], int] = PublishRuns(self.broker)
        self._conn_ids = itertools.count(1)
        #: server.views.DerivedTopics when the config has views or conflated topics
        self.derived: DerivedTopics | None = None
        self.instance_name = config.name
        self.admin_addr = admin
        #: the Admin HTTP interface once an operator tool started it (``admin.start_admin``);
        #: the server stops it with itself
        self.admin: AdminInterface | None = None
        #: the credentials of a live Admin session cookie's token (set by the Admin interface):
        #: a websocket upgrade of a ``TrustedAdmin`` protocol that carries one logs on with them
        self.admin_credentials: Callable[[str], tuple[str, str | None] | None] = _no_session
        self.ready = False
        #: what a ``do-shutdown`` action asks for: the command line and the embedded server
        #: set it to their own shutdown (default: the server stops itself)
        self.on_shutdown_request: Callable[[], None] | None = None
        self._stop_task: asyncio.Task[None] | None = None
        #: transports an action enables again, while they bind
        self._enabling: set[asyncio.Task[None]] = set()
        # the actions act through the message path like a client, and on the server through
        # the ActionHost methods below
        self.actions = Actions(self.instance_name, config.actions, self.broker, host=self)
        #: /AMPS/ClientStatus and /AMPS/SOWStats, published through the message path
        self.events = EventTopics(
            self.broker, lambda key, body: publish.publish_message(
                self.broker, key, body, client_name=self.instance_name),
            config.sow_stats_interval)
        self.filter_lanes = FilterLanes()  # where long filters compile (filter_pool)
        self._recheck_timer: asyncio.TimerHandle | None = None  # the next EntitlementTimeout re-check
        #: the replication links (listener and destinations) once started, if configured
        self.replication: ReplicationService | None = None
        #: the services the config asks for, once started (the broker holds them too, as the
        #: message path and the handlers see them: :mod:`amps_emulator.server.core.ports`)
        self.txlog: TxLog | None = None
        self.sow_service: SowService | None = None
        self.queue_service: QueueService | None = None

    @property
    def memory_budget(self) -> int:
        """The most bytes all open sockets together may hold in buffered frames."""
        return self.budget.limit

    @memory_budget.setter
    def memory_budget(self, limit: int) -> None:
        self.budget.limit = limit

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the server is not started")
        return self._loop

    def replace_derived(self, derived: DerivedTopics) -> None:
        """The views were rebuilt (an operator's reset): ``derived`` takes the old one's
        place on the message path."""
        old = self.derived
        self.derived = derived
        if self.actions.affinities:  # they affinitize the records of views too
            derived.watch = self.actions
        if old is None:
            publish.register(self.broker, derived)
        else:
            publish.replace(self.broker, old, derived)

    def filter_pool(self, length: int) -> Executor:
        """The worker thread that compiles a long filter of ``length`` characters off the
        event loop (``Connection._compile_aside``): a huge one's lane is not a small one's."""
        return self.filter_lanes.pool(length)

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self, sockets: Iterable[socket.socket] | None = None) -> list[str]:
        """Bind every transport (or adopt ``sockets``, in order) and return their URIs."""
        loop = self._loop = asyncio.get_running_loop()
        use_function_modules(_function_libraries(self.config))  # (started elsewhere than made)
        self.listeners = listeners_from_config(self.config)  # TLS files checked before any recovery
        self.timebase.bind(loop)
        self.turn.bind(loop)
        broker = self.broker
        broker.bind(loop)
        txlog = sow_service = None
        if self.config.transaction_log is not None:
            txlog = self.txlog = broker.txlog = TxLog(
                self, self.config.transaction_log, memory=broker.memory,
                strict_recovery=broker.strict_recovery)
            txlog.open()  # recovery happens before any client can connect
        if self.config.sow_topics or self.config.views or self.config.conflated_topics:
            sow_service = self.sow_service = broker.sow_service = SowService(
                broker, self.config, derived_specs,
                on_removed=lambda topic, records, reason: publish.removed(broker, topic, records,
                                                                          reason))
            sow_service.recover()
            sow_service.start_history_maintenance()
            broker.value_lookup = _value_lookups(self.config, sow_service)
        queues = None
        if self.config.queues:
            queues = self.queue_service = broker.queue_service = QueueService(broker, self.config,
                                                  on_expired=self.actions.expired)
            queues.recover()
        if sow_service is not None and (self.config.views or self.config.conflated_topics):
            # (after the queues' recovery: a view over a queue starts from what it holds)
            derived = DerivedTopics(broker, self.config, queues)
            derived.start()
            self.replace_derived(derived)  # the first listener: views over the topic
        if queues is not None:
            publish.register(broker, queues)  # then the queues over it
        self.events.start()  # /AMPS/SOWStats every SOWStatsInterval
        if self.actions.listens:
            publish.register(broker, self.actions)  # then the actions
        if self.actions.watches_clients:
            broker.logon_callbacks.append(self.actions.client_logged_on)
        if self.actions.watches_deliveries:
            broker.delivered = self.actions.message_delivered
        given = list(sockets) if sockets is not None else []  # (the TCP transports', in order)
        for lst in self.listeners:
            await lst.listen(self, self.logon_timeout,
                             given.pop(0) if given and lst.path is None else None)
        # the end of a turn, in order: SOW commit, then the journal (persist, then reply)
        if sow_service is not None:
            self.turn.stage("sow commit", sow_service.commit)
        if txlog is not None:
            self.turn.stage("journal end of turn", txlog.end_turn)
            txlog.start_timers()
            config = self.config
            if config.replication_listener is not None or config.replication.destinations:
                shared = self.queue_service.replication if self.queue_service is not None else None

                def apply(rec: JournalRecord) -> None:
                    if rec.kind not in QUEUE_KINDS:
                        publish.apply_replicated(broker, rec)
                    elif shared is not None:  # a queue's acks and transfers (none here: not ours)
                        shared.apply_replicated(rec)

                repl = self.replication = ReplicationService(  # (apply_run's each: queue records too)
                    config, broker, lambda: txlog.journal, self.timebase,
                    apply=apply, apply_run=lambda rs, each: publish.apply_replicated_run(broker, rs, each),
                    on_event=self.actions.fire, logon_timeout=self.logon_timeout, budget=self.budget)
                # the downgrade/upgrade actions switch the links' sync/async
                self.actions.replication_control = repl
                # persisted acks wait for the sync destinations too
                txlog.ack_gate = repl.gate.safe
                if shared is not None:
                    repl.queue_port = shared
                    repl.replicated_queues = shared.queue_names
                    # the proxied-transfer actions switch the replicated queues
                    self.actions.proxied_transfer = shared
                # records appended or made durable this turn (a group sync requests a turn)
                self.turn.stage("replication", repl.notify)
                await repl.start()
                if shared is not None:
                    shared.attach(repl)
        elif self.config.replication_listener is not None:
            log.warning("replication transport %r: no <TransactionLog> to append replicated records "
                        "to, so it does not listen", self.config.replication_listener.name)
        security = broker.security
        if security is not None and security.recheck_interval is not None:
            self._recheck_timer = loop.call_later(security.recheck_interval, self._recheck)
        self.actions.start()  # the last step of start-up: schedules armed, on-startup run
        self.ready = True
        return [lst.uri for lst in self.listeners]

    def _recheck(self) -> None:
        """``EntitlementTimeout``: fetch the cached permission documents again (off the loop);
        the users whose document changed or vanished are disconnected, as AMPS does."""
        self._recheck_timer = None
        security = self.broker.security
        if security is None or self.broker.stopping:
            return
        task = self.loop.create_task(security.recheck())

        def rechecked(done: asyncio.Task[set[str]]) -> None:
            if self.broker.stopping:
                return
            try:
                changed = done.result()
            except Exception:
                log.exception("entitlement re-check failed")
                changed = set()
            for conn in list(self.connections):
                session = conn.session
                if session is not None and session.document_key in changed:
                    conn.close(f"the permissions of user {session.user_id!r} changed")
            interval = security.recheck_interval
            if interval is not None:
                self._recheck_timer = self.loop.call_later(interval, self._recheck)

        task.add_done_callback(rechecked)

    async def enable_listener(self, lst: Listener) -> None:
        """Listen again on a transport the administrator disabled (same address)."""
        if lst.server is None:
            await lst.listen(self, self.logon_timeout)

    async def stop(self) -> None:
        self.actions.stop()  # the first step of shutdown: on-shutdown runs, timers stop
        if self.actions.pending:  # commands, file work and the steps after them, bounded;
            await self.actions.settle()  # a file copy under way ends before the log closes
        self.broker.stopping = True
        if self._recheck_timer is not None:
            self._recheck_timer.cancel()
            self._recheck_timer = None
        self.turn.stopping = True
        if self.admin is not None:
            await self.admin.stop()
        for lst in self.listeners:
            if lst.server is not None:
                lst.server.close()
        if self.replication is not None:
            await self.replication.stop()
        for conn in list(self.connections):
            conn.flush_output()
            conn.close("server shutting down")
            # its state goes now, while the transaction log is still open (the socket's
            # connection_lost may only come after the log is closed)
            self.closed(conn)
        for lst in self.listeners:
            if lst.server is not None:
                await lst.server.wait_closed()
            lst.remove_socket_file()  # (amps-unix)
        broker = self.broker
        if broker.queue_service is not None:
            broker.queue_service.close()
        if self.derived is not None:
            self.derived.close()
        self.events.close()
        if broker.sow_service is not None:
            broker.sow_service.close()
        if broker.txlog is not None:
            broker.txlog.close()
        self.filter_lanes.shutdown()

    def call_later(self, delay: float, callback: Callable[[], Any]) -> Any:
        """A timer on the server's clock (see :mod:`server.core.clock`)."""
        return self.timebase.call_later(delay, callback)

    # -- connections ------------------------------------------------------------------
    def _own(self, client: Client) -> Connection:
        """``client`` as the connection of this server it is (its listeners make only those)."""
        if not isinstance(client, Connection):
            raise TypeError(f"{client!r} is not a connection of this server")
        return client

    def opened(self, client: Client) -> None:
        conn = self._own(client)
        conn.conn_id = next(self._conn_ids)
        conn.connect_time = self.wallclock()
        self.connections.add(conn)
        self.budget.add(conn)
        log.debug("connection %d from %s", conn.conn_id, conn.peer)
        self.actions.client_event(ON_CONNECT, conn)

    def closed(self, client: Client) -> None:
        conn = self._own(client)
        known = conn in self.connections
        if known and not self.broker.stopping:
            self.events.disconnected(client, list(client.subs.values()))
        self.connections.discard(conn)
        self.budget.discard(conn)
        self.broker.forget(client)
        if known:
            log.info("client[%s] disconnected.",
                     client.client_name or connection_name(self.instance_name, client),
                     extra=amps_id(CLIENT_DISCONNECTED))
        if known and not self.broker.stopping:
            self.actions.client_event(ON_DISCONNECT, conn)
            if self.actions.affinities:
                self.actions.client_closed(conn)

    def writable(self, client: Client) -> None:
        """``client``'s transport takes output again: resume its paused journal replays."""
        replay.resume_connection(self.broker, client)

    def offline_changed(self, client: Client, offline: bool) -> None:
        """A slow client was offlined, or is back online: the on-offline actions."""
        if not self.broker.stopping:
            self.actions.client_event(ON_OFFLINE_START if offline else ON_OFFLINE_STOP, client)

    def check_memory(self) -> bool:
        """Keep what every open socket buffers within :attr:`memory_budget` (see
        :class:`server.core.budget.MemoryBudget`; a connection of a transport with slow client
        offlining counts its input there, its output answers to its pool's limits instead:
        :mod:`server.net.offlining`). False when someone was disconnected. Called when a
        connection's buffers grew by a step."""
        pools: dict[OfflinePool, list[Connection]] = {}
        for conn in self.connections:
            if conn.pool is not None and not conn.closed:
                pools.setdefault(conn.pool, []).append(conn)
        pooled_ok = all([pool.enforce(members) for pool, members in pools.items()])
        return self.budget.check() and pooled_ok

    def remove_subscription(self, sub: Subscription) -> None:
        """Take a subscription out of routing (or stop its journal cursor)."""
        self.broker.remove_subscription(sub)

    def action_truncate_statistics(self, age: float) -> str | None:
        return self.admin.truncate_statistics(age) if self.admin is not None else None

    def journal_pins(self) -> list[int]:
        """Journal positions that retention must keep: replay cursors, queued messages, records
        a replication destination has not acknowledged."""
        txlog, queues = self.txlog, self.queue_service
        pins = [c.next_pos for c in txlog.cursors if not c.done] if txlog is not None else []
        if queues is not None:
            pins.extend(q.engine.low_water_position + 1 for q in queues.queues.values())
        if self.replication is not None:
            pins.extend(self.replication.pins())
        return pins

    # -- dispatch ----------------------------------------------------------------------
    def _dispatch_secured(self, client: Client, cmd: Command) -> None:
        security = self.broker.security
        if security is not None and not client.logged_on and cmd.command != "heartbeat":
            self._authenticate(security, self._own(client), cmd)
            return
        self._run_command(client, cmd)

    def _run_command(self, client: Client, cmd: Command) -> None:
        handler = self._handlers.get(cmd.command)
        try:
            if not client.logged_on and cmd.command not in ("logon", "heartbeat"):
                raise CommandError(reasons.LOGON_REQUIRED)
            if handler is None:
                raise CommandError(reasons.UNKNOWN_COMMAND, cmd.command)
            if cmd.topic and cmd.command in TOPIC_COMMANDS:
                check_topic_name(cmd.topic)  # a control character could spell another's key
            session = client.session
            # entitlements name topics as clients do (checked first); the handlers read
            # (type, name) keys
            if session is not None and not entitle.check(self.broker, client, session, cmd):
                return
            self._qualify(client, cmd)
            removed = self.events.unsubscribing(client, cmd)
            handler(self.broker, client, cmd)
            if session is not None and cmd.command in entitle.READS:
                entitle.attach(client, session, cmd)
            self.events.command(client, cmd, removed)  # /AMPS/ClientStatus
            if cmd.command in _SUBSCRIPTION_COMMANDS and self.actions.watches_subscriptions:
                self.actions.subscription_event(client, cmd)
        except CommandError as exc:
            log.info("%s: %s failed: %s", client.describe(), cmd.command, exc)
            client.fail(cmd, exc.reason)
        except Exception:  # a bug must not take the server down
            log.exception("%s: internal error handling %r", client.describe(), cmd)
            client.fail(cmd, reasons.UNKNOWN_ERROR)

    # -- what the actions ask of the server (server.actions.ActionHost) -----------------
    def action_set_transport(self, name: str | None, enabled: bool) -> list[str]:
        """``amps-action-do-{enable,disable}-transport``: stop or start listening on the
        transport ``name`` (None: all); its connections stay."""
        chosen = [lst for lst in self.listeners if name is None or lst.name == name]
        if not chosen:
            raise LookupError(f"no transport {name!r}")
        for lst in chosen:
            if not enabled:
                self.disable_listener(lst)
            elif lst.server is None:
                task = self.loop.create_task(self.enable_listener(lst))
                self._enabling.add(task)
                task.add_done_callback(self._enabled)
        return [lst.name for lst in chosen]

    def disable_listener(self, lst: Listener) -> None:
        """Stop accepting connections on the transport ``lst`` (its connections stay)."""
        if lst.server is not None:
            log.info("Transport[%s] being disabled.", lst.name, extra=amps_id(TRANSPORT_DISABLED))
            lst.server.close()
            lst.server = None

    def _enabled(self, task: asyncio.Task[None]) -> None:
        self._enabling.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("an action could not enable a transport: %s", task.exception())

    def action_reset_security(self, what: str, transport: str | None, user: str | None) -> int:
        """``amps-action-do-reset-{authentication,entitlement}``: the cached documents are read
        again, and the sessions concerned log on again (they are disconnected)."""
        security = self.broker.security
        if security is None:
            return 0
        security.reload()
        gone = [c for c in self.connections if c.session is not None
                and (transport is None or c.listener.name == transport)
                and (user is None or c.user_id == user)]
        for conn in gone:
            conn.close(f"entitlement reset (amps-action-do-reset-{what})")
        return len(gone)

    def request_shutdown(self) -> None:
        """``amps-action-do-shutdown``: a clean shutdown, as SIGTERM (after this turn)."""
        if self.on_shutdown_request is not None:
            self.loop.call_soon(self.on_shutdown_request)
        elif self._stop_task is None:
            self._stop_task = self.loop.create_task(self.stop())

    def write_minidump(self, reason: str) -> str:
        """A diagnostic dump (:mod:`server.core.minidump`) into ``MiniDumpDirectory``; its
        path, once the ``on-minidump`` actions ran. ``LookupError``: minidumps are disabled;
        ``OSError``: it could not be written."""
        cfg = self.config
        directory = cfg.minidump_directory or DEFAULT_DIRECTORY
        if directory.strip().lower() == "disabled":
            raise LookupError("minidumps are disabled (MiniDumpDirectory)")
        sow = self.sow_service.sow.topics if self.sow_service is not None else {}
        summary = {
            "uptime": f"{self.wallclock() - self.started_at:.1f}s",
            "transports": ", ".join(f"{x.name} {x.uri}" for x in self.listeners),
            "clients": f"{len(self.connections)}: " + ", ".join(sorted(
                c.client_name or c.describe() for c in self.connections)[:50]),
            "subscriptions": sum(len(c.subs) for c in self.connections),
            "sow topics": f"{len(sow)}: " + ", ".join(
                f"{name} ({topic.count()})" for name, topic in list(sow.items())[:50]),
            "queues": len(self.queue_service.queues) if self.queue_service is not None else 0,
            "messages": dict(self.broker.stats),
            "memory": f"connections hold {self.budget.held()} of {self.budget.limit} bytes; "
                      f"max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss} KiB",
        }
        path = write_minidump(directory, summary, reason, self.instance_name,
                              DEFAULT_MASK if cfg.minidump_file_mask is None
                              else cfg.minidump_file_mask, self._loop)
        log.warning("minidump (%s) written to %s", reason, path)
        self.actions.minidump_written(path)
        return path

    def action_switch_security(self, what: str, enabled: bool) -> None:
        """``amps-action-do-{disable,enable}-{authentication,entitlement}``."""
        security = self.broker.security
        if security is None:
            return
        if what == "authentication":
            (security.enable_authentication if enabled else security.disable_authentication)()
        else:
            (security.enable_entitlement if enabled else security.disable_entitlement)()
        log.warning("%s %s by an action", what, "enabled" if enabled else "disabled")

    def switch_security(self, enabled: bool) -> None:
        """Enable or disable authentication and entitlement (SIGUSR2 / SIGUSR1): while disabled
        every logon and check allows; subscriptions made meanwhile stay as they were made."""
        security = self.broker.security
        if security is None:
            return
        if enabled:
            security.enable_authentication()
            security.enable_entitlement()
        else:
            security.disable_authentication()
            security.disable_entitlement()
        log.warning("authentication and entitlement %s", "enabled" if enabled else "disabled")

    async def upgrade_logon(self, transport: str, user: str, password: str | None,
                            peer: str) -> LogonOutcome | None:
        """A websocket upgrade's credentials (its protocol's ``WWWAuthenticate`` or
        ``TrustedAdmin``), decided by the transport's modules as a logon's are; None: the
        config has no security block (anyone is accepted)."""
        security = self.broker.security
        if security is None:
            return None
        creds = Credentials(user, password, True, LogonContext(remote_address=peer))
        return await security.transport(transport).logon(creds)

    def _authenticate(self, security: SecurityLayer, client: Connection, cmd: Command) -> None:
        """The first command of a connection when the config has security blocks: a logon
        (or, for any other command, an implicit logon with empty credentials) decided by the
        transport's modules off the event loop; the connection is busy meanwhile. Refused:
        the failure ack, then the connection closes. Accepted: the command runs."""
        explicit = cmd.command == "logon"
        context = LogonContext(client_name=cmd.client_name or "",
                               connection_name=connection_name(self.instance_name, client),
                               correlation_id=cmd.correlation_id or "",
                               message_type=cmd.message_type or client.message_type or "",
                               remote_address=client.peer)
        creds = Credentials(cmd.user_id or "", cmd.password, explicit, context) if explicit \
            else Credentials(explicit=False, context=context)
        client.begin_busy()
        upgraded = client.transport.get_extra_info("upgrade_logon") if client.transport else None
        task = self.loop.create_task(
            security.transport(client.listener.name).logon(creds) if upgraded is None
            else _as_upgraded(upgraded, creds))

        def decided(done: asyncio.Task[LogonOutcome]) -> None:
            try:
                outcome = done.result()
            except Exception as exc:  # a module's bug refuses the logon, never the server
                log.exception("%s: logon check failed", client.describe())
                outcome = LogonOutcome(None, reasons.AUTH_FAILURE, f"internal error: {exc!r}")
            session = outcome.session
            if client.closed:
                if session is not None:
                    session.close()
                return
            if session is None:  # one log line: the connection's close names user and why
                client.refuse_logon(cmd, outcome.reason, outcome.detail)
                return
            client.session = session
            if not explicit:  # an implicit logon: the connection gets a name and goes on
                client.user_id = session.user_id
                client.logged_on = True
                client.client_name = name = f"anonymous-{client.conn_id}"
                self.broker.by_name[name] = client
            self._run_command(client, cmd)
            if client.logged_on:
                client.end_busy()
            elif not client.closed:  # the logon itself failed (name in use, bad message type)
                session.close()
                client.session = None
                client.end_busy()

        task.add_done_callback(decided)

    @staticmethod
    def _qualify(client: Client, cmd: Command) -> None:
        """The topic of this connection's type: (type, name) is a topic's identity."""
        if client.message_type != "json" and cmd.topic:
            cmd.topic = qualify(cmd.topic, client.message_type)

    def contain(self, client: Client, what: str) -> None:
        """See :func:`server.core.turn.contain`."""
        contain(client, what)


def _no_session(token: str) -> None:
    return None


async def _as_upgraded(upgraded: tuple[str, Session], creds: Credentials) -> LogonOutcome:
    """The logon of a connection whose websocket upgrade logged on already (``(user name,
    session)``): it is that user's, whatever password it carries; naming another user
    refuses it (``net.websocket``)."""
    user, session = upgraded
    if creds.explicit and creds.user not in ("", user):
        return LogonOutcome(None, reasons.AUTH_FAILURE, f"the logon names user {creds.user!r}, "
                                                        f"the websocket upgrade logged on {user!r}")
    return LogonOutcome(session)
