"""The dispatch table: one plain function per AMPS command, with the server as context.

Each handler gets ``(server, conn, cmd)``, does the work, and sends exactly the acks the
command asked for (``a``): ``received``/``parsed`` first, then ``processed``, then
``completed``/``stats``. A :class:`protocol.reasons.CommandError` raised here becomes a
failure ack with the AMPS reason string (see ``Server.dispatch``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amps_emulator.journal import RecordKind
from amps_emulator.protocol import reasons
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.server import replay, sow_commands
from amps_emulator.server.acks import early as acks_early
from amps_emulator.server.acks import final as acks_final
from amps_emulator.server.acks import refused as acks_refused
from amps_emulator.server.delivery import UNDECODED, Message, decode_or_none, fan_out
from amps_emulator.server.publish import store_publish
from amps_emulator.server.router import Subscription
from amps_emulator.server.subscribe import compile_filter_for, register_subscription
from amps_emulator.server.version import SERVER_VERSION

if TYPE_CHECKING:
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.broker import Broker
    from amps_emulator.server.ports import Client

log = logging.getLogger("amps_emulator.commands")

_PUBLISH = int(RecordKind.PUBLISH)
_DELTA = int(RecordKind.DELTA_PUBLISH)


# -- logon / heartbeat / flush -------------------------------------------------------------

def logon(server: Broker, conn: Client, cmd: Command) -> None:
    acks_early(conn, cmd)
    if cmd.message_type and cmd.message_type != conn.listener.message_type:
        raise CommandError(reasons.INVALID_MESSAGE_TYPE, cmd.message_type)
    name = cmd.client_name or f"anonymous-{conn.conn_id}"
    previous = server.by_name.get(name)
    if previous is not None and previous is not conn:
        # AMPS treats a second logon with the same name as a reconnect: the older
        # connection is disconnected and the new one takes the name over.
        previous.close(f"{reasons.DISCONNECT_NAME_IN_USE}: a logon from {conn.peer} "
                       f"took over the client name {name!r}")  # a WARNING with both peers
        server.closed(previous)
    if conn.client_name is not None and conn.client_name != name:
        if server.by_name.get(conn.client_name) is conn:
            del server.by_name[conn.client_name]
    conn.client_name = name
    conn.user_id = cmd.user_id
    conn.client_version = cmd.version
    conn.correlation_id = cmd.correlation_id
    conn.logged_on = True
    server.by_name[name] = conn
    acks = cmd.acks
    extra: dict[str, Any] = {"version": SERVER_VERSION, "client_name": name}
    txlog = server.txlog
    if txlog is not None:
        journal = txlog.journal
        if name not in server.client_seqs:
            server.client_seqs[name] = journal.last_seq_for_client(name, persisted=False)
        extra["s"] = journal.last_seq_for_client(name)
        pid = journal.publisher_id(name)
        extra["bookmark"] = f"{pid}|{journal.last_sequence_for_publisher(pid)}|"
    elif name in server.client_seqs:
        extra["s"] = server.client_seqs[name]
    if cmd.user_id is not None:
        extra["user_id"] = cmd.user_id
    for ack_type in ("processed", "completed"):
        if ack_type in acks:
            conn.ack(cmd, ack_type, **extra)


def heartbeat(server: Broker, conn: Client, cmd: Command) -> None:
    opts = (cmd.options or "").split(",")
    if opts and opts[0] == "start":
        try:
            interval = float(opts[1]) if len(opts) > 1 and opts[1] else 0.0
        except ValueError:
            raise CommandError(reasons.INVALID_OPTIONS, cmd.options or "") from None
        if interval <= 0:
            raise CommandError(reasons.INVALID_OPTIONS, cmd.options or "")
        conn.start_heartbeat(interval)
    elif opts and opts[0] == "stop":
        conn.stop_heartbeat()
    # "beat": any inbound traffic already refreshed the timer.
    acks_early(conn, cmd)
    acks_final(conn, cmd)


def flush(server: Broker, conn: Client, cmd: Command) -> None:
    acks_early(conn, cmd)
    # Everything this client sent before the flush has been processed in order; pending
    # persisted acks go out before the flush's own ack.
    conn.emit_persisted()
    acks_final(conn, cmd)
    if "persisted" in cmd.acks:  # publish_flush(ack_type=persisted)
        if server.txlog is not None:
            server.txlog.flush_persisted(conn, cmd)
        else:
            conn.ack(cmd, "persisted")  # nothing is journalled: processed is all there is


# -- publish ------------------------------------------------------------------------------

def publish(server: Broker, conn: Client, cmd: Command) -> None:
    topic = cmd.topic
    if not topic:
        raise CommandError(reasons.INVALID_TOPIC, "publish without a topic")
    acks = cmd.acks
    if acks:
        acks_early(conn, cmd)
    seq = cmd.seq
    last = None
    if seq is not None and conn.client_name is not None:
        last = server.client_seqs.get(conn.client_name)
        if last is not None and seq <= last:
            # A republished message from a publish store: drop it, but still ack it.
            _publish_acks(server, conn, cmd, seq, None)
            return
        server.client_seqs[conn.client_name] = seq
    try:
        _publish(server, conn, cmd, topic, acks, seq)
    except BaseException:
        # Not stored: its sequence must not mark a later resend of it as a duplicate.
        if seq is not None and conn.client_name is not None \
                and server.client_seqs.get(conn.client_name) == seq \
                and not _journaled(server, conn.client_name, seq):
            if last is None:
                server.client_seqs.pop(conn.client_name, None)
            else:
                server.client_seqs[conn.client_name] = last
        raise


def _journaled(server: Broker, client_name: str, seq: int) -> bool:
    txlog = server.txlog
    return txlog is not None and txlog.journal is not None \
        and txlog.journal.last_seq_for_client(client_name, persisted=False) >= seq


def _publish(server: Broker, conn: Client, cmd: Command, topic: str,
             acks: frozenset[str], seq: int | None) -> None:
    if server.queuesvc is not None:
        topic = server.queuesvc.publish_target(topic)  # a queue's own name: where it feeds from
    txlog = server.txlog
    if txlog is not None and txlog.failed is not None and txlog.recorded(topic):
        txlog.refuse(conn, cmd, seq)  # a failure ack, no log line per publish
        return
    if server.sowsvc is not None and server.sowsvc.refusing(topic):  # its disk is full
        acks_refused(conn, cmd, seq, reasons.TX_STORE_FAILURE, server.txlog)
        return
    if server.derived is not None:
        server.derived.check_writable(topic)
    try:
        # positional: (server, topic, body, delta, client_name, client_seq, correlation_id,
        # sow_key, expiration, headers)
        position = publish_message(
            server, topic, cmd.body, cmd.command == "delta_publish", conn.client_name or "",
            seq, cmd.correlation_id, cmd.sow_key, cmd.expiration,
            {"o": cmd.options} if cmd.options else None)
    except CommandError as exc:
        if seq is None or "persisted" not in acks:
            raise
        # A publish-store message that cannot be stored (e.g. bad sow key): the failure goes
        # on its persisted ack, with its sequence, to the client's failed-write handler.
        if "processed" in acks:
            conn.ack(cmd, "processed", "failure", exc.reason)
        acks_refused(conn, cmd, seq, exc.reason, server.txlog)
        return
    if acks:
        _publish_acks(server, conn, cmd, seq, position)


def publish_message(server: Broker, topic: str, body: bytes, delta: bool = False,
                    client_name: str = "", client_seq: int | None = None,
                    correlation_id: str | None = None, sow_key: str | None = None,
                    expiration: int | None = None,
                    headers: dict[str, str] | None = None) -> int | None:
    """Everything a publish does, for clients and for actions alike: journal it (when the
    topic is recorded), store it in its SOW topic, fan it out, enqueue it on the queues over
    the topic, and fire on-publish actions. Returns the journal position (None: not
    recorded). Raises ``bad sow key`` before anything happened."""
    sow_topic = server.sowsvc.get(topic) if server.sowsvc is not None else None
    doc = UNDECODED
    key = None
    if sow_topic is not None:
        doc = decode_or_none(body)
        key = sow_topic.key_for(doc, sow_key)  # refuse a message without its SowKey up front
    txlog = server.txlog
    rec = None
    if txlog is not None and txlog.recorded(topic):
        rec = txlog.append(topic, body, _DELTA if delta else _PUBLISH, client_name=client_name,
                           client_seq=client_seq, correlation_id=correlation_id,
                           sow_key=sow_key, expiration=expiration, headers=headers)
    queues = server.queuesvc
    if sow_topic is not None or server.router.match(topic) or (
            queues is not None and queues.covers(topic)) or server.actions.on_publish:
        # positional: (topic, body, bookmark, correlation_id, sow_key, expiration,
        # client_name, doc)
        msg = Message(topic, body, rec.bookmark_str if rec is not None else None,
                      correlation_id, sow_key, expiration, client_name, doc)
        # one message, one time: the live ``ts``, the SOW record's and the replay's agree
        stamp = msg.timestamp = rec.timestamp if rec is not None \
            else int(server.wallclock() * 1_000_000)
        if sow_topic is not None:
            store_publish(server.turn, sow_topic, msg, delta, rec.position if rec is not None else 0,
                          key, stamp / 1_000_000)
        fan_out(server, msg)
        if sow_topic is not None and server.derived is not None:
            server.derived.published(topic, msg)  # views and conflated topics over it
        if rec is not None and queues is not None:
            queues.on_publish(msg, rec)
        if server.actions.on_publish:
            server.actions.published(msg)
    else:
        server.stats["published"] += 1
    return rec.position if rec is not None else None


def _publish_acks(server: Broker, conn: Client, cmd: Command, seq: int | None,
                  position: int | None) -> None:
    acks = cmd.acks
    if "processed" in acks:
        conn.ack(cmd, "processed")
    if "persisted" in acks:
        if seq is None:
            conn.ack(cmd, "persisted")
        elif server.txlog is not None:
            server.txlog.wait_persisted(conn, seq, position)
        else:
            conn.note_persisted(seq)
    if "completed" in acks:
        conn.ack(cmd, "completed")
    if "stats" in acks:
        conn.ack(cmd, "stats")


# -- subscriptions -------------------------------------------------------------------------

def subscribe(server: Broker, conn: Client, cmd: Command) -> None:
    acks_early(conn, cmd)
    opts = cmd.opts
    if "resume" in opts:
        _resume(server, conn, cmd)
        return
    ids = cmd.sub_id or ""
    if "pause" in opts and "replace" not in opts and (ids in conn.subs or "," in ids):
        _pause(server, conn, cmd, ids)  # pausing running subscriptions: no topic needed
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
    existing = conn.subs.get(sub_id)
    if existing is not None and "replace" not in opts:
        raise CommandError(reasons.SUBID_IN_USE, sub_id)
    queue = server.queuesvc.get(topic) if server.queuesvc is not None else None
    if queue is not None and cmd.bookmark is None:
        _queue_subscription(server, conn, cmd, queue, sub_id, filt, existing)
        return
    if cmd.bookmark is None:
        register_subscription(server, conn, cmd, sub_id, filt,
                              delta=cmd.command == "delta_subscribe")
        acks_final(conn, cmd)
        return
    if queue is not None:
        topic = queue.underlying  # a bookmark subscription to a queue replays its topic(s)
    sub = Subscription(conn, sub_id, topic, filt, opts, delta=cmd.command == "delta_subscribe")
    cursor = replay.start(server, conn, cmd, sub)  # may refuse: nothing changed yet
    if existing is not None:
        server.remove_subscription(existing)
    conn.subs[sub_id] = sub
    sub.cursor = cursor
    server.txlog.cursors.add(cursor)
    if "processed" in cmd.acks:
        conn.ack(cmd, "processed")
    if "stats" in cmd.acks:
        conn.ack(cmd, "stats")
    replay.schedule(server, cursor)  # replay starts after the processed ack is queued


def _queue_subscription(server: Broker, conn: Client, cmd: Command, queue: Any,
                        sub_id: str, filt: Any, existing: Any) -> None:
    """Subscribe to a queue: deliveries come from the queue engine (leases, backlog)."""
    if existing is not None and existing.queue is not queue:
        server.remove_subscription(existing)
        existing = None
    sub = existing if existing is not None else Subscription(conn, sub_id, cmd.topic or "",
                                                               filt, cmd.opts)
    svc = server.queuesvc
    max_backlog = svc.requested_backlog(cmd)  # may refuse: nothing changed yet
    sub.filter = filt
    sub.options = cmd.opts
    conn.subs[sub_id] = sub
    acks = cmd.acks
    if "processed" in acks:
        # before the first deliveries; the granted backlog sizes the client's ack batches
        conn.ack(cmd, "processed",
                 opts=f"max_backlog={svc.granted_backlog(queue, max_backlog)}")
    svc.subscribe(queue, conn, sub, cmd, max_backlog)
    acks_final(conn, cmd, processed=False)


def _pause(server: Broker, conn: Client, cmd: Command, sub_ids: str) -> None:
    """``o=pause`` naming subscriptions that exist: stop their replay where it is (``resume``
    continues it). Only bookmark subscriptions without ``live`` can pause; ids this connection
    does not have are ignored, as for ``resume``."""
    cursors = []
    for sub_id in sub_ids.split(","):
        sub = conn.subs.get(sub_id.strip())
        if sub is None:
            continue
        if sub.cursor is None or sub.cursor.live:
            raise CommandError(reasons.INVALID_OPTIONS,
                               f"pause: {sub.sub_id} is not a bookmark subscription without live")
        cursors.append(sub.cursor)
    for cursor in cursors:
        cursor.paused = True
    acks_final(conn, cmd)


def _resume(server: Broker, conn: Client, cmd: Command) -> None:
    """``o=resume``: start delivering to subscriptions created with ``pause``."""
    for sub_id in (cmd.sub_id or "").split(","):
        sub = conn.subs.get(sub_id.strip())
        if sub is not None and sub.cursor is not None and sub.cursor.paused:
            sub.cursor.paused = False
            replay.schedule(server, sub.cursor)
    acks_final(conn, cmd)


def unsubscribe(server: Broker, conn: Client, cmd: Command) -> None:
    acks_early(conn, cmd)
    ids = (cmd.sub_id or "").split(",")
    if "all" in ids:
        targets = list(conn.subs)
    else:
        targets = [i.strip() for i in ids if i.strip()]
    for sub_id in targets:
        sub = conn.subs.pop(sub_id, None)
        if sub is not None:  # unknown ids (e.g. finished query ids) are ignored silently
            server.remove_subscription(sub)
    acks_final(conn, cmd)


HANDLERS: dict[str, Callable[[Broker, Client, Command], None]] = {
    "logon": logon,
    "heartbeat": heartbeat,
    "flush": flush,
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
