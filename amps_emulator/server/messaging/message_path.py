"""The message path: the one way a message gets into the server, and records out of a SOW.

:func:`publish_message` is everything a publish does, for clients (``handlers.publish``) and
for actions alike: journal it, store it in its SOW topic (:func:`store_publish`), fan it out,
and tell the observers. :func:`delete_records` and :func:`removed` are the other direction:
records leave a SOW topic (a ``sow_delete``, an action, an expiry) and the subscriptions and
the observers hear of it.

A keyed publish to a SOW topic that nobody reads (no subscription to the topic, no observer)
takes the short way: the topic stores it with ``Topic.upsert_run`` and no :class:`Message`
is built (:func:`_deliver`); whatever reads a message (a subscriber, a view, a queue, an
action) or needs more than the record (a delta_publish, an expiration, a History, another
message type) takes the general way, :func:`store_publish`.

A SOW topic with ``Preprocessing`` or ``Enrichment`` (:mod:`sow.enrichment`) rewrites the
message here, before it is journalled: the journal, the SOW, replication and every reader see
the enriched message, and a record coming back from the journal or over replication
(:func:`apply_replicated`) is not enriched again. Its publishes never take the short way of
runs (:mod:`server.messaging.publish_runs` leaves them to :func:`publish_message`).

The observers are the consumers of the path that are not subscriptions: the views and
conflated topics, the queues, the actions. Each satisfies
:class:`server.core.ports.PublishObserver` and the root registers it on the broker
(:func:`register`); this module never names them. The broker keeps
them in a tuple: with none registered the path costs one truth test of an empty tuple.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from amps_emulator.journal import JournalRecord, RecordKind
from amps_emulator.journal.identity import origin_timestamp
from amps_emulator.journal.record import bookmark_strs
from amps_emulator.protocol import reasons
from amps_emulator.protocol.bodies import decode_json
from amps_emulator.protocol.codec import LARGE_FRAME
from amps_emulator.protocol.filter import MessageContext
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.protocol.topics import TYPE_SEP, display_name
from amps_emulator.server.core.message import UNDECODED, Message
from amps_emulator.server.core.meters import count
from amps_emulator.server.delivery.fanout import fan_out, send_oof
from amps_emulator.server.messaging.registration import compile_filter_for
from amps_emulator.sow.query import DeleteResult
from amps_emulator.sow.recovery import apply_record

if TYPE_CHECKING:
    from amps_emulator.server.core.ports import Client, PublishObserver, Turn
    from amps_emulator.server.messaging.broker import Broker
    from amps_emulator.sow import Record, Topic
    from amps_emulator.sow.enrichment import Enrichment

_PUBLISH = int(RecordKind.PUBLISH)
_DELTA = int(RecordKind.DELTA_PUBLISH)


# -- the observers -------------------------------------------------------------------------

def register(broker: Broker, observer: PublishObserver) -> None:
    """``observer`` hears of every publish and removal from now on, after those registered
    before it."""
    broker.observers = (*broker.observers, observer)


def replace(broker: Broker, old: PublishObserver, new: PublishObserver) -> None:
    """``new`` takes ``old``'s place (and turn) among the observers (a reset rebuilds the views)."""
    broker.observers = tuple(new if lst is old else lst for lst in broker.observers)


def check_writable(broker: Broker, topic: str) -> None:
    """Raise ``CommandError`` when a observer owns ``topic`` (a view's own SOW topic)."""
    for observer in broker.observers:
        observer.check_writable(topic)


# -- in ------------------------------------------------------------------------------------

#: a body larger than this is published in stages, each in a loop pass of its own (see
#: ``handlers.publish``): the decode of a 32 MiB body alone holds the loop for tens of ms.
#: The connection's decoder hands a frame larger than it apart (``codec.SplitPayload``),
#: which the runs of plain publishes (:mod:`.publish_runs`) leave to ``handlers.publish``
LARGE_BODY = LARGE_FRAME


