"""Aggregated subscriptions: ``sow_and_subscribe`` (or ``sow_and_delta_subscribe``) with the
``grouping=[...]`` and ``projection=[...]`` options.

The query part returns one aggregated record per group (:mod:`server.handlers.sow_aggregate`); the
subscription then keeps the groups up to date, as a view with the same definition would:

* each change to the topic (publish, delete, expiration) updates the groups it touches: the
  group the record left and the group it joined (the subscription's filter decides whether
  the record counts at all);
* a touched group that still has records is brought up to date (its running state, see
  :class:`GroupTracker`: the record's old contribution out, its new one in) and delivered
  (its SowKey in ``k``); for ``sow_and_delta_subscribe`` only the fields that changed, plus
  the grouping fields;
* a group left without records is gone: ``oof`` subscriptions get its last aggregated record,
  reason ``deleted`` or ``expired`` when a removal emptied it, ``match`` otherwise.

The groups' membership is read with the query's snapshot; changes made while the query is
still running wait and are applied (and delivered) right after it, as for paginated
subscriptions. :class:`GroupTracker` is the bookkeeping, shared with views
(:mod:`server.services.views`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amps_emulator.protocol import reasons
from amps_emulator.protocol.codec import frame_raw, json_str
from amps_emulator.protocol.msgtypes import CodecError
from amps_emulator.protocol.topics import display_name
from amps_emulator.server.delivery.fanout import delivery_tail, oof_frame
from amps_emulator.server.delivery.group_state import Group, Member
from amps_emulator.server.delivery.live_state import LiveState
from amps_emulator.sow import delta_message
from amps_emulator.sow.aggregate import scalar
from amps_emulator.sow.delta import encode as encode_doc

if TYPE_CHECKING:
    from amps_emulator.sow import Record, Topic
    from amps_emulator.sow.aggregate import Aggregation, Aggregator

__all__ = ["AggregatedSubscription", "GroupTracker"]

_NONE: Any = object()  # "in no group" (a group key may itself be None: the NULL group)


class GroupTracker:
    """Which records of ``topic`` are in which group of an aggregation, and each group's
    last aggregated record. ``domain`` seeds the groups' SowKeys.

    Each group keeps running state (:class:`.group_state.Group`): a record's change takes
    its old contribution away and adds its new one, so it costs O(1) (O(log n) for MIN and
    MAX), not the group's size. ``incremental=False`` recomputes a touched group from all
    its records instead (the reference the running state is tested against)."""

    def __init__(self, topic: Topic, spec: Aggregation, domain: str,
                 encode: Callable[[Any], bytes] = encode_doc, incremental: bool = True) -> None:
        """``encode``: writes the aggregated records (the output message type's codec)."""
        self.topic = topic
        self.spec = spec
        self.domain = domain
        self.encode = encode
        self.incremental = incremental
        self._agg = spec.aggregator(domain, encode)  # (reads argument values, builds records)
        self._group_of = self._agg._key
        self._members: dict[Any, set[str]] = {}  # (recomputing) group -> its SowKeys
        self._groups: dict[Any, Group] = {}  # (incremental) group -> its state
        self._group: dict[str, Any] = {}  # SowKey -> its group
        self._token = 0
        self.last: dict[Any, Record] = {}  # group -> its last aggregated record

    def __contains__(self, skey: str) -> bool:
        return skey in self._group

    def load(self, records: list[Record]) -> list[Record]:
        """Start from ``records`` (the members); returns the groups' aggregated records."""
        agg = self.spec.aggregator(self.domain, self.encode)
        agg.add(records)
        results = agg.results()
        self.adopt(records, agg, results)
        return results

    def adopt(self, records: list[Record], agg: Aggregator,
              results: list[Record]) -> None:
        """Start from ``records`` already aggregated by ``agg`` into ``results``."""
        group_of = self._group_of
        for rec in records:
            g = group_of(rec.doc)
            self._group[rec.sow_key] = g
            if self.incremental:
                self._join(g, rec.sow_key, rec)
            else:
                self._members.setdefault(g, set()).add(rec.sow_key)
        self.last = dict(zip(agg.groups, results, strict=False))

    def _join(self, g: Any, skey: str, rec: Record | None) -> None:
        """``skey`` is now in group ``g`` with its record ``rec`` (None: gone already)."""
        state = self._groups.get(g)
        if state is None:
            state = self._groups[g] = Group(self.spec.aggs)
        if rec is None:
            state.ghosts.add(skey)
            return
        self._token += 1
        state.add(Member(self._token, rec.seq, skey, rec.timestamp,
                         tuple(map(scalar, self._agg.arg_values(rec)))))

    def change(self, skey: str, joined: bool, doc: Any
               ) -> list[tuple[Record | None, Record | None]]:
        """``skey`` left its group (if any) and, if ``joined``, is now in ``doc``'s group.
        Returns ``(new, previous)`` for each group touched: its aggregated record now (None:
        the group is gone) and the one before (None: the group is new)."""
        return self.change_many([(skey, joined, doc)])

    def change_many(self, changes: list[tuple[str, bool, Any]]
                    ) -> list[tuple[Record | None, Record | None]]:
        """:meth:`change` for several records at once: each touched group is recomputed
        once, after all of them (no intermediate state is reported)."""
        touched: dict[Any, None] = {}
        incremental = self.incremental
        for skey, joined, doc in changes:
            old = self._group.pop(skey, _NONE)
            if old is not _NONE:
                if incremental:
                    state = self._groups.get(old)
                    if state is not None:
                        state.discard(skey)
                        touched[old] = None
                elif old in self._members:
                    self._members[old].discard(skey)
                    touched[old] = None
            if joined:
                new = self._group[skey] = self._group_of(doc)
                if incremental:
                    self._join(new, skey, self.topic.get(skey))
                else:
                    self._members.setdefault(new, set()).add(skey)
                touched.pop(new, None)
                touched[new] = None  # a group joined comes after one left
        result = self._result if incremental else self._recompute
        return [result(g) for g in touched]

    def _gone(self, group: Any, skeys: Any) -> tuple[None, Record | None]:
        """The group has no record left: forget it (members still listed were removed in
        the same command)."""
        for skey in skeys:
            self._group.pop(skey, None)
        return None, self.last.pop(group, None)

    def _result(self, group: Any) -> tuple[Record | None, Record | None]:
        state = self._groups.get(group)
        if state is None or not state.members:
            if state is not None:
                del self._groups[group]
                return self._gone(group, state.ghosts)
            return self._gone(group, ())
        last_rec = self.topic.get(state.last())
        if last_rec is None:  # (removed, and not told yet): from the records there are
            return self._recompute(group, [*state.members, *state.ghosts])
        previous = self.last.get(group)
        if state.sow_key is None:
            state.sow_key = self._agg.sow_key_of(group)
        out = self.last[group] = self._agg.record_for(group, state.values(), last_rec,
                                                      state.latest(), state.sow_key)
        return out, previous

    def _recompute(self, group: Any, keys: Any = None) -> tuple[Record | None, Record | None]:
        if keys is None:
            keys = self._members.get(group) or ()
        recs = [r for r in map(self.topic.get, keys) if r is not None]
        previous = self.last.get(group)
        if not recs:
            self._groups.pop(group, None)
            return self._gone(group, self._members.pop(group, keys))
        recs.sort(key=lambda r: (r.seq, r.sow_key))  # the topic's natural order
        out = self.last[group] = self.spec.aggregate(recs, self.domain, self.encode)[0]
        return out, previous


class AggregatedSubscription(LiveState):
    #: what of its command a replace must keep (set by the handler that made it)
    definition: Any = None

    def __init__(self, topic: Any, spec: Aggregation, delta: bool,
                 encode: Callable[[Any], bytes] | None = None) -> None:
        """``topic``: the SOW topic (or what reads like one: a queue's available messages,
        ``server.services.queue_views``); ``encode`` writes the groups (the topic's type)."""
        super().__init__()
        self.topic = topic
        self.delta = delta
        self.encode = encode = topic.encode if encode is None else encode
        self.groups = GroupTracker(topic, spec, topic.spec.name, encode)

    def load(self, records: list[Record], agg: Aggregator, results: list[Record]) -> None:
        """The records matching at the query's snapshot, and the query's aggregation."""
        self.groups.adopt(records, agg, results)

    def published(self, msg: Any) -> None:
        if msg.sow_key is None:
            return
        if self._defer(msg):
            return
        f = self.sub.filter
        joined = f is None or bool(f(msg.doc, msg.context()))
        self._send(self.groups.change(msg.sow_key, joined, msg.doc),
                   reasons.OOF_MATCH if joined else self.leave_reason(msg))

    def removed(self, rec: Record, reason: str) -> None:
        if self._defer(rec, reason):
            return
        if rec.sow_key in self.groups:
            self._send(self.groups.change(rec.sow_key, False, None), reason)

    def removed_many(self, records: list[Record], reason: str) -> None:
        """The records one command removed: each group they leave is sent once."""
        if self._pending is not None:
            for rec in records:
                self._defer(rec, reason)
            return
        gone = [(r.sow_key, False, None) for r in records if r.sow_key in self.groups]
        if gone:
            self._send(self.groups.change_many(gone), reason)

    def _send(self, touched: list[tuple[Record | None, Record | None]],
              reason: str) -> None:
        sub = self.sub
        name = self.topic.spec.name
        head = b'{"c":"p","t":' + json_str(display_name(name)) + b',"sids":' + json_str(sub.sub_id)
        for out, previous in touched:
            if out is None:
                if previous is not None and "oof" in sub.options:
                    sub.conn.send(oof_frame(name, sub.sub_id, previous.sow_key,
                                            reason, previous.data))
                continue
            body = out.data
            if self.delta and previous is not None:
                change, _ = delta_message(previous.doc, out.doc, self.groups.spec.grouping)
                try:
                    body = self.encode(change)
                except CodecError:  # the type cannot write this delta: the whole record
                    body = out.data
            sub.conn.send(frame_raw(head + delivery_tail(None, None, out.sow_key, None, None),
                                    body))
            if self.delivered is not None:
                self.delivered(sub.conn, name, out.data, None, None)
