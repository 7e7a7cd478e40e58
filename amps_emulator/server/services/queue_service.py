"""Message queues in the server: the engines of :mod:`queues` wired to the journal and clients.

* Each configured queue has a :class:`queues.QueueEngine`. A publish recorded in the journal
  on one of its underlying topics (and passing its ``Filter``) is enqueued by journal
  position and bookmark; the engine never holds message bodies. Deliveries read the body
  from a bounded cache of recent records, or from the journal.
* Subscribing to a queue's name (without a bookmark) makes a queue subscription; a bookmark
  subscription to it replays the underlying topic with no queue semantics.
* Acknowledgements are ``sow_delete`` on the queue with a bookmark (list), or a filter, with
  ``cancel``/``expire`` in ``o``. What changes queue state is journalled as the small events
  of :mod:`queues.events`, so a restart rebuilds every queue from the log.
* One timer serves every queue, armed for the earliest engine deadline (lease expiry,
  message expiration).
* Messages that leave a queue unprocessed fire ``amps-action-on-sow-expire-message``.
* Recovery starts after each queue's acknowledged low-water mark, kept in
  ``<JournalDirectory>/queues.ack`` and written only once the acknowledgements it covers are
  durable in the journal.
* On an instance that replicates, a distributed ``Queue`` or a ``GroupLocalQueue`` delivers
  only the messages this instance owns; ownership, transfers and the queue records that
  replicate are :mod:`server.services.queue_ownership`'s (a ``LocalQueue`` stays this instance's own).
"""

from __future__ import annotations

import collections
import json
import logging
import os
from collections.abc import Callable, Generator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from amps_emulator.journal import ReadHold, RecordKind, SegmentPending
from amps_emulator.journal.atomic import replace_file
from amps_emulator.protocol import reasons
from amps_emulator.protocol.bookmarks import format_timestamp
from amps_emulator.protocol.codec import frame_raw, json_str
from amps_emulator.protocol.filter import MessageContext, compile_expression, compile_filter
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.protocol.topics import qualify, split_topic
from amps_emulator.queues import (
    Acked,
    Deliver,
    Enqueue,
    Expired,
    QueueCheckpoint,
    QueueConfigError,
    QueueEngine,
    QueueSpec,
    decode_event,
    encode_event,
    events_for,
    plan_recovery,
)
from amps_emulator.queues import recovery as queue_recovery
from amps_emulator.queues.ownership import Ownership
from amps_emulator.server.core.message import UNDECODED
from amps_emulator.server.core.ports import ServiceHost
from amps_emulator.server.core.router import compile_topic_regex, is_regex_topic
from amps_emulator.server.delivery.fanout import selected
from amps_emulator.server.messaging.registration import compile_filter_for
from amps_emulator.server.services.queue_held import HeldFilter, HeldWork, query_steps, tell_engine
from amps_emulator.server.services.queue_ownership import (
    DOMAIN_HEADER,
    QueueReplication,
    origin_of,
    owned_only,
    record_events,
    replicated_events,
)

if TYPE_CHECKING:
    from amps_emulator.journal.record import JournalRecord
    from amps_emulator.server.core.message import Message
    from amps_emulator.server.core.ports import Client, TxLogService
    from amps_emulator.server.core.router import Subscription
    from amps_emulator.sow import Record


class QueueHost(ServiceHost, Protocol):
    """What the queue service reads of the broker (here, not in ``ports``: it names
    :class:`server.services.txlog.TxLog`)."""

    txlog: TxLogService | None


log = logging.getLogger("amps_emulator.queues")

