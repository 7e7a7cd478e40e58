"""Emulator state reset and inspection, for ``/emulator/...`` (what a test fixture calls).

Reset is safe while clients are connected; each client gets what AMPS would send it:

* **everything**: every client is disconnected (its subscriptions, leases and bookmark
  replays refer to state that is gone), then every SOW topic is emptied, every queue starts
  empty, and the transaction log starts over (its files are removed), so publish sequence
  numbers and bookmarks start afresh too. Views and conflated topics are rebuilt (empty).
* **one SOW topic**: its records are deleted as a ``sow_delete`` with ``1=1`` would delete
  them (journalled when the topic is recorded; ``oof`` subscribers get OOF ``deleted``).
* **one queue**: clients subscribed to it are disconnected (their leases are gone) and the
  queue starts empty at the journal's current end.
* **one client**: it is disconnected and its publish sequence is forgotten.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

from amps_emulator.protocol import bodyview
from amps_emulator.protocol.topics import display_name, qualify, type_of
from amps_emulator.server.ops.stats import client_id

if TYPE_CHECKING:
    from amps_emulator.protocol.msgtypes import MessageTypeRegistry
    from amps_emulator.server.app import Server

log = logging.getLogger("amps_emulator.admin")

REASON = "reset by the emulator's admin interface"


def _disconnect(server: Server, conns: list[Any]) -> int:
    for conn in conns:
        conn.flush_output()
        conn.close(REASON)
        server.closed(conn)  # state goes now, not when the socket reports it
    return len(conns)


def find_client(server: Server, ident: str) -> Any:
    for conn in server.connections:
        if ident in (client_id(conn), str(conn.conn_id)):
            return conn
    return None


async def reset_all(server: Server) -> dict:
    n = _disconnect(server, sorted(server.connections, key=lambda c: c.conn_id))
    if server.broker.security is not None:
        server.broker.security.reload()  # permission documents are read again at the next logon
    server.broker.client_seqs.clear()
    records = 0
    tx = server.txlog
    if tx is not None and tx.is_open:
        await tx.idle()
        tx.reopen_empty()
    if server.sow_service is not None:
        if server.derived is not None:
            server.derived.close()
        for topic in server.sow_service.sow.topics.values():
            records += topic.count()
            topic.clear()
        server.sow_service.sow.commit()
    if server.queue_service is not None:
        from amps_emulator.queues import QueueEngine

        svc = server.queue_service
        for q in svc.queues.values():
            q.engine = QueueEngine(q.spec)
            q.subs.clear()
            if q.ownership is not None:
                q.ownership.restore({})  # no messages, so none owned elsewhere
        svc._cache.clear()
        svc._ckpt_pending = None
        svc._ckpt_written = {}
    if server.derived is not None:  # rebuilt over the emptied topics and queues
        from amps_emulator.server.services.views import DerivedTopics

        derived = DerivedTopics(server.broker, server.config, server.queue_service)
        derived.start()
        server.replace_derived(derived)
    server.turn.request()
    return {"reset": "all", "clients_disconnected": n, "records_deleted": records}


def reset_topic(server: Server, name: str) -> dict:
    from amps_emulator.server.messaging.message_path import delete_records

    return {"reset": "topic", "topic": name,
            "records_deleted": delete_records(server.broker, name, "1=1")}


def reset_queue(server: Server, name: str) -> dict:
    from amps_emulator.queues import QueueEngine

    svc = server.queue_service
    q = svc.get(name) if svc is not None else None
    if svc is None or q is None:
        raise LookupError(f"no queue {name!r}")
    holders = sorted({sub.conn for sub in q.subs.values()}, key=lambda c: c.conn_id)
    n = _disconnect(server, holders)
    depth = q.engine.depth
    q.engine = QueueEngine(q.spec, low_water_position=svc.txlog.journal.last_position)
    q.subs.clear()
    if q.ownership is not None:
        q.ownership.restore({})
    if svc.watch is not None:
        svc.watch(q, [], None)  # the views over it: every message gone
    server.turn.request()
    return {"reset": "queue", "queue": name, "messages_removed": depth, "clients_disconnected": n}


def reset_client(server: Server, ident: str) -> dict:
    conn = find_client(server, ident)
    if conn is None:
        raise LookupError(f"no client {ident!r}")
    name = conn.client_name
    _disconnect(server, [conn])
    if name is not None:
        server.broker.client_seqs.pop(name, None)
    return {"reset": "client", "client": ident, "clients_disconnected": 1}


# -- inspection -----------------------------------------------------------------------------
def _body(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return data.decode("utf-8", "replace")


def _record_body(data: bytes, message_type: str, registry: MessageTypeRegistry) -> dict[str, Any]:
    """How the inspection API shows a stored body: JSON as its value; another type as its
    fields (the value, when the type has none) and its readable text (protocol.bodyview)."""
    if message_type == "json":
        return {"data": _body(data)}
    text = bodyview.readable_text(data, message_type, registry)
    tree = bodyview.fields(data, message_type, registry)
    return {"data": tree if tree is not None else text, "body": text}


async def sow_records(server: Server, name: str, filter_text: str | None = None,
                      order_by: str | None = None, top_n: int | None = None,
                      message_type: str | None = None) -> dict:
    """A SOW query for inspection; a large one runs in steps, as clients' queries do, so
    the message path keeps going while it reads. ``name`` is a topic name with its
    ``message_type`` (default json), or a topic key (``protocol.topics.qualify``)."""
    if message_type is not None:
        name = qualify(name, message_type)
    mt = type_of(name)
    topic = server.sow_service.get(name) if server.sow_service is not None else None
    if topic is None:
        raise LookupError(f"{name!r} is not a SOW topic")
    from amps_emulator.server.messaging.registration import compile_filter_for

    steps = topic.query_steps(compile_filter_for(filter_text), order_by=order_by or None,
                              top_n=top_n)
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            res = stop.value
            break
        await asyncio.sleep(0)
    return {"topic": display_name(name), "message_type": mt, "count": len(res.records),
            "topic_matches": res.topic_matches,
            "records": [{"sow_key": r.sow_key, "bookmark": r.bookmark or "",
                         "expiration": r.expiration,
                         **_record_body(r.data, mt, server.broker.bodies.registry)}
                        for r in res.records]}


def queue_contents(server: Server, name: str) -> dict:
    svc = server.queue_service
    q = svc.get(name) if svc is not None else None
    if svc is None or q is None:
        raise LookupError(f"no queue {name!r}")
    conns = {c.conn_id: c for c in server.connections}
    own = q.ownership  # a replicated queue: the owner of each message
    out = []
    for m in q.engine.messages(include_leased=True):
        rec = svc._record(m.position)
        holder = conns.get(m.sub_key[0]) if m.sub_key is not None else None
        out.append({
            "bookmark": m.bookmark, "position": m.position, "state": m.state,
            "leased_to": client_id(holder) if holder is not None else None,
            "sub_id": m.sub_key[1] if m.sub_key is not None else None,
            "delivery_count": m.delivery_count, "cancel_count": m.cancel_count,
            "expiration": m.expiration, "priority": m.priority,
            "data": _body(rec.body) if rec is not None else None,
            "owner": own.owner(m.position) if own is not None else server.broker.instance_name,
            "locally_owned": own is None or own.owns(m.position),
        })
    e = q.engine
    return {"queue": name, "depth": e.depth, "leased": e.leased_count,
            "available": e.available_count, "inactive": e.inactive_count, "messages": out}


def journal_range(server: Server, start: str | None = None, end: str | None = None,
                  since: float | None = None, until: float | None = None,
                  topic: str | None = None, limit: int = 1000) -> dict:
    """Records from bookmark ``start`` (exclusive, as a bookmark subscription) or time
    ``since`` (epoch seconds), to bookmark ``end`` (inclusive) or time ``until``."""
    tx = server.txlog
    if tx is None or not tx.is_open:
        raise LookupError("no transaction log is configured")
    j = tx.journal
    first = j.first_position
    if start:
        p = j.position_after_bookmark(start)
        if p is None:
            raise LookupError(f"bookmark {start!r} is not in the transaction log")
        first = p
    elif since is not None:
        first = j.position_at_time(round(since * 1_000_000))
    out = []
    for rec in j.read(first):
        if until is not None and rec.timestamp > round(until * 1_000_000):
            break
        if topic is None or rec.topic == topic:
            mt = rec.message_type or "json"
            out.append({"bookmark": rec.bookmark_str, "position": rec.position,
                        "kind": int(rec.kind), "topic": rec.topic, "message_type": mt,
                        "timestamp": rec.timestamp / 1_000_000, "client_name": rec.client_name,
                        "sow_key": rec.sow_key, **_record_body(rec.body, mt, server.broker.bodies.registry)})
        if end and rec.bookmark_str == end or len(out) >= limit:
            break
    return {"first_position": j.first_position, "last_position": j.last_position,
            "records": out}


def subscriptions(server: Server) -> dict:
    from amps_emulator.server.ops.stats import _sub_text

    out: dict[str, list] = {}
    for conn in sorted(server.connections, key=lambda c: c.conn_id):
        out[client_id(conn)] = [
            {"sub_id": sid, "topic": s.topic, "filter": _sub_text(s, "filter"),
             "options": _sub_text(s, "options"),
             "kind": "bookmark" if s.cursor is not None else "queue" if s.queue is not None
             else "subscribe"}
            for sid, s in conn.subs.items()]
    return {"clients": out}