def decode_ahead(broker: Broker, topic: str, body: bytes) -> object:
    """The document :func:`publish_message` reads of ``body`` published to ``topic`` (a SOW
    topic's), decoded ahead of it; ``UNDECODED`` when it reads none."""
    sow = broker.sow_service
    if sow is None or sow.get(topic) is None:
        return UNDECODED
    return decode_json(body) if TYPE_SEP not in topic else broker.bodies.decode(body, topic)


def prepare_ahead(broker: Broker, topic: str, body: bytes, doc: object, client_name: str,
                  client_seq: int | None) -> bool:
    """For a large body decoded ahead (``doc``) whose publish is a keyed upsert that nobody
    reads, build its SOW value ahead, in a loop pass before the publish's (see
    ``Topic.prepare_value``), for the bookmark its journal record will probably get; the
    store builds it anew if that guess (its length) turns out wrong. Whether it built one
    (the caller drops it, ``Topic.drop_prepared``, if the publish did not store it)."""
    sow = broker.sow_service
    sow_topic = sow.get(topic) if sow is not None else None
    if doc is UNDECODED or sow_topic is None or not sow_topic.values_ahead \
            or not _unread(broker, sow_topic, topic):
        return False
    txlog = broker.txlog
    bookmark = ""
    if txlog is not None and txlog.recorded(topic) and txlog.is_open:
        journal = txlog.journal
        seq = journal.next_position if client_seq is None else client_seq
        bookmark = f"{journal.publisher_id(client_name)}|{seq}|"
    sow_topic.prepare_value(body, bookmark)
    return True


def publish_message(broker: Broker, topic: str, body: bytes, delta: bool = False,
                    client_name: str = "", client_seq: int | None = None,
                    correlation_id: str | None = None, sow_key: str | None = None,
                    expiration: int | None = None,
                    headers: dict[str, str] | None = None, client: Client | None = None,
                    doc: object = UNDECODED) -> int | None:
    """Everything a publish does, for clients and for actions alike: enrich it (a SOW topic
    with Preprocessing or Enrichment), journal it (when the topic is recorded), store it in
    its SOW topic, fan it out, then tell the observers (the views over the topic, the queues
    over it, the on-publish actions). ``client``: the publisher's connection, for the
    enrichment fields that read it (USER(), ...). Returns the journal position (None: not
    recorded). Raises ``bad sow key`` (or ``sow store failed``: an enriched message its type
    cannot write) before anything happened. ``doc``: the body's document when
    :func:`decode_ahead` read it already."""
    sow = broker.sow_service
    sow_topic = sow.get(topic) if sow is not None else None
    key = None
    if sow_topic is not None:
        if doc is UNDECODED:
            doc = decode_json(body) if TYPE_SEP not in topic \
                else broker.bodies.decode(body, topic)
        rules = sow_topic.enrichment
        if rules is None:
            key = sow_topic.key_for(doc, sow_key)  # refuse a message without its SowKey up front
        else:
            ctx = _context(broker, topic, body, client_name, correlation_id, client) \
                if rules.uses_context else None
            body, doc, key = _enrich(sow_topic, rules, body, doc, sow_key, ctx)
    txlog = broker.txlog
    rec = None
    if txlog is not None and txlog.recorded(topic):
        rec = txlog.append(topic, body, _DELTA if delta else _PUBLISH, client_name=client_name,
                           client_seq=client_seq, correlation_id=correlation_id,
                           sow_key=sow_key, expiration=expiration, headers=headers)
    _deliver(broker, topic, body, delta, rec, client_name, correlation_id, sow_key, expiration,
             sow_topic, doc, key)
    return rec.position if rec is not None else None


def _enrich(sow_topic: Topic, rules: Enrichment, body: bytes, doc: object, sow_key: str | None,
            ctx: MessageContext | None) -> tuple[bytes, object, str]:
    """Preprocess ``body``, compute its SowKey, enrich it (``rules``, the topic's
    :class:`sow.enrichment.Enrichment`): the body, document and SowKey to journal and store."""
    body, doc = rules.preprocess(body, doc, ctx)
    key = sow_topic.key_for(doc, sow_key)  # the Key may be a preprocessed field
    if rules.post is not None:
        if ctx is not None:
            ctx.sow_key = key
        previous = sow_topic.previous_doc(key) if rules.reads_previous else None
        body, doc = rules.enrich(body, doc, previous, ctx)
    return body, doc, key


