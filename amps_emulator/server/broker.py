"""What the command handlers may use of the server: the ``Broker`` they receive.

The handlers (``commands``, ``sow_commands``, ``sow_aggregate``, ``sow_results``) take
``(server: Broker, conn: Client, cmd: Command)``. ``Broker`` lists, in one place, the state
and services a handler reads (fakeredis' ``CommandsMixinBase``): the routing table, the
session maps, the clock and the turn, the transaction log, SOW, queues, views and actions,
the counters and the instance name. :class:`server.app.Server` satisfies it; a test may pass
any object that does.

It is a ``Protocol`` rather than the passive state object itself (architecture-2's
``broker.py``) for now: the Server still holds that state, and splitting it out is a change
of ownership beyond this step. What matters for the import graph holds either way: this
module names the services for type checking only, and none of them names it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from amps_emulator.server.ports import ActionsPort, Client, ServiceHost
    from amps_emulator.server.queuesvc import QueueService
    from amps_emulator.server.router import Subscription
    from amps_emulator.server.sowsvc import SowService
    from amps_emulator.server.txlog import TxLog
    from amps_emulator.server.views import DerivedTopics

    class Broker(ServiceHost, Protocol):
        """(Declared for type checkers only: handlers name it in annotations.)"""

        by_name: dict[str, Client]
        client_seqs: dict[str, int]  # publish de-duplication high-water marks
        txlog: TxLog | None
        sowsvc: SowService | None
        queuesvc: QueueService | None
        derived: DerivedTopics | None
        actions: ActionsPort
        stopping: bool

        def remove_subscription(self, sub: Subscription) -> None: ...

        def closed(self, client: Client) -> None: ...
