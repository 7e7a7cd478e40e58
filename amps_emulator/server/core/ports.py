"""What lower layers of ``server/`` may ask of higher ones: Protocols only.

The composition root (:mod:`amps_emulator.server.app`) knows everyone; nothing below it names
it. When a lower module needs something of a higher one (a connection of its host, the message
path of the transaction log and the SOW) the need is written here as a small ``Protocol``, and
the higher object satisfies it structurally. A new need becomes a Protocol member here, never
an import of a higher layer: the layer contract in ``pyproject.toml`` (``lint-imports``)
refuses that, ``TYPE_CHECKING`` imports included.

This module imports nothing of ``server/`` at run time, and under ``TYPE_CHECKING`` only
``core`` (``router``, ``heartbeat``, ``message``, ``processors``, ``budget``), so every layer may import it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from amps_emulator.auth import LogonOutcome, Session
    from amps_emulator.config.model import TransactionLog
    from amps_emulator.journal import FileJournal, MemoryJournal
    from amps_emulator.journal.record import JournalRecord
    from amps_emulator.protocol.bodies import Bodies
    from amps_emulator.protocol.codec import Payload
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.core.budget import MemoryBudget
    from amps_emulator.server.core.heartbeat import Heartbeat
    from amps_emulator.server.core.message import Message
    from amps_emulator.server.core.processors import Processors
    from amps_emulator.server.core.router import Router, Subscription
    from amps_emulator.sow import Sow, Topic
    from amps_emulator.sow.record import Record


class Stoppable(Protocol):
    """Something the server stops with itself (the Admin interface an operator tool started)."""

    async def stop(self) -> None: ...


class AdminInterface(Stoppable, Protocol):
    """The Admin interface an operator tool started, as the server sees it."""

    def truncate_statistics(self, age: float) -> str:
        """Remove the statistics older than ``age`` seconds; what was done."""
        ...


class Timer(Protocol):
    """A scheduled callback (an ``asyncio.TimerHandle`` or a test clock's timer)."""

    def cancel(self) -> None: ...


class Timebase(Protocol):
    """The server's clock (:mod:`server.core.clock`): real time, or a test clock."""

    def monotonic(self) -> float: ...

    def time(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], Any]) -> Any: ...


class ListenerInfo(Protocol):
    """The configured transport a connection arrived on
    (:class:`amps_emulator.server.net.listener.Listener`)."""

    name: str
    #: the transport's ``MessageType`` (None: any type the instance knows)
    message_type: str | None
    #: ``PerMessageDeflate``: a WebSocket client that offers permessage-deflate gets it
    per_message_deflate: bool
    max_frame: int
    out_limit: int
    #: times a connection of this transport stopped being read because the server had more
    #: of its frames than one pass takes (the processors' ``throttle_count``)
    throttled: int
    #: the largest frame (and queued output) a connection may have before it logs on
    logon_frame_limit: int
    #: websocket: headers added to the upgrade's responses (``HTTPHeader``), the challenge an
    #: upgrade without credentials is answered (``WWWAuthenticate``, Basic; None: none asked),
    #: and whether an Admin session cookie logs an upgrade on (``TrustedAdmin``)
    http_headers: tuple[tuple[str, str], ...]
    www_authenticate: str | None
    trusted_admin: bool
    #: an amps-unix transport's socket path (None: a TCP transport)
    path: str | None