CACHE_RECORDS = 65_536  # recent published records kept for deliveries (bounded)
READ_AHEAD = 4_096  # records read in one go when a delivery misses the cache
CHECKPOINT_INTERVAL = 1.0
_PUBLISH_KINDS = (int(RecordKind.PUBLISH), int(RecordKind.DELTA_PUBLISH))
_EVENT_KINDS = frozenset(range(16, 32))
_QUEUE_BATCH = int(RecordKind.QUEUE_BATCH)
#: ``lp`` of a lease that never ends (the queue sets no LeasePeriod)
NO_LEASE_END = b"99991231T235959.999999Z"
_pack = msgspec.msgpack.Encoder().encode
_unpack = msgspec.msgpack.Decoder(list[tuple[int, bytes]]).decode


class ConfiguredQueue:
    """One configured queue: its engine, topics, and expressions."""

    def __init__(self, service: QueueService, cfg: Any) -> None:
        self.service = service
        self.cfg = cfg
        self.name = cfg.name
        try:
            self.spec = QueueSpec.from_config(cfg)
        except QueueConfigError as exc:
            from amps_emulator.config import ConfigError
            from amps_emulator.config.errors import ConfigIssue

            raise ConfigError([ConfigIssue(cfg.file, cfg.line, f"queue {cfg.name}: {exc}")]) from None
        self.engine = QueueEngine(self.spec)
        #: the queue's message type: it is fed by, and answers as, topics of that type
        self.message_type: str = cfg.message_type or "json"
        #: the queue as a topic key (what a command of a connection of its type names)
        self.key = qualify(cfg.name, self.message_type)
        underlying = cfg.underlying_topic or cfg.name
        #: the underlying topic's key (a regex: the pattern, over names of the queue's type)
        self.underlying = qualify(underlying, self.message_type)
        literal = getattr(cfg, "underlying_literal", False)  # a queue name like orders.queue
        self.regex = (compile_topic_regex(underlying)
                      if is_regex_topic(underlying) and not literal else None)
        self.default_target = (qualify(cfg.default_publish_target, self.message_type)
                               if cfg.default_publish_target else None)
        try:
            self.filter = compile_filter(cfg.filter) if cfg.filter else None
            self.priority = compile_expression(cfg.priority) if cfg.priority else None
            self.barrier = compile_filter(cfg.barrier_expression) if cfg.barrier_expression else None
        except Exception as exc:  # a bad expression is a config error at the queue, not a crash
            from amps_emulator.config import ConfigError
            from amps_emulator.config.errors import ConfigIssue

            raise ConfigError([ConfigIssue(cfg.file, cfg.line, f"queue {cfg.name}: {exc}")]) from None
        self.needs_content = (self.filter is not None or self.priority is not None
                              or self.barrier is not None)
        self.subs: dict[Any, Subscription] = {}
        #: who owns the messages, when the queue is shared with replicated instances
        self.ownership: Ownership | None = None
        #: a group local queue's identity: its GroupLocalQueueDomain, else the instance's Group
        self.domain: str | None = None
        #: the headers of the queue records this queue journals (its identity, if group local)
        self.record_headers: dict[str, str] | None = None
        #: the position and log time of the oldest message, as the statistics last read it
        self.oldest: tuple[int, float | None] | None = None

    def covers(self, topic: str) -> bool:
        if self.regex is None:
            return topic == self.underlying
        name, message_type = split_topic(topic)
        return message_type == self.message_type and self.regex.search(name) is not None

    def enqueue_args(self, doc: Any, ctx: MessageContext) -> tuple[Any, bool]:
        prio = self.priority(doc, ctx) if self.priority is not None else None
        barrier = bool(self.barrier(doc, ctx)) if self.barrier is not None else False
        return prio, barrier

    def remove_subscriber(self, sub: Subscription) -> None:
        key = (sub.conn.conn_id, sub.sub_id)
        if self.subs.pop(key, None) is not None:
            svc = self.service
            svc.handle(self, self.engine.remove_subscriber(key, svc.now()))


