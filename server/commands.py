"""The dispatch table: one plain function per AMPS command, with the server as context.

Each handler gets ``(server, conn, cmd)``, does the work, and sends exactly the acks the
command asked for (``a``): ``received``/``parsed`` first, then ``processed``, then
``completed``/``stats``. A :class:`protocol.reasons.CommandError` raised here becomes a
failure ack with the AMPS reason string (see ``Server.dispatch``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

import msgspec

from protocol import reasons
from journal import RecordKind
from protocol.bookmarks import format_timestamp
from protocol.codec import frame_raw, json_str
from protocol.filter import FilterError, MessageContext, compile_filter
from protocol.reasons import CommandError
from server import replay
from server.replay import delivery_tail
from server.router import Subscription

if TYPE_CHECKING:
    from protocol.command import Command
    from server.app import Server
    from server.connection import Connection

log = logging.getLogger("amps_emulator.commands")

_decode_body = msgspec.json.decode
_UNDECODED = object()


def _early_acks(conn: "Connection", cmd: "Command") -> None:
    acks = cmd.acks
    if "received" in acks:
        conn.ack(cmd, "received")
    if "parsed" in acks:
        conn.ack(cmd, "parsed")


def _finish(conn: "Connection", cmd: "Command", **stats: Any) -> None:
    """Send processed, completed and stats acks, each only if requested."""
    acks = cmd.acks
    if "processed" in acks:
        conn.ack(cmd, "processed")
    if "completed" in acks:
        conn.ack(cmd, "completed", **stats)
    if "stats" in acks:
        conn.ack(cmd, "stats", **stats)


# -- logon / heartbeat / flush -------------------------------------------------------------

def logon(server: "Server", conn: "Connection", cmd: "Command") -> None:
    from server.app import SERVER_VERSION

    _early_acks(conn, cmd)
    if cmd.message_type and cmd.message_type != conn.listener.message_type:
        raise CommandError(reasons.INVALID_MESSAGE_TYPE, cmd.message_type)
    name = cmd.client_name or f"anonymous-{conn.conn_id}"
    previous = server.by_name.get(name)
    if previous is not None and previous is not conn:
        # AMPS treats a second logon with the same name as a reconnect: the older
        # connection is disconnected and the new one takes the name over.
        previous.close(f"{reasons.DISCONNECT_NAME_IN_USE}: taken over by {conn.peer}")
        server.connection_closed(previous)
    if conn.client_name is not None and conn.client_name != name:
        if server.by_name.get(conn.client_name) is conn:
            del server.by_name[conn.client_name]
    conn.client_name = name
    conn.user_id = cmd.user_id
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


def heartbeat(server: "Server", conn: "Connection", cmd: "Command") -> None:
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
    _early_acks(conn, cmd)
    _finish(conn, cmd)


def flush(server: "Server", conn: "Connection", cmd: "Command") -> None:
    _early_acks(conn, cmd)
    # Everything this client sent before the flush has been processed in order; pending
    # persisted acks go out before the flush's own ack.
    conn.emit_persisted()
    _finish(conn, cmd)


# -- publish ------------------------------------------------------------------------------

def publish(server: "Server", conn: "Connection", cmd: "Command") -> None:
    topic = cmd.topic
    if not topic:
        raise CommandError(reasons.INVALID_TOPIC, "publish without a topic")
    acks = cmd.acks
    if acks:
        _early_acks(conn, cmd)
    seq = cmd.seq
    txlog = server.txlog
    if seq is not None and conn.client_name is not None:
        last = server.client_seqs.get(conn.client_name)
        if last is not None and seq <= last:
            # A republished message from a publish store: drop it, but still ack it.
            _publish_acks(server, conn, cmd, seq, None)
            return
        server.client_seqs[conn.client_name] = seq
    position = None
    bookmark = None
    if txlog is not None and txlog.recorded(topic):
        if txlog.failed is not None:
            if seq is not None and "persisted" in acks:
                conn.persisted_failure(seq, txlog.failed)  # the client's failed-write handler
                return
            raise CommandError(txlog.failed, "the transaction log cannot be written")
        kind = RecordKind.DELTA_PUBLISH if cmd.command == "delta_publish" else RecordKind.PUBLISH
        rec = txlog.append(conn, cmd, kind)
        position = rec.position
        bookmark = rec.bookmark_str
    fan_out(server, topic, cmd.body, conn, cmd, bookmark)
    if acks:
        _publish_acks(server, conn, cmd, seq, position)


def _publish_acks(server: "Server", conn: "Connection", cmd: "Command", seq: int | None,
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


def fan_out(server: "Server", topic: str, body: bytes, publisher: "Connection | None",
            cmd: "Command | None", bookmark: str | None = None) -> int:
    """Deliver one message to every matching live subscription; returns frames sent.

    The body is decoded at most once, and only if some subscription has a filter. Each
    connection gets one frame whose ``sids`` lists all its matching subscriptions (split
    in two when some of them asked for the ``timestamp`` option).
    """
    server.stats["published"] += 1
    subs = server.router.match(topic)
    if not subs:
        return 0
    doc: Any = _UNDECODED
    ctx = None
    targets: dict[Any, list[str]] = {}
    for sub in subs:
        f = sub.filter
        if f is not None:
            if doc is _UNDECODED:
                doc = _decode_or_none(body)
                ctx = MessageContext(
                    topic=topic,
                    bookmark=bookmark,
                    sow_key=cmd.sow_key if cmd is not None else None,
                    correlation_id=cmd.correlation_id if cmd is not None else None,
                    client_name=publisher.client_name if publisher is not None else None,
                )
            if not f(doc, ctx):
                continue
        key = sub.conn if "timestamp" not in sub.options else (sub.conn, "ts")
        ids = targets.get(key)
        if ids is None:
            targets[key] = [sub.sub_id]
        else:
            ids.append(sub.sub_id)
    if not targets:
        return 0
    head = b'{"c":"p","t":' + json_str(topic) + b',"sids":'
    x = k = e = None
    if cmd is not None:
        x, k, e = cmd.correlation_id, cmd.sow_key, cmd.expiration
    tail = delivery_tail(bookmark, x, k, e, None)
    for key, ids in targets.items():
        sids = json_str(ids[0] if len(ids) == 1 else ",".join(ids))
        if key.__class__ is tuple:
            ts = format_timestamp(int(server.wallclock() * 1_000_000))
            key[0].send(frame_raw(head + sids + delivery_tail(bookmark, x, k, e, ts), body))
        else:
            key.send(frame_raw(head + sids + tail, body))
    server.stats["delivered"] += len(targets)
    return len(targets)


def _decode_or_none(body: bytes) -> Any:
    try:
        return _decode_body(body)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None


# -- subscriptions -------------------------------------------------------------------------

def _compile(filter_text: str | None) -> Callable[..., bool] | None:
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


def subscribe(server: "Server", conn: "Connection", cmd: "Command") -> None:
    _early_acks(conn, cmd)
    opts = cmd.opts
    if "resume" in opts:
        _resume(server, conn, cmd)
        return
    topic = cmd.topic
    if not topic:
        raise CommandError(reasons.INVALID_TOPIC, "subscribe without a topic")
    sub_id = cmd.sub_id or cmd.cid
    if not sub_id:
        raise CommandError(reasons.INVALID_SUBID, "subscribe needs a sub_id or cid")
    if cmd.sub_id is None:
        cmd.sub_id = sub_id
    filt = _compile(cmd.filter)
    existing = conn.subs.get(sub_id)
    if existing is not None and "replace" not in opts:
        raise CommandError(reasons.SUBID_IN_USE, sub_id)
    sub = Subscription(conn, sub_id, topic, filt, opts, delta=cmd.command == "delta_subscribe")
    cursor = None
    if cmd.bookmark is not None:
        cursor = replay.start(server, conn, cmd, sub)  # may refuse: nothing changed yet
    if existing is not None:
        server.remove_subscription(existing)
    conn.subs[sub_id] = sub
    if cursor is None:
        server.router.add(sub)
        _finish(conn, cmd)
        return
    sub.cursor = cursor
    server.txlog.cursors.add(cursor)
    acks = cmd.acks
    if "processed" in acks:
        conn.ack(cmd, "processed")
    if "stats" in acks:
        conn.ack(cmd, "stats")
    replay.schedule(server, cursor)  # replay starts after the processed ack is queued


def _resume(server: "Server", conn: "Connection", cmd: "Command") -> None:
    """``o=resume``: start delivering to subscriptions created with ``pause``."""
    for sub_id in (cmd.sub_id or "").split(","):
        sub = conn.subs.get(sub_id.strip())
        if sub is not None and sub.cursor is not None and sub.cursor.paused:
            sub.cursor.paused = False
            replay.schedule(server, sub.cursor)
    _finish(conn, cmd)


def unsubscribe(server: "Server", conn: "Connection", cmd: "Command") -> None:
    _early_acks(conn, cmd)
    ids = (cmd.sub_id or "").split(",")
    if "all" in ids:
        targets = list(conn.subs)
    else:
        targets = [i.strip() for i in ids if i.strip()]
    for sub_id in targets:
        sub = conn.subs.pop(sub_id, None)
        if sub is not None:  # unknown ids (e.g. finished query ids) are ignored silently
            server.remove_subscription(sub)
    _finish(conn, cmd)


# -- SOW commands on topics without a SOW ------------------------------------------------------

def sow_without_store(server: "Server", conn: "Connection", cmd: "Command") -> None:
    """``sow``, ``sow_and_subscribe`` and ``sow_delete`` when no SOW topic covers ``t``."""
    _early_acks(conn, cmd)
    if not cmd.topic:
        raise CommandError(reasons.INVALID_TOPIC, f"{cmd.command} without a topic")
    if cmd.filter:
        _compile(cmd.filter)  # a bad filter is reported as such, as AMPS does
    raise CommandError(reasons.INVALID_TOPIC, f"{cmd.topic!r} is not a SOW topic")


HANDLERS: dict[str, Callable[["Server", "Connection", "Command"], None]] = {
    "logon": logon,
    "heartbeat": heartbeat,
    "flush": flush,
    "publish": publish,
    "delta_publish": publish,
    "subscribe": subscribe,
    "delta_subscribe": subscribe,
    "unsubscribe": unsubscribe,
    "sow": sow_without_store,
    "sow_and_subscribe": sow_without_store,
    "sow_and_delta_subscribe": sow_without_store,
    "sow_delete": sow_without_store,
}