class Client(Protocol):
    """One client connection as handlers, services and the turn see it
    (:class:`server.net.connection.Connection`)."""

    conn_id: int
    client_name: str | None
    user_id: str | None
    logged_on: bool
    #: the accepted logon (identity and permissions) when the server checks security
    session: Session | None
    denied_reads: int  # commands refused by entitlement, for the Admin tree
    denied_writes: int
    closed: bool
    busy: bool
    writing_paused: bool
    #: set while a stepped command's own step runs (``handlers.sow._step``): its output goes
    #: out at once instead of being held behind the command (``begin_busy``)
    _direct: bool
    subs: dict[str, Subscription]
    heartbeat: Heartbeat
    client_version: str | None
    correlation_id: str | None
    connect_time: float
    peer: str
    listener: ListenerInfo
    #: the message type the connection logged on with (its topics are of this type)
    message_type: str

    def send(self, data: bytes) -> None: ...

    def send_direct(self, data: bytes) -> None: ...

    def ack(self, cmd: Command, ack_type: str, status: str = "success",
            reason: str | None = None, **extra: Any) -> None: ...

    def fail(self, cmd: Command, reason: str) -> None: ...

    def begin_group(self, cmd: Command, qid: str) -> None: ...

    def end_group(self, cmd: Command, qid: str) -> None: ...

    def note_persisted(self, seq: int) -> None: ...

    def quiet(self) -> bool: ...

    def emit_persisted(self) -> None: ...

    def persisted_failure(self, seq: int, reason: str) -> None: ...

    def begin_busy(self) -> None: ...

    def end_busy(self) -> None: ...

    def flush_output(self) -> None: ...

    def start_heartbeat(self, interval: float) -> None: ...

    def stop_heartbeat(self) -> None: ...

    def describe(self) -> str: ...

    def close(self, why: str, abort: bool = False) -> None: ...


