"""The passive state the command handlers read: the ``Broker`` they receive.

The handlers (:mod:`amps_emulator.server.handlers`) and the message path
(:mod:`amps_emulator.server.messaging.message_path`) take ``(broker: Broker, client: Client,
cmd: Command)``. ``Broker`` holds, in one place, the state and services a handler may use, and
is all a command touches: the routing table, the
sessions (clients by name, publish de-duplication marks), the clock and the turn, the
transaction log, SOW and queues, the publish observers, the counters and the instance name.

It imports no handler and composes nothing: the root (:class:`server.app.Server`) builds it,
fills in the services it built, registers the observers, and keeps dispatch, lifecycle,
transports and the memory budget for itself. A test may build one directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amps_emulator.protocol.bodies import Bodies
from amps_emulator.protocol.msgtypes import MessageTypeRegistry, build_registry
from amps_emulator.server.core.processors import Processors
from amps_emulator.server.core.router import Router, Subscription
from amps_emulator.server.core.version import SERVER_VERSION
from amps_emulator.server.delivery import replay

if TYPE_CHECKING:
    from amps_emulator.auth import SecurityLayer
    from amps_emulator.server.core.ports import (
        Client,
        DeliveryWatch,
        PublishObserver,
        QueueService,
        SowService,
        Timebase,
        Turn,
        TxLogService,
    )


class Broker:
    def __init__(self, *, instance_name: str, timebase: Timebase, turn: Turn,
                 memory: bool = False, strict_recovery: bool = False,
                 server_version: str = SERVER_VERSION,
                 message_types: MessageTypeRegistry | None = None,
                 group_name: str | None = None) -> None:
        self.instance_name = instance_name
        #: the instance's Group (its Name when the config has none): AMPS_GROUP_NAME()
        self.group_name = group_name if group_name is not None else instance_name
        #: the AMPS version this server announces (logon acks, the Admin tree); per server,
        #: so two servers in one process may differ (``--server-version``)
        self.server_version = server_version
        self.timebase = timebase
        #: the end of every turn: SOW commit, journal, then writes (:mod:`server.core.turn`)
        self.turn = turn
        #: ``--memory``: no files (journal in memory, every SOW topic transient)
        self.memory = memory
        #: refuse to start when acked data is found missing
        self.strict_recovery = strict_recovery
        self.router = Router()
        #: the message types this instance serves (the config's MessageTypes, built by the
        #: root; the predeclared types when none is given)
        self.message_types: MessageTypeRegistry = (
            message_types if message_types is not None else build_registry())
        #: the codecs every reader of bodies of this server uses (:mod:`protocol.bodies`)
        self.bodies = Bodies(self.message_types)
        # -- sessions
        self.by_name: dict[str, Client] = {}  # logged-on clients by client name
        self.client_seqs: dict[str, int] = {}  # publish de-duplication high-water marks
        # -- services, filled in by the root as the config asks for them
        self.txlog: TxLogService | None = None
        self.sow_service: SowService | None = None
        self.queue_service: QueueService | None = None
        #: who the message path tells of publishes and removals (views, queues, actions), in
        #: the order they are told; registered by the root (:func:`server.messaging.message_path.register`)
        self.observers: tuple[PublishObserver, ...] = ()
        self.stats = {"published": 0, "delivered": 0}
        #: told of every ``publish`` delivered to a subscriber (live, conflated, paginated,
        #: queue, replay); None (the delivery paths pay one test) unless an
        #: ``on-deliver-message`` action watches them
        self.delivered: DeliveryWatch | None = None
        #: messages in (published) and out (delivered to subscriptions) per topic key
        #: (:mod:`server.core.meters`: at most ``TOPIC_CAP`` topics one by one)
        self.topics_in: dict[str, int] = {}
        self.topics_out: dict[str, int] = {}
        #: authentication and entitlements (:mod:`amps_emulator.auth`) when the config has an
        #: Authentication or Entitlement block; None: every logon and command is allowed
        self.security: SecurityLayer | None = None
        #: VALUE_LOOKUP's lookups (``lookup(name, values) -> str | None``) when the config
        #: loads libamps_udf_experimental.so with some; None: the function gives NULL
        self.value_lookup: Callable[[str, tuple[Any, ...]], str | None] | None = None
        #: commands refused by entitlement (the Admin tree's denied_reads / denied_writes)
        self.denied = {"reads": 0, "writes": 0}
        #: what each message processor did (the Admin tree's processors)
        self.processors = Processors()
        #: set when the server stops: replays no longer schedule themselves
        self.stopping = False
        #: drop a client's state now, before its transport reports the close (a logon taking
        #: its name over); the root also takes it out of its connections
        self.drop_client: Callable[[Client], None] = self.forget
        #: called with each client once it has logged on (the admin interface's faults
        #: follow a client name across reconnects); empty unless a fault needs it
        self.logon_callbacks: list[Callable[[Client], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- the clock and the loop ------------------------------------------------------------
    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the broker's loop is bound when the server starts")
        return self._loop

    def clock(self) -> float:
        return self.timebase.monotonic()

    def wallclock(self) -> float:
        return self.timebase.time()

    def call_later(self, delay: float, callback: Callable[[], Any]) -> Any:
        """A timer on the server's clock (see :mod:`server.core.clock`)."""
        return self.timebase.call_later(delay, callback)

    # -- sessions --------------------------------------------------------------------------
    def remove_subscription(self, sub: Subscription) -> None:
        """Take a subscription out of routing (or stop its journal cursor)."""
        if sub.cursor is not None:
            replay.stop(self, sub.cursor)
        elif sub.queue is not None:
            sub.queue.remove_subscriber(sub)
        else:
            self.router.remove(sub)
        if sub.conflator is not None:
            sub.conflator.close()

    def forget(self, client: Client) -> None:
        """``client`` is gone: its subscriptions, queue leases and name go with it."""
        for sub in client.subs.values():
            self.remove_subscription(sub)
        client.subs.clear()
        if self.queue_service is not None:
            self.queue_service.disconnect(client)
        if client.client_name is not None and self.by_name.get(client.client_name) is client:
            del self.by_name[client.client_name]
        session = client.session
        if session is not None:
            session.close()  # releases the user's cached permission document