def _context(broker: Broker, topic: str, body: bytes, client_name: str,
             correlation_id: str | None, client: Client | None) -> MessageContext:
    """What the functions of an enrichment field read of the message and its publisher."""
    ctx = MessageContext(topic=display_name(topic), correlation_id=correlation_id,
                         client_name=client_name or None, timestamp=broker.wallclock(),
                         message_size=len(body), instance_name=broker.instance_name,
                         group_name=broker.group_name, lookup=broker.value_lookup)
    if client is not None:
        ctx.user = client.user_id
        ctx.remote_address = client.peer
        ctx.client_version = client.client_version
    return ctx


def publish_plain(broker: Broker, topic: str, deliver: bool, client_name: str,
                  bodies: list[bytes], client_seqs: list[int] | None,
                  sow_topic: Topic | None = None,
                  keyed: list[tuple[object, str]] | None = None) -> list[JournalRecord] | None:
    """:func:`publish_message` for a run of plain publishes of one client to one topic
    (:mod:`server.messaging.publish_runs` decided so): journalled with one call when the topic is
    recorded, then stored, fanned out and told to the observers one by one when ``deliver``
    (a SOW topic, ``sow_topic``, with each body's (document, SowKey) in ``keyed``; or
    anything subscribing to or listening on the topic), else only counted. Returns their
    journal records (None: not recorded). Raises :class:`RunRefused`, with nothing done, when
    the log cannot take a run now: the caller publishes them one by one."""
    txlog = broker.txlog
    recs = None
    if txlog is not None and txlog.recorded(topic):
        recs = txlog.append_publishes(topic, client_name, bodies, client_seqs)
        if recs is None:
            raise RunRefused
    if not deliver:
        broker.stats["published"] += len(bodies)
        count(broker.topics_in, topic, len(bodies))
    elif keyed is None:
        for i, body in enumerate(bodies):
            _deliver(broker, topic, body, False, None if recs is None else recs[i], client_name,
                     None, None, None, None, UNDECODED, None)
    elif sow_topic is not None and _unread(broker, sow_topic, topic):
        _upsert_unread(broker, topic, sow_topic, bodies, keyed, recs)  # _deliver's short way, per run
    else:
        for i, body in enumerate(bodies):
            doc, key = keyed[i]
            _deliver(broker, topic, body, False, None if recs is None else recs[i], client_name,
                     None, None, None, sow_topic, doc, key)
    return recs


def _unread(broker: Broker, sow_topic: Topic, topic: str) -> bool:
    """Whether a keyed publish to ``sow_topic`` can take the short way: nobody reads it (no
    subscription, no observer) and the topic stores plain upserts."""
    return sow_topic.plain_upserts and not broker.observers and not broker.router.match(topic)


def _upsert_unread(broker: Broker, topic: str, sow_topic: Topic, bodies: list[bytes],
                   keyed: list[tuple[object, str]], recs: list[JournalRecord] | None,
                   since: float | None = None) -> None:
    """Store keyed publishes that nobody reads (:func:`_unread`: true for a whole run, which
    nothing can subscribe in the middle of) with ``Topic.upsert_run``. ``since``: the
    instant their lifetime counts from (None: now)."""
    broker.turn.request()  # the SOW commits at the end of this turn
    n = len(bodies)
    if recs is not None:
        sow_topic.upsert_run(keyed, bodies, bookmark_strs(recs),
                             [r.position for r in recs],
                             [r.timestamp / 1_000_000 for r in recs], since)
    else:
        now = int(broker.wallclock() * 1_000_000) / 1_000_000
        sow_topic.upsert_run(keyed, bodies, [""] * n, [0] * n, [now] * n, since)
    broker.stats["published"] += n
    count(broker.topics_in, topic, n)


