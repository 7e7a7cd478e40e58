"""Aggregated subscriptions: ``sow_and_subscribe`` (or ``sow_and_delta_subscribe``) with the
``grouping=[...]`` and ``projection=[...]`` options.

The query part returns one aggregated record per group (:mod:`server.sow_aggregate`); the
subscription then keeps the groups up to date, as a view with the same definition would:

* each change to the topic (publish, delete, expiration) updates the groups it touches: the
  group the record left and the group it joined (the subscription's filter decides whether
  the record counts at all);
* a touched group that still has records is recomputed from its records' current state and
  delivered (its SowKey in ``k``); for ``sow_and_delta_subscribe`` only the fields that
  changed, plus the grouping fields;
* a group left without records is gone: ``oof`` subscriptions get its last aggregated record,
  reason ``deleted`` or ``expired`` when a removal emptied it, ``match`` otherwise.

The groups' membership is read with the query's snapshot; changes made while the query is
still running wait and are applied (and delivered) right after it, as for paginated
subscriptions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from protocol import reasons
from protocol.codec import frame_raw, json_str
from sow import delta_message
from sow.delta import encode as encode_doc

from .delivery import delivery_tail, oof_frame

if TYPE_CHECKING:
    from server.router import Subscription
    from sow import Record, Topic
    from sow.aggregate import Aggregation, Aggregator

__all__ = ["AggregatedSubscription"]

_NONE: Any = object()  # "in no group" (a group key may itself be None: the NULL group)


class AggregatedSubscription:
    def __init__(self, topic: "Topic", spec: "Aggregation", delta: bool) -> None:
        self.sub: "Subscription | None" = None
        self.topic = topic
        self.spec = spec
        self.delta = delta
        self._group_of = spec.aggregator(topic.spec.name)._key
        self._members: dict[Any, set[str]] = {}
        self._group: dict[str, Any] = {}  # SowKey -> its group
        self._last: dict[Any, "Record"] = {}  # group -> its last aggregated record
        self._pending: list[tuple[Any, ...]] | None = []

    # ---- state -----------------------------------------------------------------------------

    def load(self, records: list["Record"], agg: "Aggregator",
             results: list["Record"]) -> None:
        """The records matching at the query's snapshot, and the query's aggregation."""
        group_of = self._group_of
        for rec in records:
            g = group_of(rec.doc)
            self._group[rec.sow_key] = g
            self._members.setdefault(g, set()).add(rec.sow_key)
        self._last = dict(zip(agg.groups, results))

    def catch_up(self) -> None:
        """Apply, and deliver, what changed while the query ran; then follow live."""
        pending, self._pending = self._pending, None
        for change in pending or ():
            if len(change) == 1:
                self.published(change[0])
            else:
                self.removed(*change)

    # ---- changes ---------------------------------------------------------------------------

    def published(self, msg: Any) -> None:
        if msg.sow_key is None:
            return
        if self._pending is not None:
            self._pending.append((msg,))
            return
        f = self.sub.filter  # type: ignore[union-attr]
        joined = f is None or bool(f(msg.doc, msg.context()))
        self._change(msg.sow_key, joined, msg.doc, reasons.OOF_MATCH)

    def removed(self, rec: "Record", reason: str) -> None:
        if self._pending is not None:
            self._pending.append((rec, reason))
            return
        if rec.sow_key in self._group:
            self._change(rec.sow_key, False, None, reason)

    def _change(self, skey: str, joined: bool, doc: Any, reason: str) -> None:
        """``skey`` left its group (if any) and, if ``joined``, is now in ``doc``'s."""
        old = self._group.pop(skey, _NONE)
        if old is not _NONE:
            self._members[old].discard(skey)
        new = _NONE
        if joined:
            new = self._group[skey] = self._group_of(doc)
            self._members.setdefault(new, set()).add(skey)
        if old is not _NONE and old != new:
            self._emit(old, reason)
        if new is not _NONE:
            self._emit(new, reason)

    def _emit(self, group: Any, reason: str) -> None:
        sub = self.sub
        name = self.topic.spec.name
        keys = self._members.get(group) or ()
        recs = [r for r in map(self.topic.get, keys) if r is not None]
        if not recs:
            self._members.pop(group, None)
            gone = self._last.pop(group, None)
            if gone is not None and "oof" in sub.options:  # type: ignore[union-attr]
                sub.conn.send(oof_frame(name, sub.sub_id, gone.sow_key, reason,  # type: ignore
                                        gone.data))
            return
        recs.sort(key=lambda r: (r.seq, r.sow_key))  # the topic's natural order
        out = self.spec.aggregate(recs, name)[0]
        previous = self._last.get(group)
        self._last[group] = out
        body = out.data
        if self.delta and previous is not None:
            change, _ = delta_message(previous.doc, out.doc, self.spec.grouping)
            body = encode_doc(change)
        head = b'{"c":"p","t":' + json_str(name) + b',"sids":' + json_str(sub.sub_id)  # type: ignore
        sub.conn.send(frame_raw(head + delivery_tail(None, None, out.sow_key, None, None),  # type: ignore
                                body))
