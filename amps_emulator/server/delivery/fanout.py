"""Live delivery of one message to every matching subscription (the fan-out).

The body is decoded at most once, and only if some subscription needs its content (a
filter, an OOF check, a delta). Each connection gets one frame per distinct frame shape,
whose ``sids`` lists all its subscriptions that take that shape: the plain message, the
message with a ``ts`` (``timestamp`` option), a delta (``delta_subscribe`` on a SOW topic),
or an ``oof`` (the update took a record out of an ``oof`` subscription's filter).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from amps_emulator.protocol.bookmarks import format_timestamp
from amps_emulator.protocol.codec import frame_raw, json_str
from amps_emulator.protocol.filter import MessageContext
from amps_emulator.protocol.msgtypes import CodecError
from amps_emulator.protocol.topics import TYPE_SEP, display_name, type_of
from amps_emulator.server.core.message import UNDECODED, Message, decode_or_none, encode_json
from amps_emulator.server.core.meters import count
from amps_emulator.server.core.router import Subscription
from amps_emulator.server.delivery.plan import Plan, fan_send
from amps_emulator.sow.delta import changed_fields
from amps_emulator.sow.query import apply_select

if TYPE_CHECKING:
    from amps_emulator.protocol.bodies import Bodies
    from amps_emulator.server.core.ports import DeliveryWatch
    from amps_emulator.server.core.processors import Processors
    from amps_emulator.server.core.router import ReadEntitlement, Router
    from amps_emulator.sow.query import Select


class FanoutHost(Protocol):
    """What delivering a message to the subscriptions that match it reads (:func:`fan_out`,
    :func:`send_oof`): the routing table, the counters, the wall clock (the broker)."""

    router: Router
    stats: dict[str, int]
    #: messages in and out per topic (:mod:`server.core.meters`)
    topics_in: dict[str, int]
    topics_out: dict[str, int]
    #: the server's codecs (typed topics are read and written with them)
    bodies: Bodies
    #: told of each publish delivered (``on-deliver-message``); None: nobody watches
    delivered: DeliveryWatch | None
    #: the bytes delivered are counted in ``processors.external``
    processors: Processors

    def wallclock(self) -> float: ...


class Receiver(Protocol):
    """A subscription's connection as the fan-out writes to it: the part of
    :class:`server.core.ports.Client` it uses."""

    subs: dict[str, Subscription]

    def send(self, data: bytes) -> None: ...

_Key = TypeVar("_Key")

PLAIN, STAMPED, DELTA, OOF, DELTA_STAMPED, OOF_ENTITLEMENT = 0, 1, 2, 3, 4, 5


def delivery_tail(bm: str | None, correlation_id: str | None, sow_key: str | None,
                  expiration: int | None, ts: str | None) -> bytes:
    """The rest of a ``p`` header after ``sids``: optional bm, x, k, e, ts, then ``}``."""
    parts = []
    if bm is not None:
        parts.append(b',"bm":' + json_str(bm))
    if correlation_id is not None:
        parts.append(b',"x":' + json_str(correlation_id))
    if sow_key is not None:
        parts.append(b',"k":' + json_str(sow_key))
    if expiration is not None:
        parts.append(b',"e":' + str(expiration).encode())
    if ts is not None:
        parts.append(b',"ts":' + json_str(ts))
    parts.append(b"}")
    return b"".join(parts)


def selected(body: bytes, sel: Any, doc: Any = UNDECODED,
             encode: Callable[[Any], bytes] = encode_json) -> bytes:
    """``body`` as a subscription with select list ``sel`` receives it (``None``: as is);
    ``doc``: the decoded body, if at hand (required for another type than JSON, with its
    ``encode``). A body that is not an object goes as is."""
    if sel is None:
        return body
    if doc is UNDECODED:
        doc = decode_or_none(body)
    if type(doc) is not dict:
        return body
    new = apply_select(doc, sel)
    if new is doc:
        return body
    try:
        return encode(new)
    except CodecError:  # the type cannot write the selection: the whole message
        return body


def oof_frame(topic: str, sids: str, sow_key: str, reason: str, body: bytes,
              bm: str | None = None) -> bytes:
    """An out-of-focus notification: the record left the subscription (``reason``)."""
    head = (b'{"c":"oof","t":' + json_str(display_name(topic)) + b',"sids":' + json_str(sids)
            + b',"k":' + json_str(sow_key) + b',"reason":' + json_str(reason))
    if bm:
        head += b',"bm":' + json_str(bm)
    return frame_raw(head + b"}", body)


_Targets = dict[tuple[Receiver, int, "Select | None"], list[str]]


def fan_out(broker: FanoutHost, msg: Message) -> int:
    """Deliver ``msg`` to every matching live subscription; returns frames queued.

    The subscriptions that take messages as they are go by the topic's delivery plan
    (:mod:`server.delivery.plan`: each distinct filter evaluated once, one frame per
    connection from the shared header and body); the others the general way."""
    broker.stats["published"] += 1
    topic = msg.topic
    counts = broker.topics_in
    if topic in counts:
        counts[topic] += 1
    else:
        count(counts, topic, 1)
    router = broker.router
    subs = router.match(topic)
    if not subs:
        return 0
    plan = router.plans.get(topic)
    if plan is None or plan.subs is not subs or plan.revision != Subscription.revision:
        plan = router.plans[topic] = Plan(subs, Subscription.revision)
    n = 0
    targets = None
    if plan.general:
        targets = _targets(broker, msg, plan.general)
        if targets:
            _write(broker, msg, targets)
            n = len(targets)
    if plan.filters:
        doc = msg.doc
        if doc is UNDECODED:
            doc = msg.doc = broker.bodies.decode(msg.body, msg.topic)
        ctx = msg.context()
        found = plan.targets(tuple([bool(f(doc, ctx)) for f in plan.filters]))
    else:
        found = plan.targets()
    if found:
        head, tail = _head_tail(broker, msg)
        # the bytes written (the external processor's matches), as _write counts them
        broker.processors.external.found_bytes += fan_send(found, head, tail, msg.body)
        n += len(found)
    if not n:
        return 0
    broker.stats["delivered"] += n
    count(broker.topics_out, topic, n)
    watch = broker.delivered
    if watch is not None:  # once per connection that got the message (not an oof)
        conns = [c for c, shape, _ in targets if shape not in (OOF, OOF_ENTITLEMENT)] \
            if targets else []
        conns.extend(conn for _, _, conn in found)
        for conn in dict.fromkeys(conns):
            watch(conn, topic, msg.body, msg.bookmark, msg.correlation_id)
    return n


def _head_tail(broker: FanoutHost, msg: Message) -> tuple[bytes, bytes]:
    """A ``p`` frame's header for ``msg`` up to its ``sids`` value, and after it."""
    topic = msg.topic
    if TYPE_SEP in topic:  # another type than json: its name on the wire
        topic = display_name(topic)
    return (b'{"c":"p","t":' + json_str(topic) + b',"sids":',
            delivery_tail(msg.bookmark, msg.correlation_id, msg.sow_key, msg.expiration, None))


