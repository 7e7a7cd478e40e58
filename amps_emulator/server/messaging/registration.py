"""Live subscriptions: compiling a command's filter (with the AMPS failure reasons) and
registering a subscription with the router. Used by ``subscribe`` and ``sow_and_subscribe``,
by queue subscriptions and by views; depends only on the router and conflation, so each of
those imports it without importing the others."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from amps_emulator.protocol import reasons
from amps_emulator.protocol.filter import FilterError, compile_filter
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.server.core.router import Subscription
from amps_emulator.server.delivery.conflation import ConflationHost, conflation_for

if TYPE_CHECKING:
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.core.ports import Client


class SubscribeHost(ConflationHost, Protocol):
    """What registering a live subscription reads of the broker."""

    def remove_subscription(self, sub: Subscription) -> None: ...


def compile_filter_for(filter_text: str | None) -> Callable[..., bool] | None:
    if not filter_text or not filter_text.strip():
        return None
    try:
        return compile_filter(filter_text)
    except FilterError:
        raise
    except CommandError:
        raise
    except Exception as exc:  # anything the filter compiler did not foresee is still a bad filter
        raise CommandError(reasons.BAD_FILTER, str(exc)) from None


def register_subscription(broker: SubscribeHost, client: Client, cmd: Command, sub_id: str,
                          filt: Any, delta: bool, routed: bool = True) -> Subscription:
    """Add a live (non-bookmark) subscription, replacing one with the same id. ``routed``:
    published messages reach it through the router (not so an aggregated subscription over
    a queue: its state follows the queue)."""
    sub = Subscription(client, sub_id, cmd.topic or "", filt, cmd.opts, delta=delta)
    sub.conflator = conflation_for(broker, sub)  # a bad conflation option fails here
    existing = client.subs.get(sub_id)
    if existing is not None:
        broker.remove_subscription(existing)
    client.subs[sub_id] = sub
    if routed:
        broker.router.add(sub)
    return sub
