"""A queue as the underlying topic of a view (or a conflated topic) or of an aggregated
subscription: its available messages.

AMPS computes a view over a queue from the messages that are available in it now: a message
leased to a subscriber is not in the view, one returned to the queue (a cancel, an expired
lease, a subscriber gone) is in it again, one acknowledged or expired is gone for good;
messages beyond ``TargetQueueDepth`` are not considered. The view only reads the queue: it
leases nothing and changes no delivery.

:class:`QueueRows` is that set, kept as the records a view reads of a SOW topic
(``get``, ``query().records``, the topic's ``spec``), each message keyed by its bookmark.
The queue service tells it what changed (:attr:`QueueService.watch`: the engine's actions
and the positions that entered or left otherwise); :meth:`QueueRows.sync` checks each
position against the engine and returns what entered and left, in log order. A message that
leaves ``TargetQueueDepth``'s inactive part is not named by any action: when the inactive
count falls, every message is checked again. A message's record in a compressed journal
segment not decompressed yet is read off the loop: the check stops there, the positions
still to check (and any asked for meanwhile) wait, and once the segment is decompressed they
are checked and the followers told, in order (``QueueRows.later``).

:class:`QueueWatch` is the queue service's watch: one :class:`QueueRows` per queue that
something follows, shared by its followers (the views, :mod:`.views`, and each aggregated
subscription over the queue, :class:`QueueAggregation`), dropped when the last one goes.
An aggregated subscription over a queue is the same reading as a view: its groups are the
available messages' (``sow_and_subscribe``/``sow_and_delta_subscribe`` with ``grouping``
and ``projection``); it leases nothing and no delivery waits for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from amps_emulator.journal import ReadHold, SegmentPending
from amps_emulator.protocol import reasons
from amps_emulator.protocol.filter import MessageContext
from amps_emulator.protocol.topics import display_name
from amps_emulator.queues import Expired
from amps_emulator.server.core.message import Message
from amps_emulator.server.core.turn import from_any_thread
from amps_emulator.server.delivery.aggregated import AggregatedSubscription
from amps_emulator.sow import TopicSpec
from amps_emulator.sow.record import Record

if TYPE_CHECKING:
    from amps_emulator.server.services.queue_service import ConfiguredQueue, QueueService
    from amps_emulator.sow.aggregate import Aggregation

__all__ = ["QueueAggregation", "QueueRows", "QueueWatch"]

log = logging.getLogger("amps_emulator.queues")


class _Query(NamedTuple):
    records: list[Record]


class _Result(NamedTuple):  # what a SOW topic's query step returns, as the handlers read it
    records: list[Record]
    matches: int
    topic_matches: int


#: told of a followed queue's changes: (its rows, records entered, records left, the
#: positions expired among them), each list in log order
Follower = Callable[["QueueRows", list[Record], list[Record], set[int]], None]


class QueueRows:
    """The available messages of queue ``q``, as the records of a SOW topic (see the module
    docstring)."""

    def __init__(self, service: QueueService, q: ConfiguredQueue,
                 ready: Callable[[QueueRows], None] | None = None) -> None:
        self.service = service
        self.q = q
        #: called (on the loop) once a record the check waited for is decompressed
        self.ready = ready
        self._hold = ReadHold(self._woken)
        #: while a record is being decompressed: the positions still to check (None: all),
        #: and those that left expired meanwhile
        self.later: set[int] | None = None
        self.waiting = False
        #: a check failed part way: the next one looks at every message
        self.stale = False
        self.gone: set[int] = set()
        #: the queue as a topic: its key (name and type), so a view names it as any topic
        self.spec = TopicSpec(q.key, message_type=q.message_type, durability="transient")
        self.rows: dict[str, Record] = {}  # bookmark -> record
        self._key_at: dict[int, str] = {}  # journal position -> bookmark
        self._seq = 0
        self._inactive = q.engine.inactive_count

    # -- what a view reads of its underlying topic ------------------------------------------
    def get(self, key: str) -> Record | None:
        return self.rows.get(key)

    def query(self) -> _Query:
        """Every available message, in queue order."""
        return _Query(sorted(self.rows.values(), key=lambda r: r.seq))

    def _ctx_of(self, rec: Record) -> MessageContext:
        return MessageContext(topic=display_name(self.spec.name), bookmark=rec.bookmark,
                              sow_key=rec.sow_key)

    def query_steps(self, flt: Any) -> Generator[None, None, _Result]:
        """The available messages ``flt`` matches, as a SOW topic's query step returns them
        (read at once: the rows are in memory)."""
        ctx = self._ctx_of
        records = self.query().records
        if flt is not None:
            records = [r for r in records if flt(r.doc, ctx(r))]
        return _Result(records, len(records), len(self.rows))
        yield  # (a generator, as a topic's query steps are)

    def message(self, rec: Record) -> Message:
        """``rec`` as a published message of the queue (what a view over it takes in)."""
        msg = Message(self.spec.name, rec.data, rec.bookmark, None, rec.sow_key, None, None,
                      rec.doc)
        msg.timestamp = int(rec.timestamp * 1_000_000)
        return msg

    # -- following the queue ----------------------------------------------------------------
    def load(self) -> None:
        """Start from what the queue holds available now."""
        self.rows.clear()
        self._key_at.clear()
        self.sync(None)

    def sync(self, positions: Iterable[int] | None) -> tuple[list[Record], list[Record]]:
        """Check ``positions`` (None: every message) against the queue; returns the records
        that became available and those that are no longer, each in log order."""
        if self.waiting:  # (checked once the record waited for is decompressed)
            if positions is None or self.later is None:
                self.later = None
            else:
                self.later.update(positions)
            return [], []
        if self.stale:
            positions, self.stale = None, False
        engine = self.q.engine
        inactive = engine.inactive_count
        if positions is None or inactive < self._inactive:  # promoted from the inactive part
            now = self.service.now()
            available = {m.position for m in engine.messages(include_leased=False, now=now)}
            check = sorted(available | self._key_at.keys())
        else:
            available = None
            check = sorted(set(positions))
        self._inactive = inactive
        entered: list[Record] = []
        left: list[Record] = []
        for i, pos in enumerate(check):
            now_in = pos in available if available is not None else engine.is_available(pos)
            key = self._key_at.get(pos)
            if now_in and key is None:
                try:
                    rec = self._read(pos)
                except SegmentPending:  # the rest waits (woken: ``_go_on``)
                    self.waiting, self.later = True, set(check[i:])
                    break
                if rec is not None:
                    entered.append(rec)
            elif key is not None and not now_in:
                del self._key_at[pos]
                gone = self.rows.pop(key, None)
                if gone is not None:
                    left.append(gone)
        return entered, left

    def _woken(self) -> None:
        """(the decompressing thread) The segment is decompressed (or refused)."""
        from_any_thread(self.service.broker.loop, self._go_on)

    def _go_on(self) -> None:
        if not self.waiting:
            return  # (a read ahead's segment: nothing waited for it)
        self.waiting = False
        if self.ready is not None:
            self.ready(self)

    def _read(self, position: int) -> Record | None:
        jrec = self.service._record(position, self._hold)
        if jrec is None:  # no longer in the journal: nothing a view can show
            return None
        bookmark = jrec.bookmark_str
        self._seq += 1
        rec = Record(bookmark, jrec.body, bookmark, jrec.timestamp / 1_000_000, None, position,
                     None, self.service.broker.bodies.decode(jrec.body, jrec.key), self._seq)
        self.rows[bookmark] = rec
        self._key_at[position] = bookmark
        return rec


class QueueWatch:
    """The queue service's ``watch`` (see the module docstring): what is available in each
    followed queue, kept by its :class:`QueueRows`, and who is told of its changes."""

    def __init__(self, service: QueueService) -> None:
        self.service = service
        self._rows: dict[str, QueueRows] = {}
        self._followers: dict[str, list[Follower]] = {}

    @classmethod
    def of(cls, service: QueueService) -> QueueWatch:
        """``service``'s watch, installed on first use."""
        watch = service.watch
        if not isinstance(watch, QueueWatch):
            watch = service.watch = cls(service)
        return watch

    def follow(self, q: ConfiguredQueue, follower: Follower) -> QueueRows:
        """``follower`` is told of queue ``q``'s changes from now on; returns its rows
        (read from the queue when nothing followed it)."""
        rows = self._rows.get(q.key)
        if rows is None:
            rows = self._rows[q.key] = QueueRows(self.service, q, self._ready)
            rows.load()
        followers = self._followers.setdefault(q.key, [])
        if follower not in followers:
            followers.append(follower)
        return rows

    def unfollow(self, q: ConfiguredQueue, follower: Follower) -> None:
        followers = self._followers.get(q.key, [])
        if follower in followers:
            followers.remove(follower)
        if not followers:
            self._followers.pop(q.key, None)
            self._rows.pop(q.key, None)

    def __call__(self, q: ConfiguredQueue, actions: list[Any], touched: Any) -> None:
        """What is available in queue ``q`` may have changed (``touched`` None: anything)."""
        rows = self._rows.get(q.key)
        if rows is None:
            return
        positions = None if touched is None else [
            *touched, *(a.position for a in actions if a.position is not None)]
        rows.gone |= expired_positions(actions)
        self._tell(q, rows, rows.sync(positions))

    def _ready(self, rows: QueueRows) -> None:
        """The record ``rows`` waited for is decompressed: the check goes on."""
        if self._rows.get(rows.q.key) is rows:
            later, rows.later = rows.later, set()
            try:
                changes = rows.sync(later)
            except Exception:  # (a loop callback: contained) all checked at the next change
                rows.stale = True
                log.exception("%s: checking the queue for its views failed", rows.q.name)
                return
            self._tell(rows.q, rows, changes)

    def _tell(self, q: ConfiguredQueue, rows: QueueRows,
              changes: tuple[list[Record], list[Record]]) -> None:
        """Tell ``q``'s followers what entered and left (those that left expired: noted in
        ``rows.gone``, kept while a check waits)."""
        entered, left = changes
        gone = {r.position for r in left if r.position in rows.gone} if left else set()
        if not rows.waiting:
            rows.gone.clear()
        if not entered and not left:
            return
        for follower in list(self._followers.get(q.key, ())):
            try:
                follower(rows, entered, left, gone)
            except Exception:  # the queue's own work goes on: a follower must not fail it
                log.exception("%s: following the queue failed", q.name)