def _targets(broker: FanoutHost, msg: Message, subs: Iterable[Subscription]) -> _Targets:
    """Which frame each matching subscription gets: (connection, frame shape, select list) ->
    the ids of the subscriptions that get that frame. Subscriptions that decide for themselves
    (a paginated window, aggregated groups, a conflated subscription) take the message here."""
    doc = msg.doc
    ctx = None
    previous = msg.previous_doc
    targets: _Targets = {}
    for sub in subs:
        sel = sub.select
        ent = sub.entitlement
        # security is configured (server.entitle); a paginated window or aggregated groups
        # of a literal topic have the read filter in theirs, and decide themselves
        if ent is not None and (sub.live is None or ent.regex):
            shape, sel = _entitled(broker.bodies, msg, sub, ent)
            if shape is not None:
                if shape >= 0:
                    _add(targets, (sub.conn, shape, sel), sub.sub_id)
                continue
            doc = msg.doc
        if sub.live is not None:  # a paginated window / aggregated groups decide
            if doc is UNDECODED:
                doc = msg.doc = broker.bodies.decode(msg.body, msg.topic)
            sub.live.published(msg)
            continue
        f = sub.filter
        if f is not None:
            if doc is UNDECODED:
                doc = msg.doc = broker.bodies.decode(msg.body, msg.topic)
            if ctx is None:
                ctx = msg.context()
            if not f(doc, ctx):
                if previous is not UNDECODED and previous is not None \
                        and "oof" in sub.options and f(previous, ctx):
                    if sub.conflator is not None:
                        sub.conflator.drop(msg.topic, msg.sow_key)
                    _add(targets, (sub.conn, OOF, sel), sub.sub_id)
                continue
        if sub.delta and msg.delta() is not None:
            shape = DELTA_STAMPED if "timestamp" in sub.options else DELTA
        elif "timestamp" in sub.options:
            shape = STAMPED
        else:
            shape = PLAIN
        if sub.conflator is not None:  # retained; the latest goes out at the interval's end
            if shape != DELTA:
                sub.conflator.hold(msg, None)
            elif not (msg.delta_empty and "no_empties" in sub.options):
                sub.conflator.hold(msg, msg.delta_body)
            continue
        _add(targets, (sub.conn, shape, sel), sub.sub_id)
    return targets