class QueueService:
    def __init__(self, broker: QueueHost, config: Any, *,
                 on_expired: Callable[[str, bytes, str, str, str], object] | None = None
                 ) -> None:
        """``on_expired(queue, data, reason, sow_key, bookmark)``: a message left a queue
        unconsumed (the on-sow-expire actions, passed in by the root)."""
        self.broker = broker
        if broker.txlog is None:
            raise ValueError("queues need a TransactionLog recording their underlying topics")
        self.txlog: TxLogService = broker.txlog
        self.on_expired = on_expired
        #: the queues by topic key (the name; for another type than json, name and type:
        #: ``jobs`` of fix and ``jobs`` of json are two queues), as their journal events
        #: name them
        self.queues: dict[str, ConfiguredQueue] = {}
        for cfg in config.queues:
            q = ConfiguredQueue(self, cfg)
            self.queues[q.key] = q
        self._cache: collections.OrderedDict[int, Any] = collections.OrderedDict()
        self._covering: dict[str, tuple[ConfiguredQueue, ...]] = {}
        self._sampling = ReadHold()  # (the statistics' reads: logged_at)
        self.held = HeldWork(lambda: broker.loop, self._record, self._carry_out, self.now, tell_engine)
        self._timer: Any = None
        self._timer_at: float | None = None
        self._ckpt_timer: Any = None
        #: None with --memory: low-water marks are not written anywhere
        self._ckpt_path: str | None = None if broker.memory else os.path.join(
            config.transaction_log.journal_directory, "queues.ack")
        self._ckpt_pending: tuple[int, dict[str, int]] | None = None
        self._ckpt_written: dict[str, int] = {}
        self._lp_sec, self._lp_prefix = -1, b""
        #: the views over queues: told (queue, actions, other positions touched; None: all)
        self.watch: Callable[[ConfiguredQueue, Any, Any], None] | None = None
        #: ownership and transfers of the queues shared with replicated instances (None: none)
        self.replication: QueueReplication[ConfiguredQueue] | None = None
        if config.replication_listener is not None or config.replication.destinations:
            for q in self.queues.values():
                kind = q.cfg.kind
                if kind == "local":
                    continue  # each instance its own: nothing is shared
                q.ownership = Ownership(broker.instance_name,
                                        q.cfg.initial_owner if kind == "group_local" else None)
                if kind == "group_local":
                    q.domain = q.cfg.group_local_queue_domain or config.group_name
                    q.record_headers = {DOMAIN_HEADER: q.domain}
            if any(q.ownership is not None for q in self.queues.values()):
                self.replication = QueueReplication(self)
            for q in self.queues.values():
                if q.ownership is not None and not any(
                        d.selects(q.name, q.cfg.message_type) for d in config.replication.destinations):
                    log.warning("queue %s is shared with the instances this one replicates with, but "
                                "no <Destination> replicates its topic: its acks and ownership "
                                "transfers stay on this instance", q.name)

    def now(self) -> float:
        return self.broker.wallclock()

    # -- lookup ---------------------------------------------------------------------------
    def get(self, topic: str) -> ConfiguredQueue | None:
        """The queue a command names (``topic``: a topic key, qualified by the connection's
        type)."""
        return self.queues.get(topic)

    def covering(self, topic: str) -> tuple[ConfiguredQueue, ...]:
        """The queues whose underlying topic(s) include ``topic`` (cached per topic)."""
        hit = self._covering.get(topic)
        if hit is None:
            if len(self._covering) > 100_000:
                self._covering.clear()
            hit = self._covering[topic] = tuple(q for q in self.queues.values() if q.covers(topic))
        return hit

    def covers(self, topic: str) -> bool:
        return bool(self.covering(topic))

    def publish_target(self, topic: str) -> str:
        """Where a publish to ``topic`` goes: a publish to a queue's own name goes to its
        DefaultPublishTarget or, without one, to its UnderlyingTopic when that names a single
        topic (so it reaches the queue); anything else is published as addressed."""
        q = self.queues.get(topic)
        if q is None or q.underlying == topic:
            return topic
        if q.default_target:
            return q.default_target
        return q.underlying if q.regex is None else topic

    # -- the message path's observer (ports.PublishObserver) --------------------------------
    def check_writable(self, topic: str) -> None:
        pass  # a publish to a queue goes to its feed (publish_target): nothing to refuse

    def records_removed(self, topic: str, records: list[Record], reason: str) -> None:
        pass  # queues hold journalled messages, not SOW records

    def message_published(self, msg: Message, rec: JournalRecord | None) -> None:
        """A publish: if journalled, enqueue it on every queue over its topic."""
        if rec is None:
            return
        ctx = None
        now = self.now()
        for q in self.covering(msg.topic):
            if q.needs_content:
                if ctx is None:
                    ctx = msg.context()
                    if msg.doc is UNDECODED:
                        msg.doc = self.broker.bodies.decode(msg.body, msg.topic)
                if q.filter is not None and not q.filter(msg.doc, ctx):
                    continue
                prio, barrier = q.enqueue_args(msg.doc, ctx)
            else:
                prio, barrier = None, False
            self._remember(rec)
            self.broker.processors.queue.take(len(msg.body))  # (one per queue it enters)
            own = q.ownership
            foreign = own is not None and own.entered(rec.position, origin_of(rec), now) != own.local
            self.handle(q, q.engine.enqueue(rec.position, rec.bookmark_str, now,
                                            timestamp=rec.timestamp / 1_000_000,
                                            expiration=msg.expiration, priority=prio,
                                            is_barrier=barrier), (rec.position,))
            if foreign:
                self._foreign_entered(q, rec.position, now)
            if msg.expiration or q.spec.expiration:
                self.arm()  # the message's own lifetime may be the next deadline

    def _foreign_entered(self, q: ConfiguredQueue, position: int, now: float) -> None:
        """A message another instance owns entered this instance's copy of the queue: nobody
        here gets it unless it is transferred here."""
        own = q.ownership
        if own is None:
            return
        if not q.engine.holds(position):  # acknowledged before it arrived
            own.left(position, now)
        elif self.replication is not None and q.subs:
            self.replication.arm()

    def _remember(self, rec: Any) -> None:
        cache = self._cache
        cache[rec.position] = rec
        if len(cache) > CACHE_RECORDS:
            cache.popitem(last=False)

    def _record(self, position: int, hold: ReadHold | None = None) -> Any:
        """The journal record at ``position``: from the cache of recent records, or read
        from the journal together with the records after it (queues deliver mostly in log
        order, so one sequential read serves the next deliveries too); ``hold``: see read."""
        rec = self._cache.get(position)
        if rec is not None:
            return rec
        found = None
        try:
            for n, r in enumerate(self.txlog.journal.read(position, hold=hold)):
                if n == 0 and r.position != position:
                    break  # not in the log (removed by retention, or never written)
                if r.kind in _PUBLISH_KINDS:
                    self._remember(r)
                if n == 0:
                    found = r
                if n >= READ_AHEAD:
                    break
        except SegmentPending:  # (when a record was found, only the read ahead stopped)
            if found is None:
                raise
        return found

    def logged_at(self, q: ConfiguredQueue, position: int) -> float | None:
        """When the message at ``position`` of ``q`` was logged (seconds; None: not in the
        log), for a statistic sampled on the loop: a record in a compressed segment is read
        once it is decompressed off the loop; meanwhile, what the last sample read."""
        if q.oldest is not None and q.oldest[0] == position:
            return q.oldest[1]
        try:
            rec = self._record(position, self._sampling)
        except SegmentPending:
            return None if q.oldest is None else q.oldest[1]
        q.oldest = (position, None if rec is None else rec.timestamp / 1_000_000)
        return q.oldest[1]

    # -- subscriptions ---------------------------------------------------------------------
    @staticmethod
    def requested_backlog(cmd: Any) -> int | None:
        """The subscriber's ``max_backlog`` option (None: not given)."""
        opt = cmd.opts.get("max_backlog")
        try:
            n = int(opt) if opt not in (None, True) else None
        except ValueError:
            n = -1
        if n is not None and n < 0:
            raise CommandError(reasons.INVALID_OPTIONS, f"max_backlog={opt}")
        return n

    @staticmethod
    def granted_backlog(q: ConfiguredQueue, max_backlog: int | None) -> int:
        """The backlog a subscription gets: what it asked for (default 1), capped by the
        queue's MaxPerSubscriptionBacklog. The processed ack tells the client."""
        return int(q.spec.subscription_limit(max_backlog))

    def subscribe(self, q: ConfiguredQueue, client: Client, sub: Subscription, cmd: Any,
                  max_backlog: int | None) -> None:
        key = (client.conn_id, sub.sub_id)
        eligible = sub.queue_filter = self._eligible(sub.filter, q) if sub.filter is not None else None
        if q.ownership is not None:  # only what this instance owns
            eligible = owned_only(q.ownership, eligible)
        sub.queue = q
        now = self.now()
        if key in q.subs:  # replace: keep leases, recompute the backlog
            q.subs[key] = sub
            self.handle(q, q.engine.replace_subscriber(key, now, max_backlog=max_backlog,
                                                       eligible=eligible))
        else:
            q.subs[key] = sub
            self.handle(q, q.engine.add_subscriber(key, now, client=client,
                                                   max_backlog=max_backlog, eligible=eligible))
        if self.replication is not None and q.ownership is not None:
            self.replication.arm()  # room for messages owned elsewhere

    def _eligible(self, flt: Any, q: ConfiguredQueue) -> Any:
        """``flt`` over the record at a position (read off the loop: ``HeldFilter``)."""
        def test(rec: Any) -> bool:
            ctx = MessageContext(topic=rec.topic, bookmark=rec.bookmark_str, sow_key=rec.sow_key,
                                 correlation_id=rec.correlation_id, client_name=rec.client_name)
            return bool(flt(self.broker.bodies.decode(rec.body, rec.key), ctx))
        return HeldFilter(lambda: self.broker.loop, self._record, test, lambda: self._redispatch(q))

    def _redispatch(self, q: ConfiguredQueue) -> None:
        """A filter's record was decompressed: what it now admits is delivered."""
        self.handle(q, q.engine.dispatch(self.now()))
        if self.replication is not None and q.ownership is not None:
            self.replication.arm()

    def room(self, q: ConfiguredQueue) -> int:
        """How many more messages this instance's subscriptions to ``q`` can take now."""
        spare = 0
        for key in q.subs:
            leased, limit = q.engine.subscriber_backlog(key)
            spare += max(0, limit - leased)
        mb = q.spec.max_backlog
        if mb is not None:
            spare = min(spare, max(0, mb - q.engine.leased_count))
        return spare

    def some_subscription_takes(self, q: ConfiguredQueue, position: int) -> bool:
        """Whether a subscription to ``q`` with room here would take the message (its filter)."""
        for key, sub in q.subs.items():
            leased, limit = q.engine.subscriber_backlog(key)
            if leased >= limit:
                continue
            if sub.queue_filter is None or sub.queue_filter(position):
                return True
        return False

    def disconnect(self, client: Client) -> None:
        now = self.now()
        for q in self.queues.values():
            stale = [k for k, s in q.subs.items() if s.conn is client]
            for k in stale:
                del q.subs[k]
            self.handle(q, q.engine.disconnect(client, now))

    # -- acknowledgements ------------------------------------------------------------------
    def ack(self, q: ConfiguredQueue, client: Client, cmd: Any
            ) -> Generator[Future[None] | None, None, int]:
        """``sow_delete`` on a queue: by bookmark(s), or by filter (its records read in steps,
        off the loop when compressed: ``query_steps``). Returns messages removed."""
        option = _ack_option(cmd)
        if cmd.bookmark:
            positions = None
        elif cmd.filter is not None:
            flt = compile_filter_for(cmd.filter)
            msgs = list(q.engine.messages(include_leased=True, now=self.now()))
            recs, _ = yield from query_steps(self._record, self.broker.bodies.decode, msgs, flt, None)
            positions = [r.position for r in recs]
        else:
            raise CommandError(reasons.MISSING_FIELDS, "a queue sow_delete needs a bookmark or a filter")
        before, now = q.engine.depth, self.now()
        self.handle(q, q.engine.ack(client, cmd.bookmark, now, option) if positions is None
                    else q.engine.ack_positions(client, positions, now, option))
        return max(0, before - q.engine.depth)

    # -- engine actions --------------------------------------------------------------------
    def handle(self, q: ConfiguredQueue, actions: list[Any], touched: Any = ()) -> None:
        """Carry out the engine's ``actions``; ``touched``: positions whose state changed
        otherwise (entered, removed), for the views over the queue."""
        if self.watch is not None:
            self.watch(q, actions, touched)
        if not actions:
            return
        own = q.ownership
        events = events_for(actions, q.spec, bookmarks=own is not None)
        if events:
            self.journal_events(q, events)
        earliest = None
        for a in actions:
            t = type(a)
            if t is Deliver:
                self.held.run(q, a)  # (its record may be in a segment being decompressed)
                lease = a.lease_expiry
                if lease is not None and (earliest is None or lease < earliest):
                    earliest = lease
            elif t is Expired:
                # every instance expires its copy; the owner alone runs the on-sow-expire
                # actions, so a dead letter is written once across the instances
                if self.on_expired is not None and (own is None or own.owns(a.position)):
                    self.held.run(q, a)
                if own is not None:
                    own.left(a.position, self.now())
            elif t is Acked and own is not None and a.position is not None:
                own.left(a.position, self.now())
        # Acks only remove deadlines (a timer that fires early re-arms itself); a new lease
        # matters only if it ends before the armed timer.
        if self._timer is None or (earliest is not None and earliest < (self._timer_at or 0)):
            self.arm()
        if own is not None and own.foreign and self.replication is not None:
            self.replication.arm()  # an ack may have made room for messages owned elsewhere

    def journal_events(self, q: ConfiguredQueue, events: list[Any]) -> None:
        """One journal record per engine call: the event itself, or a batch of them (an ack
        of ten bookmarks is one record, not ten)."""
        txlog = self.txlog
        if len(events) == 1:
            kind, payload = encode_event(events[0])
        else:
            kind, payload = _QUEUE_BATCH, _pack([encode_event(ev) for ev in events])
        txlog.append(q.key, payload, kind, client_name=self.broker.instance_name,
                     headers=q.record_headers)

    def _carry_out(self, q: ConfiguredQueue, a: Any, rec: Any) -> None:
        if type(a) is Deliver:
            self._deliver(q, a, rec)
        elif self.on_expired is not None:
            self.on_expired(q.name, rec.body if rec is not None else b"", a.reason, "", a.bookmark)

    def _deliver(self, q: ConfiguredQueue, d: Deliver, rec: Any) -> None:
        sub = q.subs.get(d.sub_key)
        if sub is None or sub.conn.closed:
            return
        if rec is None:
            log.error("queue %s: message at %d is no longer in the journal", q.name, d.position)
            return
        prefix = sub.prefix
        if prefix is None:
            prefix = sub.prefix = (b'{"c":"p","t":' + json_str(q.name) + b',"sids":'
                                   + json_str(sub.sub_id) + b',"bm":"')
        # Every queue delivery carries ``lp``: the official clients tell queue messages by a
        # non-empty lease (their auto-ack and ack batching only act on those).
        header = prefix + d.bookmark.encode() + b'","lp":"' + (
            NO_LEASE_END if d.lease_expiry is None else self._lease_text(d.lease_expiry)) + b'"'
        if rec.correlation_id is not None:
            header += b',"x":' + json_str(rec.correlation_id)
        if "timestamp" in sub.options:  # the time the publish was processed, as everywhere
            header += b',"ts":"' + format_timestamp(rec.timestamp).encode() + b'"'
        bodies = self.broker.bodies
        data = frame_raw(header + b"}", rec.body if sub.select is None else selected(
            rec.body, sub.select, bodies.decode(rec.body, rec.key), bodies.encoder(rec.key)))
        self.broker.processors.queue.give(len(data))
        sub.conn.send(data)
        if self.broker.delivered is not None:
            self.broker.delivered(sub.conn, q.key, rec.body, d.bookmark, rec.correlation_id)

    def _lease_text(self, when: float) -> bytes:
        """``when`` as an AMPS timestamp; the date-time part is formatted once per second."""
        micros = int(when * 1_000_000)
        sec, frac = divmod(micros, 1_000_000)
        if sec != self._lp_sec:
            self._lp_sec = sec
            self._lp_prefix = format_timestamp(sec * 1_000_000).split(".")[0].rstrip("Z").encode()
        return self._lp_prefix + b".%06dZ" % frac

    # -- time ------------------------------------------------------------------------------
    def arm(self) -> None:
        due = None
        for q in self.queues.values():
            d = q.engine.next_deadline()
            if d is not None and (due is None or d < due):
                due = d
        if due is None:
            return
        if self._timer is not None:
            if self._timer_at is not None and self._timer_at <= due:
                return
            self._timer.cancel()
        self._timer_at = due
        self._timer = self.broker.call_later(max(0.0, due - self.now()), self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._timer_at = None
        now = self.now()
        for q in self.queues.values():
            try:
                self.handle(q, q.engine.poll(now))
            except Exception:  # one queue's failure must not stop every queue's timer
                log.exception("queue %s: lease/expiration processing failed", q.name)
        self.broker.turn.request()
        self.arm()

    # -- sow queries on a queue ------------------------------------------------------------
    def query_records(self, q: ConfiguredQueue, flt: Any, top_n: int | None
                      ) -> Generator[Future[None] | None, None, tuple[list[Any], int]]:
        """The deliverable messages (read-only view) as journal records, and the count; in
        steps (``queue_held.query_steps``)."""
        msgs = list(q.engine.messages(include_leased=False, now=self.now()))
        return (yield from query_steps(self._record, self.broker.bodies.decode, msgs, flt, top_n))

    # -- recovery and checkpoints ------------------------------------------------------------
    def recover(self) -> None:
        journal = self.txlog.journal
        checkpoints = self._read_checkpoints()
        starts: dict[str, int] = {}
        for name, q in self.queues.items():
            plan = plan_recovery(q.spec, checkpoints.get(name),
                                 journal_first_position=journal.first_position)
            if plan.after_position is not None:
                starts[name] = plan.after_position
            else:
                starts[name] = self._resolve_recovery_point(plan.recovery_point or "epoch")
        events: dict[str, list[Any]] = {name: [] for name in self.queues}
        # replicated queues: the owner of each message entered, and positions by bookmark
        owners: dict[str, dict[int, str]] = {name: {} for name in self.queues}
        by_bookmark: dict[str, dict[str, int]] = {name: {} for name in self.queues}
        first = min(starts.values(), default=0) + 1
        for rec in journal.read(first):
            kind = rec.kind
            if kind in _PUBLISH_KINDS:
                doc: Any = None
                ctx = None
                for name, q in self.queues.items():
                    if rec.position <= starts[name] or not q.covers(rec.key):
                        continue
                    prio, barrier = None, False
                    if q.needs_content:
                        if ctx is None:
                            doc = self.broker.bodies.decode(rec.body, rec.key)
                            ctx = MessageContext(topic=rec.topic, bookmark=rec.bookmark_str,
                                                 sow_key=rec.sow_key,
                                                 correlation_id=rec.correlation_id,
                                                 client_name=rec.client_name)
                        if q.filter is not None and not q.filter(doc, ctx):
                            continue
                        prio, barrier = q.enqueue_args(doc, ctx)
                    events[name].append(Enqueue(rec.position, rec.bookmark_str,
                                                rec.timestamp / 1_000_000, rec.expiration,
                                                prio, barrier))
                    if q.ownership is not None:
                        owners[name][rec.position] = q.ownership.owner_of_new(origin_of(rec))
                        by_bookmark[name][rec.bookmark_str] = rec.position
            elif kind in _EVENT_KINDS and rec.key in self.queues:
                shared = self.queues[rec.key]
                if shared.ownership is not None:
                    if QueueReplication.same_queue(shared, rec):
                        events[rec.key].extend(replicated_events(
                            rec, record_events(rec), by_bookmark[rec.key], owners[rec.key]))
                elif kind == _QUEUE_BATCH:
                    events[rec.key].extend(decode_event(k, p) for k, p in _unpack(rec.body))
                else:
                    events[rec.key].append(decode_event(kind, rec.body))
        now = self.now()
        for name, q in self.queues.items():
            q.engine = queue_recovery.replay(QueueEngine(q.spec), events[name], now=now,
                                             start_after=starts[name])
            if q.ownership is not None:
                engine = q.engine
                q.ownership.restore({p: o for p, o in owners[name].items() if engine.holds(p)})
            log.info("queue %s recovered: %d messages queued", name, q.engine.depth)
        for q in self.queues.values():
            self.handle(q, q.engine.poll(now))
        self.arm()  # recovered messages may carry lifetimes
        self._ckpt_timer = self.broker.loop.call_later(CHECKPOINT_INTERVAL, self._checkpoint_tick)

    def _resolve_recovery_point(self, point: str) -> int:
        journal = self.txlog.journal
        if point in ("epoch", "creation", "0"):
            return 0
        if point == "now":
            return journal.last_position
        pos = journal.position_after_bookmark(point)
        return 0 if pos is None else pos - 1

    def _read_checkpoints(self) -> dict[str, QueueCheckpoint]:
        if self._ckpt_path is None:
            return {}
        try:
            with open(self._ckpt_path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("%s unreadable (%s): queues recover from their RecoveryPoint",
                        self._ckpt_path, exc)
            return {}
        out = {}
        for name, v in data.items():
            try:
                out[name] = QueueCheckpoint(name, str(v["recovery_point"]), int(v["low_water"]))
            except (KeyError, TypeError, ValueError):
                continue
        self._ckpt_written = {n: c.low_water for n, c in out.items()}
        return out

    def _checkpoint_tick(self) -> None:
        """Write low-water marks whose acknowledgements are now durable in the journal."""
        journal = self.txlog.journal
        pending = self._ckpt_pending
        if pending is not None and journal.durable_position >= pending[0]:
            self._write_checkpoints(pending[1])
            self._ckpt_pending = None
        marks = {n: q.engine.low_water_position for n, q in self.queues.items()}
        if marks != self._ckpt_written and self._ckpt_pending is None:
            self._ckpt_pending = (journal.last_position, marks)
        self._ckpt_timer = self.broker.loop.call_later(CHECKPOINT_INTERVAL, self._checkpoint_tick)

    def _write_checkpoints(self, marks: dict[str, int]) -> None:
        if self._ckpt_path is None:
            self._ckpt_written = marks
            return
        data = {n: {"recovery_point": self.queues[n].spec.recovery_point, "low_water": lw}
                for n, lw in marks.items()}
        try:
            replace_file(self._ckpt_path, json.dumps(data).encode("utf-8"))
            self._ckpt_written = marks
        except OSError as exc:
            log.warning("could not write %s: %s", self._ckpt_path, exc)

    def close(self) -> None:
        for t in (self._timer, self._ckpt_timer):
            if t is not None:
                t.cancel()
        if self.replication is not None:
            self.replication.close()


def _ack_option(cmd: Any) -> str | None:
    opts = cmd.opts
    return "cancel" if "cancel" in opts else "expire" if "expire" in opts else None