class QueueAggregation(AggregatedSubscription):
    """An aggregated subscription over queue ``q``: its groups are those of the messages
    available in the queue (:class:`server.delivery.aggregated.AggregatedSubscription` over
    the queue's :class:`QueueRows`). Follows the queue from its creation; :meth:`close`
    (the subscription removed, or the command failed) stops that."""

    def __init__(self, watch: QueueWatch, q: ConfiguredQueue, spec: Aggregation, delta: bool,
                 encode: Callable[[Any], bytes]) -> None:
        self._watch = watch
        self._q = q
        rows = watch.follow(q, self._changed)
        super().__init__(rows, spec, delta, encode)

    def _changed(self, rows: QueueRows, entered: list[Record], left: list[Record],
                 expired: set[int]) -> None:
        """One queue event's changes: each touched group is recomputed and sent once (the
        messages that left, then those that entered)."""
        if self._pending is not None:  # the query still runs: kept for catch_up
            for rec in left:
                self.removed(rec, reasons.OOF_EXPIRED if rec.position in expired
                             else reasons.OOF_DELETED)
            for rec in entered:
                self.published(rows.message(rec))
            return
        groups = self.groups
        for reason, out in ((reasons.OOF_EXPIRED, True), (reasons.OOF_DELETED, False)):
            gone = [(r.sow_key, False, None) for r in left
                    if (r.position in expired) is out and r.sow_key in groups]
            if gone:
                self._send(groups.change_many(gone), reason)
        if entered:
            f = self.sub.filter
            ctx = rows._ctx_of
            self._send(groups.change_many([(r.sow_key, f is None or bool(f(r.doc, ctx(r))), r.doc)
                                           for r in entered]), reasons.OOF_MATCH)

    def close(self) -> None:
        self._watch.unfollow(self._q, self._changed)


def expired_positions(actions: Iterable[Any]) -> set[int]:
    """The positions the engine's ``actions`` expired (a view's records leave ``expired``)."""
    return {a.position for a in actions if type(a) is Expired}
