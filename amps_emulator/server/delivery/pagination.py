"""Paginated subscriptions: ``sow_and_subscribe`` with both ``top_n`` and ``skip_n``.

The subscriber sees the topic as if only the records in its *window* existed: the records
that match its filter, sorted by its ``orderby`` (by SowKey without one; ties by SowKey), from
position ``skip_n`` for ``top_n`` records.  :class:`PageWindow` keeps the sorted list of every
matching record's sort key (not the bodies: those are read from the SOW when needed) and, for
each change to the topic, works out what the window gained and lost:

* the changed record is (still) in the window: it is delivered;
* a record that moved into the window because another one moved or left: delivered, with
  its current body from the SOW;
* a record that left the window (it no longer matches, was deleted or expired, or was pushed
  out by a record sorting before it): an ``oof`` if the subscription asked for them, with
  reason ``deleted``/``expired`` for a removal and ``match`` otherwise.

The window starts from the query's snapshot (read in steps, like any long query); changes
made meanwhile wait and are applied, and delivered, right after the query's results, so
the window the query returns and the one maintained afterwards agree.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import TYPE_CHECKING, Any

from amps_emulator.protocol.codec import frame_raw, json_str
from amps_emulator.protocol.filter import MessageContext
from amps_emulator.protocol.topics import display_name
from amps_emulator.server.core.message import UNDECODED
from amps_emulator.server.delivery.fanout import delivery_tail, oof_frame, selected
from amps_emulator.server.delivery.live_state import LiveState
from amps_emulator.sow.query import OrderBy, order_key

if TYPE_CHECKING:
    from amps_emulator.server.core.router import Subscription
    from amps_emulator.sow import Record, Topic

__all__ = ["PageWindow"]


class PageWindow(LiveState):
    def __init__(self, sub: Subscription | None, topic: Topic, order: OrderBy | None,
                 top_n: int, skip_n: int) -> None:
        super().__init__()
        self.sub = sub
        self.topic = topic
        self.top_n = top_n
        self.skip_n = skip_n
        self._order_key = order_key(order) if order is not None else (lambda doc: ())
        self._sorted: list[tuple[tuple, str]] = []  # (orderby key, SowKey), ascending
        self._keys: dict[str, tuple[tuple, str]] = {}

    # ---- state ----------------------------------------------------------------------------

    def _key(self, skey: str, doc: Any) -> tuple[tuple, str]:
        return (self._order_key(doc), skey)

    def load(self, records: list[Record]) -> None:
        """The records matching at the query's snapshot (the changes since then wait in
        :meth:`catch_up`)."""
        for rec in records:
            k = self._keys[rec.sow_key] = self._key(rec.sow_key, rec.doc)
            self._sorted.append(k)
        self._sorted.sort()

    def window(self) -> list[str]:
        """The SowKeys in the window, in order."""
        return [skey for _, skey in self._sorted[self.skip_n:self.skip_n + self.top_n]]

    def _drop(self, skey: str) -> None:
        k = self._keys.pop(skey, None)
        if k is not None:
            del self._sorted[bisect_left(self._sorted, k)]

    def _matches(self, doc: Any, ctx: MessageContext) -> bool:
        f = self.sub.filter
        return f is None or bool(f(doc, ctx))

    # ---- changes ---------------------------------------------------------------------------

    def published(self, msg: Any) -> None:
        """A publish stored ``msg`` (its ``sow_key``, ``doc``, ``body`` as stored)."""
        skey = msg.sow_key
        if skey is None:
            return
        if self._defer(msg):
            return
        before = self.window()
        self._drop(skey)
        matched = self._matches(msg.doc, msg.context())
        if matched:
            k = self._keys[skey] = self._key(skey, msg.doc)
            insort(self._sorted, k)
        self._emit(before, skey, msg, "match" if matched else self.leave_reason(msg))

    def removed(self, rec: Record, reason: str) -> None:
        """``rec`` left the topic (``reason``: deleted or expired)."""
        if self._defer(rec, reason):
            return
        if rec.sow_key not in self._keys:
            return
        before = self.window()
        self._drop(rec.sow_key)
        self._emit(before, rec.sow_key, None, reason, rec)

    def _selected(self, rec: Record) -> bytes:
        """A record as the subscription's select list keeps it, read and written in the
        topic's type."""
        sel = self.sub.select
        if sel is None:
            return rec.data
        topic = self.topic
        return selected(rec.data, sel, rec.doc_by(topic.decode_body), topic.encode)

    def _selected_msg(self, msg: Any) -> bytes:
        sel = self.sub.select
        return msg.body if sel is None else selected(msg.body, sel, msg.doc, self.topic.encode)

    def _selected_doc(self, doc: Any) -> bytes:
        """A message known only by its tree (the previous one), written in the topic's type
        as the subscription's select list keeps it."""
        body = self.topic.encode(doc)
        sel = self.sub.select
        return body if sel is None else selected(body, sel, doc, self.topic.encode)

    def _emit(self, before: list[str], changed: str, msg: Any, reason: str,
              removed: Record | None = None) -> None:
        after = self.window()
        conn = self.sub.conn
        sid = json_str(self.sub.sub_id)
        name = self.topic.spec.name
        was = set(before)
        now = set(after)
        oof = "oof" in self.sub.options
        for skey in before if oof else ():
            if skey in now:
                continue
            if skey == changed and removed is not None:
                conn.send(oof_frame(name, self.sub.sub_id, skey, reason,
                                    self._selected(removed), removed.bookmark or None))
            elif skey == changed:  # it no longer matches (or sorts elsewhere): the message;
                # reason entitlement when the read filter hides it (the previous one, then)
                previous = msg.previous_doc
                if reason == "entitlement" and previous is not UNDECODED and previous is not None:
                    conn.send(oof_frame(name, self.sub.sub_id, skey, reason,
                                        self._selected_doc(previous), msg.bookmark))
                else:
                    conn.send(oof_frame(name, self.sub.sub_id, skey, "match",
                                        self._selected_msg(msg), msg.bookmark))
            else:
                rec = self.topic.get(skey)
                if rec is not None:
                    conn.send(oof_frame(name, self.sub.sub_id, skey, "match",
                                        self._selected(rec), rec.bookmark or None))
        head = b'{"c":"p","t":' + json_str(display_name(name)) + b',"sids":' + sid
        watch = self.delivered
        for skey in after:
            if skey == changed and msg is not None:
                conn.send(frame_raw(head + delivery_tail(msg.bookmark, msg.correlation_id,
                                                         skey, msg.expiration, None),
                                    self._selected_msg(msg)))
                if watch is not None:
                    watch(conn, name, msg.body, msg.bookmark, msg.correlation_id)
            elif skey not in was:
                rec = self.topic.get(skey)
                if rec is not None:
                    conn.send(frame_raw(head + delivery_tail(rec.bookmark or None, None, skey,
                                                             None, None),
                                        self._selected(rec)))
                    if watch is not None:
                        watch(conn, name, rec.data, rec.bookmark or None, None)