class Turn(Protocol):
    """The end of the event-loop turn (:class:`server.core.turn.Turn`): where the SOW and the
    journal commit, then output is written."""

    def request(self) -> None:
        """Make sure the end of this turn runs (journal or SOW work is pending)."""

    def dirty(self, client: Client) -> None:
        """``client`` has output to write at the end of this turn."""

    def after(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` in the loop's next pass once this turn has ended (a connection's
        frames past its budget: their turn starts after this one's end)."""

    def settle(self) -> None:
        """End the turn now if its end is due (before a long operation's next slice)."""


class ConnectionHost(Protocol):
    """What a :class:`server.net.connection.Connection` needs of the server it belongs to."""

    logon_timeout: float

    @property
    def timebase(self) -> Timebase: ...

    @property
    def turn(self) -> Turn: ...

    def opened(self, client: Client) -> None: ...

    def closed(self, client: Client) -> None: ...

    def dispatch(self, client: Client, cmd: Command) -> None: ...

    #: publishes the plain publishes among a read's frames from a given one on; returns the
    #: index of the first frame it did not take (:class:`server.messaging.publish_runs.PublishRuns`)
    publish_runs: Callable[[Client, list[Payload], int], int]

    def check_memory(self) -> bool: ...

    @property
    def budget(self) -> MemoryBudget:
        """The memory budget every open socket's buffers count in (a socket that is not
        yet a connection, such as a WebSocket in its HTTP upgrade, registers itself)."""

    def filter_pool(self, length: int) -> Executor:
        """Where a long filter text of ``length`` characters compiles off the loop."""

    def writable(self, client: Client) -> None:
        """``client``'s transport takes output again (journal replays paused for it resume)."""

    def offline_changed(self, client: Client, offline: bool) -> None:
        """``client`` was offlined as a slow client (its messages wait on disk), or is back
        online (:mod:`server.net.offlining`)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    #: the credentials of a live Admin session cookie's token, else None (a websocket protocol
    #: with ``TrustedAdmin``)
    admin_credentials: Callable[[str], tuple[str, str | None] | None]

    async def upgrade_logon(self, transport: str, user: str, password: str | None,
                            peer: str) -> LogonOutcome | None:
        """A websocket upgrade's credentials, decided by the transport's modules (None: no
        security is configured, anyone is accepted)."""


class PublishObserver(Protocol):
    """A consumer of the message path (:mod:`server.messaging.message_path`): views, queues,
    actions. The root registers it on the broker; the path calls it without knowing what it
    is."""

    def covers(self, topic: str) -> bool:
        """Whether a publish to ``topic`` must be built as a message for this listener even
        when no subscription and no SOW topic wants it."""

    def check_writable(self, topic: str) -> None:
        """Raise ``CommandError`` when a publish to (or delete from) ``topic`` must be refused."""

    def message_published(self, msg: Message, rec: JournalRecord | None) -> None:
        """``msg`` was published (journalled as ``rec``, if its topic is recorded), stored in
        its SOW topic (if it has one) and fanned out."""

    def records_removed(self, topic: str, records: list[Record], reason: str) -> None:
        """``records`` left the SOW topic ``topic`` (``deleted``, ``expired``)."""


class PersistWaiter(Protocol):
    """The transaction log as a refused publish sees it (:func:`server.delivery.acks.refused`): the
    failure ack waits behind the persisted acks of the publishes before it."""

    def wait_persisted(self, client: Client, seq: Any, position: int | None = None,
                       reason: str | None = None) -> None: ...


class ProxiedTransferControl(Protocol):
    """The replicated queues as the actions engine switches them
    (:class:`server.services.queue_ownership.QueueReplication`): ``amps-action-do-enable-proxied-transfer``
    and ``-disable-`` (options ``Topic``, ``MessageType``) call this with ``enabled`` True and
    False. Raises ``CommandError`` when ``topic`` is not a replicated queue of this instance."""

    def set_proxied_transfer(self, topic: str, message_type: str, enabled: bool) -> None: ...


class JournalCursor(Protocol):
    """A bookmark subscription's journal cursor as the transaction log pumps it
    (:class:`server.delivery.replay.Cursor`)."""

    live: bool
    #: the ``fully_durable`` option: sees records only once every sync replication
    #: destination acknowledged them
    fully_durable: bool
    done: bool
    next_pos: int

    def pump(self, limit: int) -> None:
        """Deliver what the cursor may see up to log position ``limit``."""

    def persisted(self, durable: int) -> None:
        """Send the subscription's persisted ack for what is durable up to ``durable``."""


class TxLogHost(Protocol):
    """What the transaction log (:class:`server.services.txlog.TxLog`) reads of the server that owns
    it: its options, loop, clock and turn, and the journal positions retention must keep."""

    keep_readable_journal: bool
    config: Any

    @property
    def turn(self) -> Turn: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def wallclock(self) -> float: ...

    def journal_pins(self) -> list[int]: ...


#: told of each ``publish`` message delivered to a subscriber: (the connection it went to, a
#: :class:`Client`; the topic key; the body; its bookmark; its correlation id): the
#: ``on-deliver-message`` actions
DeliveryWatch = Callable[[Any, str, bytes, "str | None", "str | None"], None]


class ServiceHost(Protocol):
    """What every service built by the root reads of it (:class:`server.messaging.broker.Broker`): the
    routing table and counters, the clock, the turn, the options."""

    router: Router
    stats: dict[str, int]
    #: None unless something watches deliveries (:data:`DeliveryWatch`)
    delivered: DeliveryWatch | None
    #: messages in and out per topic (:mod:`server.core.meters`)
    topics_in: dict[str, int]
    topics_out: dict[str, int]
    turn: Turn
    memory: bool
    strict_recovery: bool
    instance_name: str
    group_name: str
    #: the server's codecs, one table per server (typed topics read and write with them)
    bodies: Bodies
    #: what each message processor did (:mod:`server.core.processors`)
    processors: Processors
    #: VALUE_LOOKUP's lookups (None: the config declares none; the function gives NULL)
    value_lookup: Callable[[str, tuple[Any, ...]], str | None] | None

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def clock(self) -> float: ...

    def wallclock(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], Any]) -> Any: ...


class ReplicationControl(Protocol):
    """What the downgrade/upgrade actions (``amps-action-do-downgrade-replication`` and
    ``-upgrade-replication``) and the Admin ask of the replication links
    (:class:`replication.service.ReplicationService`)."""

    def downgrade(self, age: float, grace_period: float) -> list[str]:
        """Sync destinations whose oldest unacknowledged record is older than ``age`` seconds
        become async (their held acks go out); returns their names. Nothing is downgraded in
        the first ``grace_period`` seconds after start-up (the User Guide's GracePeriod: time
        for the other instances to start and connect). ``MinSyncDestinations`` is never
        undercut."""
        ...

    def upgrade(self, age: float, grace_period: float = 0.0) -> list[str]:
        """Downgraded destinations whose lag is under ``age`` seconds become sync again;
        returns their names. Nothing is upgraded in the first ``grace_period`` seconds after
        start-up."""
        ...


class TxLogService(Protocol):
    """The transaction log as the message path and the handlers use it
    (:class:`amps_emulator.server.services.txlog.TxLog`)."""

    #: the journal cursors of bookmark subscriptions that follow the log
    cursors: set[JournalCursor]
    #: the AMPS reason while the journal cannot be written; None when it can
    failed: str | None
    #: the config's ``TransactionLog``: which topics are recorded, where, how
    cfg: TransactionLog

    @property
    def journal(self) -> FileJournal | MemoryJournal: ...
    @property
    def is_open(self) -> bool: ...
    @property
    def safe_position(self) -> int: ...
    def recorded(self, topic: str) -> bool: ...
    def append(self, topic: str, body: bytes, kind: int = ..., *,
               client_name: str = "", client_seq: int | None = None,
               correlation_id: str | None = None, sow_key: str | None = None,
               expiration: int | None = None, headers: dict[str, str] | None = None) -> Any: ...
    def append_publishes(self, topic: str, client_name: str, bodies: list[bytes],
                         client_seqs: list[int] | None) -> list[Any] | None: ...
    def append_command(self, client: Client, cmd: Command, kind: int,
                       headers: dict[str, str] | None = None) -> Any: ...
    def wait_persisted(self, client: Client, seq: Any, position: int | None = None,
                       reason: str | None = None) -> None: ...
    def wait_persisted_run(self, client: Client, seqs: list[int], recs: list[Any] | None) -> None: ...
    def flush_persisted(self, client: Client, cmd: Any) -> None: ...
    def refuse(self, client: Client, cmd: Command, seq: int | None) -> None: ...
    def release_gated(self) -> None: ...
    def close(self) -> None: ...


class SowService(Protocol):
    """The State of the World as the message path and the handlers use it
    (:class:`amps_emulator.server.services.sow_service.SowService`)."""

    #: the engine's store of every topic
    sow: Sow
    #: told of each conflated topic of a logical topic made (its key, its ConflatedTopic,
    #: the logical topic's key)
    conflated_created: Callable[[str, Any, str], None] | None

    def get(self, name: str, create: bool = True) -> Topic | None: ...
    def topics_for(self, topic: str, literal: bool = False) -> list[Topic]: ...
    def refusing(self, topic: str) -> bool: ...
    def close(self) -> None: ...


class QueueService(Protocol):
    """Message queues as the message path and the handlers use them
    (:class:`amps_emulator.server.services.queue_service.QueueService`)."""

    def get(self, topic: str) -> Any: ...
    def publish_target(self, topic: str) -> str: ...
    def ack(self, q: Any, client: Client, cmd: Any
            ) -> Generator[Future[None] | None, None, int]: ...
    def query_records(self, q: Any, flt: Any, top_n: int | None
                      ) -> Generator[Future[None] | None, None, tuple[list[Any], int]]: ...
    def disconnect(self, client: Client) -> None: ...
    def requested_backlog(self, cmd: Any) -> int | None: ...
    def granted_backlog(self, q: Any, max_backlog: int | None) -> int: ...
    def subscribe(self, q: Any, client: Client, sub: Subscription, cmd: Any,
                  max_backlog: int | None) -> None: ...
    def close(self) -> None: ...
