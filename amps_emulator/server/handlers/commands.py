"""The dispatch table: one plain function per AMPS command, with the broker as context.

Each handler gets ``(broker, client, cmd)``, does the work, and sends exactly the acks the
command asked for (``a``): ``received``/``parsed`` first, then ``processed``, then
``completed``/``stats``. A :class:`protocol.reasons.CommandError` raised here becomes a
failure ack with the AMPS reason string (see ``Server.dispatch``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amps_emulator.protocol import reasons
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.server.core.router import Subscription
from amps_emulator.server.delivery import replay
from amps_emulator.server.delivery.acks import early as acks_early
from amps_emulator.server.delivery.acks import final as acks_final
from amps_emulator.server.delivery.acks import refused as acks_refused
from amps_emulator.server.handlers import sow_commands
from amps_emulator.server.handlers.type_features import refuse_unsupported_options
from amps_emulator.server.messaging.message_path import check_writable, publish_message
from amps_emulator.server.messaging.registration import compile_filter_for, register_subscription

if TYPE_CHECKING:
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.core.ports import Client, QueueService
    from amps_emulator.server.messaging.broker import Broker

log = logging.getLogger("amps_emulator.commands")

# -- logon / heartbeat / flush -------------------------------------------------------------

def logon(broker: Broker, client: Client, cmd: Command) -> None:
    acks_early(client, cmd)
    fixed = client.listener.message_type
    mt = cmd.message_type or fixed or "json"
    if fixed is not None and mt != fixed:  # a transport of one type serves only that type
        raise CommandError(reasons.INVALID_MESSAGE_TYPE, mt)
    if mt not in broker.message_types:
        raise CommandError(reasons.INVALID_MESSAGE_TYPE, mt)
    client.message_type = mt
    name = cmd.client_name or f"anonymous-{client.conn_id}"
    previous = broker.by_name.get(name)
    session = client.session
    if previous is not None and previous is not client and session is not None \
            and previous.session is not None and not previous.session.may_take_over(session.user_id):
        raise CommandError(reasons.NAME_IN_USE, f"client name {name!r} is logged on as another user")
    if previous is not None and previous is not client:
        # AMPS treats a second logon with the same name as a reconnect: the older
        # connection is disconnected and the new one takes the name over.
        previous.close(f"{reasons.DISCONNECT_NAME_IN_USE}: a logon from {client.peer} "
                       f"took over the client name {name!r}")  # a WARNING with both peers
        broker.drop_client(previous)
    if client.client_name is not None and client.client_name != name:
        if broker.by_name.get(client.client_name) is client:
            del broker.by_name[client.client_name]
    client.client_name = name
    client.user_id = session.user_id if session is not None else cmd.user_id
    client.client_version = cmd.version
    client.correlation_id = cmd.correlation_id
    client.logged_on = True
    broker.by_name[name] = client
    acks = cmd.acks
    extra: dict[str, Any] = {"version": broker.server_version, "client_name": name}
    txlog = broker.txlog
    if txlog is not None:
        journal = txlog.journal
        if name not in broker.client_seqs:
            broker.client_seqs[name] = journal.last_seq_for_client(name, persisted=False)
        extra["s"] = journal.last_seq_for_client(name)
        pid = journal.publisher_id(name)
        extra["bookmark"] = f"{pid}|{journal.last_sequence_for_publisher(pid)}|"
    elif name in broker.client_seqs:
        extra["s"] = broker.client_seqs[name]
    if cmd.user_id is not None:
        extra["user_id"] = cmd.user_id
    for ack_type in ("processed", "completed"):
        if ack_type in acks:
            client.ack(cmd, ack_type, **extra)
    for listener in broker.logon_listeners:
        listener(client)


def heartbeat(broker: Broker, client: Client, cmd: Command) -> None:
    opts = (cmd.options or "").split(",")
    if opts and opts[0] == "start":
        try:
            interval = float(opts[1]) if len(opts) > 1 and opts[1] else 0.0
        except ValueError:
            raise CommandError(reasons.INVALID_OPTIONS, cmd.options or "") from None
        if interval <= 0:
            raise CommandError(reasons.INVALID_OPTIONS, cmd.options or "")
        client.start_heartbeat(interval)
    elif opts and opts[0] == "stop":
        client.stop_heartbeat()
    # "beat": any inbound traffic already refreshed the timer.
    acks_early(client, cmd)
    acks_final(client, cmd)


def timer(broker: Broker, client: Client, cmd: Command) -> None:
    """``start_timer`` / ``stop_timer``: commands AMPS dropped in 5.3.2.0 (the 5.3.4 clients
    call them no longer valid on such a server) that clients still send through a raw command
    (60East's JavaScript client routes ``stop_timer`` like ``heartbeat`` and waits for its
    processed ack, and the Go client's integration suite requires a successful one). What
    those clients expect of a 5.3.2+ server: the acks asked for, successful, and no timer;
    ``completed``, which ``stop_timer`` asked for to carry the timing, carries nothing."""
    log.info("%s: %s acknowledged; no timer since AMPS 5.3.2.0", client.describe(), cmd.command)
    acks_early(client, cmd)
    acks_final(client, cmd)


def flush(broker: Broker, client: Client, cmd: Command) -> None:
    acks_early(client, cmd)
    # Everything this client sent before the flush has been processed in order; pending
    # persisted acks go out before the flush's own ack.
    client.emit_persisted()
    acks_final(client, cmd)
    if "persisted" in cmd.acks:  # publish_flush(ack_type=persisted)
        if broker.txlog is not None:
            broker.txlog.flush_persisted(client, cmd)
        else:
            client.ack(cmd, "persisted")  # nothing is journalled: processed is all there is


# -- publish ------------------------------------------------------------------------------

def publish(broker: Broker, client: Client, cmd: Command) -> None:
    topic = cmd.topic
    if not topic:
        raise CommandError(reasons.INVALID_TOPIC, "publish without a topic")
    acks = cmd.acks
    if acks:
        acks_early(client, cmd)
    seq = cmd.seq
    last = None
    if seq is not None and client.client_name is not None:
        last = broker.client_seqs.get(client.client_name)
        if last is not None and seq <= last:
            # A republished message from a publish store: drop it, but still ack it.
            _publish_acks(broker, client, cmd, seq, None)
            return
        broker.client_seqs[client.client_name] = seq
    try:
        _publish(broker, client, cmd, topic, acks, seq)
    except BaseException:
        # Not stored: its sequence must not mark a later resend of it as a duplicate.
        if seq is not None and client.client_name is not None \
                and broker.client_seqs.get(client.client_name) == seq \
                and not _journaled(broker, client.client_name, seq):
            if last is None:
                broker.client_seqs.pop(client.client_name, None)
            else:
                broker.client_seqs[client.client_name] = last
        raise


def _journaled(broker: Broker, client_name: str, seq: int) -> bool:
    txlog = broker.txlog
    return txlog is not None and txlog.is_open \
        and txlog.journal.last_seq_for_client(client_name, persisted=False) >= seq


def _publish(broker: Broker, client: Client, cmd: Command, topic: str,
             acks: frozenset[str], seq: int | None) -> None:
    if broker.queues is not None:
        topic = broker.queues.publish_target(topic)  # a queue's own name: where it feeds from
    txlog = broker.txlog
    if txlog is not None and txlog.failed is not None and txlog.recorded(topic):
        txlog.refuse(client, cmd, seq)  # a failure ack, no log line per publish
        return
    if broker.sow is not None and broker.sow.refusing(topic):  # its disk is full
        acks_refused(client, cmd, seq, reasons.TX_STORE_FAILURE, broker.txlog)
        return
    check_writable(broker, topic)  # not a view's own topic
    try:
        # positional: (broker, topic, body, delta, client_name, client_seq, correlation_id,
        # sow_key, expiration, headers)
        position = publish_message(
            broker, topic, cmd.body, cmd.command == "delta_publish", client.client_name or "",
            seq, cmd.correlation_id, cmd.sow_key, cmd.expiration,
            {"o": cmd.options} if cmd.options else None)
    except CommandError as exc:
        if seq is None or "persisted" not in acks:
            raise
        # A publish-store message that cannot be stored (e.g. bad sow key): the failure goes
        # on its persisted ack, with its sequence, to the client's failed-write handler.
        if "processed" in acks:
            client.ack(cmd, "processed", "failure", exc.reason)
        acks_refused(client, cmd, seq, exc.reason, broker.txlog)
        return
    if acks:
        _publish_acks(broker, client, cmd, seq, position)


def _publish_acks(broker: Broker, client: Client, cmd: Command, seq: int | None,
                  position: int | None) -> None:
    acks = cmd.acks
    if "processed" in acks:
        client.ack(cmd, "processed")
    if "persisted" in acks:
        if seq is None:
            client.ack(cmd, "persisted")
        elif broker.txlog is not None:
            broker.txlog.wait_persisted(client, seq, position)
        else:
            client.note_persisted(seq)
    if "completed" in acks:
        client.ack(cmd, "completed")
    if "stats" in acks:
        client.ack(cmd, "stats")


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
    queues = broker.queues
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


HANDLERS: dict[str, Callable[[Broker, Client, Command], None]] = {
    "logon": logon,
    "heartbeat": heartbeat,
    "flush": flush,
    "start_timer": timer,
    "stop_timer": timer,
    "publish": publish,
    "delta_publish": publish,
    "subscribe": subscribe,
    "delta_subscribe": subscribe,
    "unsubscribe": unsubscribe,
    "sow": sow_commands.sow,
    "sow_and_subscribe": sow_commands.sow_and_subscribe,
    "sow_and_delta_subscribe": sow_commands.sow_and_subscribe,
    "sow_delete": sow_commands.sow_delete,
}