class RunRefused(Exception):
    """The transaction log cannot take a run of publishes now (it refuses writes, or a write
    failed and is not yet reported): nothing was done; publish them one by one, which reports
    the failure as a single publish does."""


def apply_replicated(broker: Broker, rec: JournalRecord) -> None:
    """A record an upstream instance replicated, already in the journal with its original
    bookmark and time (``Journal.append_replicated``): applied like a local publish, delta
    publish or sow_delete (SOW, subscribers, observers), acking no client. The record's
    topic is (type, name): its key. Its body is already enriched (by the instance that
    took the publish): it is stored as it is."""
    _seen_publisher(broker.client_seqs, rec)
    sow = broker.sow_service
    topic = rec.key
    sow_topic = sow.get(topic) if sow is not None else None
    if rec.kind == RecordKind.SOW_DELETE:
        if sow_topic is not None:
            broker.turn.request()
            result = apply_record(sow_topic, rec)
            if isinstance(result, DeleteResult):
                removed(broker, topic, result.records, reasons.OOF_DELETED)
        return
    doc = UNDECODED
    key = None
    if sow_topic is not None:
        doc = broker.bodies.decode(rec.body, topic)
        key = sow_topic.key_for(doc, rec.sow_key)
    # its expiration counts from when it was first logged, at its origin (not reset on arrival)
    _deliver(broker, topic, rec.body, rec.kind == _DELTA, rec, rec.client_name,
             rec.correlation_id, rec.sow_key, rec.expiration, sow_topic, doc, key,
             origin_timestamp(rec) / 1_000_000)


def _seen_publisher(seqs: dict[str, int], rec: JournalRecord) -> None:
    if rec.client_seq is not None and rec.client_seq > seqs.get(rec.client_name, rec.client_seq):
        # its publisher's stale copy on a connection here is a duplicate from now on
        seqs[rec.client_name] = rec.client_seq


def apply_replicated_run(broker: Broker, recs: list[JournalRecord],
                         each: Callable[[JournalRecord], None]) -> None:
    """:func:`apply_replicated` for the records of one replicated batch, in order. A run of
    publishes to one topic that nothing stores, subscribes to or observes is counted with one
    look at the topic (nothing can subscribe in the middle of the batch); the rest go one by
    one to ``each`` (the caller's :func:`apply_replicated`, which handles its failures)."""
    seqs = broker.client_seqs
    sow = broker.sow_service
    observers = broker.observers
    i, n = 0, len(recs)
    while i < n:
        rec = recs[i]
        j = i + 1
        if rec.kind == _PUBLISH:
            topic, mt = rec.topic, rec.message_type
            while j < n and recs[j].kind == _PUBLISH and recs[j].topic == topic \
                    and recs[j].message_type == mt:
                j += 1
            key = rec.key
            if (sow is None or sow.get(key) is None) and not broker.router.match(key) \
                    and not (observers and _covered(observers, key)):
                if seqs:
                    for r in recs[i:j]:
                        _seen_publisher(seqs, r)
                broker.stats["published"] += j - i
                count(broker.topics_in, key, j - i)
                i = j
                continue
        for r in recs[i:j]:
            each(r)
        i = j


def _deliver(broker: Broker, topic: str, body: bytes, delta: bool, rec: JournalRecord | None,
             client_name: str, correlation_id: str | None, sow_key: str | None,
             expiration: int | None, sow_topic: Topic | None, doc: object, key: str | None,
             since: float | None = None) -> None:
    """Store a (journalled) message in its SOW topic, fan it out, tell the observers.
    ``since``: the instant its SOW lifetime counts from (None: now)."""
    observers = broker.observers
    if sow_topic is not None and key is not None and expiration is None and not delta \
            and _unread(broker, sow_topic, topic):
        # the keyed upsert nobody reads (no subscriber, no observer): stored, no Message
        _upsert_unread(broker, topic, sow_topic, [body], [(doc, key)], None if rec is None else [rec],
                       since)
        return
    if sow_topic is not None or broker.router.match(topic) or (
            observers and _covered(observers, topic)):
        # positional: (topic, body, bookmark, correlation_id, sow_key, expiration,
        # client_name, doc)
        msg = Message(topic, body, rec.bookmark_str if rec is not None else None,
                      correlation_id, sow_key, expiration, client_name, doc)
        # one message, one time: the live ``ts``, the SOW record's and the replay's agree
        stamp = msg.timestamp = rec.timestamp if rec is not None \
            else int(broker.wallclock() * 1_000_000)
        if sow_topic is not None:
            store_publish(broker.turn, sow_topic, msg, delta,
                          rec.position if rec is not None else 0, key, stamp / 1_000_000, since)
        fan_out(broker, msg)
        for observer in observers:
            observer.message_published(msg, rec)
    else:
        broker.stats["published"] += 1
        count(broker.topics_in, topic, 1)


