"""The dispatch table: the handler of every AMPS command the server serves, by command name."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from amps_emulator.server.handlers import publish, session, sow, sow_delete, subscribe

if TYPE_CHECKING:
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.core.ports import Client
    from amps_emulator.server.messaging.broker import Broker

HANDLERS: dict[str, Callable[[Broker, Client, Command], None]] = {
    "logon": session.logon,
    "heartbeat": session.heartbeat,
    "flush": session.flush,
    "start_timer": session.timer,
    "stop_timer": session.timer,
    "publish": publish.publish,
    "delta_publish": publish.publish,
    "subscribe": subscribe.subscribe,
    "delta_subscribe": subscribe.subscribe,
    "unsubscribe": subscribe.unsubscribe,
    "sow": sow.sow,
    "sow_and_subscribe": sow.sow_and_subscribe,
    "sow_and_delta_subscribe": sow.sow_and_subscribe,
    "sow_delete": sow_delete.sow_delete,
}