def _write(broker: FanoutHost, msg: Message, targets: _Targets) -> None:
    """One frame per target, in the shape chosen for it."""
    encode: Callable[[Any], bytes] = encode_json
    if TYPE_SEP in msg.topic:  # another type than json: its own writer
        encode = broker.bodies.encoder(msg.topic)
    head, tail = _head_tail(broker, msg)
    stamped_tail = None
    sent = 0  # bytes of the messages written (the external processor's matches)
    for (conn, shape, sel), ids in targets.items():
        sids = ids[0] if len(ids) == 1 else ",".join(ids)
        if shape == STAMPED or shape == DELTA_STAMPED:
            if stamped_tail is None:
                stamp = msg.timestamp  # the time the publish was processed, as SOW and replay
                stamped_tail = delivery_tail(msg.bookmark, msg.correlation_id, msg.sow_key,
                                             msg.expiration, format_timestamp(
                                                 int(broker.wallclock() * 1_000_000)
                                                 if stamp is None else stamp))
            frame_tail = stamped_tail
        else:
            frame_tail = tail
        if shape == PLAIN or shape == STAMPED:
            body = msg.body if sel is None else selected(msg.body, sel, msg.doc, encode)
            data = frame_raw(head + json_str(sids) + frame_tail, body)
            sent += len(data)
            conn.send(data)
        elif shape == DELTA or shape == DELTA_STAMPED:
            empty = msg.delta_empty
            delta = msg.delta_body
            body = msg.body if delta is None else delta  # (None: the whole message, see delta())
            if sel is not None:
                body = selected(body, sel, broker.bodies.decode(body, msg.topic), encode)
                # no_empties: only a change to a field the select list keeps counts
                empty = not apply_select(changed_fields(msg.previous_doc, msg.doc), sel)
            if empty:  # nothing but the key changed: no_empties subscriptions skip it
                ids = [i for i in ids if "no_empties" not in conn.subs[i].options]
                if not ids:
                    continue
                sids = ",".join(ids)
            data = frame_raw(head + json_str(sids) + frame_tail, body)
            sent += len(data)
            conn.send(data)
        elif shape == OOF:
            conn.send(oof_frame(msg.topic, sids, msg.sow_key or "", "match",
                                selected(msg.body, sel, msg.doc, encode), msg.bookmark))
        else:  # OOF_ENTITLEMENT: the message the reader was entitled to, the previous one
            previous = msg.previous_doc
            conn.send(oof_frame(msg.topic, sids, msg.sow_key or "", "entitlement",
                                selected(encode(previous), sel, previous, encode), msg.bookmark))
    broker.processors.external.found_bytes += sent


def _entitled(bodies: Bodies, msg: Message, sub: Subscription, ent: ReadEntitlement
              ) -> tuple[int | None, Select | None]:
    """What the read entitlement makes of ``msg`` for ``sub``, and the select list its delivery
    uses (a regex subscription's topics each have their own): None: deliver as usual; -1:
    nothing (an unentitled topic of a regex subscription, or a message its read filter
    hides); OOF_ENTITLEMENT: the update left the read filter (the previous message passed)."""
    grant = ent.grant(msg.topic)
    if grant is None:
        return -1, None  # a regex subscription skips the topics it may not read, silently
    sel = ent.select(grant, sub.select) if ent.regex else sub.select
    if grant.filter_text is None:
        return None, sel
    doc = msg.doc
    if doc is UNDECODED:
        doc = msg.doc = bodies.decode(msg.body, msg.topic)
    ctx = msg.context()
    if grant.admits(doc, ctx):
        return None, sel
    previous = msg.previous_doc
    if previous is not UNDECODED and previous is not None and "oof" in sub.options \
            and grant.admits(previous, ctx) and (sub.filter is None or sub.filter(previous, ctx)):
        if sub.conflator is not None:
            sub.conflator.drop(msg.topic, msg.sow_key)
        return OOF_ENTITLEMENT, sel
    return -1, sel


def _add(targets: dict[_Key, list[str]], key: _Key, sub_id: str) -> None:
    ids = targets.get(key)
    if ids is None:
        targets[key] = [sub_id]
    else:
        ids.append(sub_id)


def send_oof(broker: FanoutHost, topic: str, records: list[Any], reason: str) -> None:
    """OOF ``reason`` (deleted/expired) to every ``oof`` subscription that had each record."""
    encode: Callable[[Any], bytes] = encode_json
    if TYPE_SEP in topic and records:  # another type: the records are read by its codec
        mt = type_of(topic)
        bodies = broker.bodies
        encode = bodies.encoder(topic)
        for rec in records:
            rec.doc_by(lambda body: bodies.decode_typed(body, mt))
    subs = []
    for s in broker.router.match(topic):
        if s.live is not None:
            s.live.removed_many(records, reason)
        elif "oof" in s.options:
            subs.append(s)
    if not subs:
        return
    for rec in records:
        ctx = MessageContext(topic=display_name(topic), bookmark=rec.bookmark or None,
                             sow_key=rec.sow_key)
        targets: dict[tuple[Receiver, Select | None], list[str]] = {}
        for sub in subs:
            if sub.filter is None or sub.filter(rec.doc, ctx):
                if sub.conflator is not None:
                    sub.conflator.drop(topic, rec.sow_key)
                _add(targets, (sub.conn, sub.select), sub.sub_id)
        for (conn, sel), ids in targets.items():
            conn.send(oof_frame(topic, ",".join(ids), rec.sow_key, reason,
                                selected(rec.data, sel, rec.doc, encode), rec.bookmark or None))