def _covered(observers: tuple[PublishObserver, ...], topic: str) -> bool:
    return any(observer.covers(topic) for observer in observers)


def store_publish(turn: Turn, topic: Topic, msg: Message, delta: bool,
                  position: int, key: str | None = None, stamp: float | None = None,
                  since: float | None = None) -> None:
    """Upsert (or merge, for delta_publish) a published message into its SOW topic and
    prepare ``msg`` for the fan-out: the stored body, its SowKey, the record it replaced (for
    OOF ``match``) and, for delta subscribers, what changed. ``stamp``: the time the
    transaction log recorded the message (the record's timestamp; default now). Client
    publishes, actions and views (``views.DerivedTopics.store``) all store through it; it
    needs only the turn (the SOW commits at its end). ``since``: the instant the record's
    lifetime (its expiration) counts from; None: now (a replicated record: its origin's time)."""
    doc = msg.doc if msg.doc is not UNDECODED else topic.decode_body(msg.body)
    turn.request()  # the SOW commits at the end of this turn
    if delta or key is None:
        fn = topic.delta_publish if delta else topic.publish
        result = fn(msg.body, sow_key=msg.sow_key, expiration=msg.expiration,
                    bookmark=msg.bookmark or "", position=position, doc=doc, key=key,
                    timestamp=stamp, now=since)
    else:  # the common upsert: publish() with the body decoded and the key known
        result = topic.upsert(key, msg.body, doc, msg.expiration, msg.bookmark or "", position,
                              since, stamp)
    rec = result.record
    msg.sow_key = rec.sow_key
    msg.body = rec.data
    msg.doc = rec.doc
    codec = topic.codec
    if codec is None:
        msg.set_previous(result.previous)  # decoded only if a subscriber reads it
    else:  # another type: its records are read by its codec, and deltas written by it
        prev = result.previous
        msg.previous_doc = None if prev is None else topic.decode_body(prev.data)
        msg.encode = codec.encode
    msg.key_fields = topic.delta_keys  # the delta is computed only if a delta subscriber asks


# -- out -----------------------------------------------------------------------------------

def removed(broker: Broker, topic: str, records: list[Record], reason: str) -> None:
    """``records`` left the SOW topic ``topic`` (``reason``: deleted, expired): out-of-focus
    messages to the subscriptions that had them, then the observers."""
    send_oof(broker, topic, records, reason)
    for observer in broker.observers:
        observer.records_removed(topic, records, reason)


def delete_records(broker: Broker, topic_name: str, filter_text: str) -> int:
    """``sow_delete`` by filter on behalf of the server itself (actions, an operator's reset);
    returns the count."""
    sow = broker.sow_service
    topic = sow.get(topic_name) if sow is not None else None
    if topic is None:
        raise CommandError(reasons.INVALID_TOPIC, f"{topic_name!r} is not a SOW topic")
    filt = compile_filter_for(filter_text)
    position = 0
    txlog = broker.txlog
    if txlog is not None and txlog.recorded(topic_name):
        position = txlog.append(topic_name, b"", RecordKind.SOW_DELETE,
                                client_name=broker.instance_name,
                                headers={"filter": filter_text}).position
    broker.turn.request()
    result = topic.delete_by_filter(filt, position=position)
    removed(broker, topic_name, result.records, reasons.OOF_DELETED)
    return result.records_deleted
