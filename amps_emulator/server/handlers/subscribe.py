"""The ``subscribe``, ``delta_subscribe`` and ``unsubscribe`` commands: live and bookmark
subscriptions, subscriptions to a queue, and ``pause``/``resume`` of bookmark replays."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from amps_emulator.protocol import reasons
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.server.core.router import Subscription
from amps_emulator.server.delivery import replay
from amps_emulator.server.delivery.acks import early as acks_early
from amps_emulator.server.delivery.acks import final as acks_final
from amps_emulator.server.handlers.sow_aggregate import refuse_aggregated_replace
from amps_emulator.server.handlers.type_features import refuse_unsupported_options
from amps_emulator.server.messaging.registration import compile_filter_for, register_subscription

if TYPE_CHECKING:
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.core.ports import Client, QueueService
    from amps_emulator.server.messaging.broker import Broker



# -- subscriptions -------------------------------------------------------------------------

def subscribe(broker: Broker, client: Client, cmd: Command) -> None:
    acks_early(client, cmd)
    opts = cmd.opts
    if "resume" in opts:
        _resume(broker, client, cmd)
        return
    ids = cmd.sub_id or ""
    if "pause" in opts and "replace" not in opts and (ids in client.subs or "," in ids):
        _pause(broker, client, cmd, ids)  # pausing running subscriptions: no topic needed
        return
    topic = cmd.topic
    if not topic:
        raise CommandError(reasons.INVALID_TOPIC, "subscribe without a topic")
    sub_id = cmd.sub_id or cmd.cid
    if not sub_id:
        raise CommandError(reasons.INVALID_SUBID, "subscribe needs a sub_id or cid")
    if cmd.sub_id is None:
        cmd.sub_id = sub_id
    filt = compile_filter_for(cmd.filter)
    refuse_unsupported_options(broker.bodies, cmd)
    existing = client.subs.get(sub_id)
    if existing is not None and "replace" not in opts:
        raise CommandError(reasons.SUBID_IN_USE, sub_id)
    refuse_aggregated_replace(existing, cmd)
    queues = broker.queue_service
    queue = queues.get(topic) if queues is not None else None
    if queues is not None and queue is not None and cmd.bookmark is None:
        _queue_subscription(broker, queues, client, cmd, queue, sub_id, filt, existing)
        return
    if cmd.bookmark is None:
        register_subscription(broker, client, cmd, sub_id, filt,
                              delta=cmd.command == "delta_subscribe")
        acks_final(client, cmd)
        return
    if queue is not None:
        topic = queue.underlying  # a bookmark subscription to a queue replays its topic(s)
    sub = Subscription(client, sub_id, topic, filt, opts, delta=cmd.command == "delta_subscribe")
    txlog = broker.txlog
    if txlog is None:  # (as replay.start refuses it)
        raise CommandError(reasons.TX_LOG_NOT_FOUND, f"topic {sub.topic!r} is not recorded")
    cursor = replay.start(broker, client, cmd, sub)  # may refuse: nothing changed yet
    if existing is not None:
        broker.remove_subscription(existing)
    client.subs[sub_id] = sub
    sub.cursor = cursor
    txlog.cursors.add(cursor)
    if "processed" in cmd.acks:
        client.ack(cmd, "processed")
    if "stats" in cmd.acks:
        client.ack(cmd, "stats")
    replay.schedule(broker, cursor)  # replay starts after the processed ack is queued


def _queue_subscription(broker: Broker, svc: QueueService, client: Client, cmd: Command,
                        queue: Any, sub_id: str, filt: Any, existing: Any) -> None:
    """Subscribe to a queue: deliveries come from the queue engine (leases, backlog)."""
    if existing is not None and existing.queue is not queue:
        broker.remove_subscription(existing)
        existing = None
    sub = existing if existing is not None else Subscription(client, sub_id, cmd.topic or "",
                                                               filt, cmd.opts)
    max_backlog = svc.requested_backlog(cmd)  # may refuse: nothing changed yet
    sub.filter = filt
    sub.options = cmd.opts
    client.subs[sub_id] = sub
    acks = cmd.acks
    if "processed" in acks:
        # before the first deliveries; the granted backlog sizes the client's ack batches
        client.ack(cmd, "processed",
                 opts=f"max_backlog={svc.granted_backlog(queue, max_backlog)}")
    svc.subscribe(queue, client, sub, cmd, max_backlog)
    acks_final(client, cmd, processed=False)


def _pause(broker: Broker, client: Client, cmd: Command, sub_ids: str) -> None:
    """``o=pause`` naming subscriptions that exist: stop their replay where it is (``resume``
    continues it). Only bookmark subscriptions without ``live`` can pause; ids this connection
    does not have are ignored, as for ``resume``."""
    cursors = []
    for sub_id in sub_ids.split(","):
        sub = client.subs.get(sub_id.strip())
        if sub is None:
            continue
        if sub.cursor is None or sub.cursor.live:
            raise CommandError(reasons.INVALID_OPTIONS,
                               f"pause: {sub.sub_id} is not a bookmark subscription without live")
        cursors.append(sub.cursor)
    for cursor in cursors:
        cursor.paused = True
    acks_final(client, cmd)


def _resume(broker: Broker, client: Client, cmd: Command) -> None:
    """``o=resume``: start delivering to subscriptions created with ``pause``."""
    for sub_id in (cmd.sub_id or "").split(","):
        sub = client.subs.get(sub_id.strip())
        if sub is not None and sub.cursor is not None and sub.cursor.paused:
            sub.cursor.paused = False
            replay.schedule(broker, sub.cursor)
    acks_final(client, cmd)


def unsubscribe(broker: Broker, client: Client, cmd: Command) -> None:
    acks_early(client, cmd)
    ids = (cmd.sub_id or "").split(",")
    if "all" in ids:
        targets = list(client.subs)
    else:
        targets = [i.strip() for i in ids if i.strip()]
    for sub_id in targets:
        sub = client.subs.pop(sub_id, None)
        if sub is not None:  # unknown ids (e.g. finished query ids) are ignored silently
            broker.remove_subscription(sub)
    acks_final(client, cmd)
