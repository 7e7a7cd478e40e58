"""``QueueEngine``: one AMPS message queue as a pure state machine.

No IO, no clock, no asyncio: every method takes ``now`` (float seconds, the server's clock)
and returns a list of actions (:mod:`queues.actions`) for the server to carry out and journal
(:mod:`queues.events`). It keeps a pending (leased) set and delivery counts, and exposes ONE
deadline, :meth:`QueueEngine.next_deadline`, for the server to arm a single ``call_at`` that
calls :meth:`QueueEngine.poll`. A message is its journal position and its bookmark; the engine
never holds a body or a topic. The per-message columns, delivery order, timers and the choices
where AMPS documents nothing are described in docs/contributing/internals.md, "The queue engine".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from heapq import heappop, heappush
from typing import Any

from .actions import (
    REASON_FORCED_EXPIRE,
    REASON_MAX_CANCELS,
    REASON_MAX_DELIVERIES,
    REASON_TIME_LIMIT,
    RETURN_CANCEL,
    RETURN_LEASE_EXPIRED,
    RETURN_UNSUBSCRIBE,
    Acked,
    Action,
    Expired,
    QueuedMessage,
    Returned,
)
from .codes import (
    ACK_OPTIONS,
    AVAIL,
    DONE,
    F_BARRIER,
    F_HEAP,
    F_UNSENT,
    IDX_MASK,
    INACTIVE,
    INF,
    LEASED,
    NOT_REMOVED,
    SENT,
    STATE_NAMES,
    parse_bookmark,
    prio_store,
)
from .columns import Eligible, Sub, SubscriptionBacklog
from .dispatch import QueueDispatch
from .events import QueueCheckpoint

__all__ = ["QueueEngine", "SubscriptionBacklog", "parse_bookmark"]



class QueueEngine(QueueDispatch):
    """One queue. See the module docstring; every public method returns ``list[Action]``."""

    # ------------------------------------------------------------------------------------
    # messages in
    # ------------------------------------------------------------------------------------
    def enqueue(
        self,
        position: int,
        bookmark: str | tuple[int, int],
        now: float,
        *,
        timestamp: float | None = None,
        expiration: float | None = None,
        priority: Any = None,
        is_barrier: bool = False,
    ) -> list[Action]:
        """Add a message (a publish record of an underlying topic that passed the queue's
        Filter). ``timestamp``: when it was logged (default ``now``), the start of its
        Expiration. ``expiration``: the message's own ``e`` in seconds (0 = never expires),
        overriding the queue's Expiration. ``priority``: the Priority expression's value.
        ``is_barrier``: the message matched the BarrierExpression."""
        out: list[Action] = []
        g = self._append(position, bookmark, now if timestamp is None else timestamp,
                         expiration, priority, is_barrier, now)
        if g < 0:
            return out
        j = g - self._base
        plist = self._plist
        if plist is not None and self._st[j] == AVAIL:  # a Priority queue (not in replay)
            key = self._key(j)
            plist.add(key)
            for s in self._sub_list:
                if key < s.cursor:
                    s.cursor = key
        if self._sub_list:
            self._dispatch(now, out)
        return out

    def _append(self, position, bookmark, ts, expiration, priority, is_barrier, now) -> int:
        if position <= self._last_pos:
            raise ValueError(
                f"queue {self.spec.name!r}: position {position} is not after {self._last_pos}"
            )
        pb = parse_bookmark(bookmark)
        if pb is None:
            raise ValueError(f"queue {self.spec.name!r}: bad bookmark {bookmark!r}")
        pid, seq = pb
        self._last_pos = position
        pl = self._pub_last
        if seq > pl.get(pid, -1):
            pl[pid] = seq
        if self._deferred:
            t = self._deferred.pop(pb, None)
            if t is not None and t > now:
                return -1  # acknowledged before it entered the queue: never enters
        g = self._base + len(self._st)
        if self._index is None:
            if seq <= self._last_seq:
                self._build_index()
            else:
                self._last_seq = seq
        if self._index is not None:
            self._index[pb] = g
        # expiration deadline
        fl = 0
        if expiration is not None:
            d = ts + expiration if expiration > 0 else INF
            fl = F_HEAP
        else:
            e = self._expiration
            d = ts + e if e is not None else INF
            if d < self._last_mono:
                fl = F_HEAP
            else:
                self._last_mono = d
        if is_barrier:
            fl |= F_BARRIER
            self._barriers.append(g)
        self._pos.append(position)
        self._pid.append(pid)
        self._seq.append(seq)
        self._holder.append(-1)
        self._dc.append(0)
        self._cc.append(0)
        self._dl.append(d)
        self._fl.append(fl)
        if self._prio:
            self._pr.append(prio_store(priority))
        if self._n_inactive or self._n_active >= self._tqd:
            self._st.append(INACTIVE)
            self._n_inactive += 1
        else:
            self._st.append(AVAIL)
            self._n_active += 1
            self._active_end = len(self._st)
        if fl & F_HEAP and d != INF:
            heappush(self._exp_heap, (d, g))
        return g

    # ------------------------------------------------------------------------------------
    # subscriptions
    # ------------------------------------------------------------------------------------
    def add_subscriber(
        self,
        sub_key: Any,
        now: float,
        *,
        client: Any = None,
        max_backlog: int | None = None,
        eligible: Eligible | None = None,
        backlog: SubscriptionBacklog | None = None,
    ) -> list[Action]:
        """A queue subscription (no bookmark). ``client``: the connection that owns it (for
        ``disconnect`` and strict Leasing; default ``sub_key``). ``max_backlog``: the
        subscribe option (default 1). ``eligible(position) -> bool | None``: the content and
        entitlement filters (None = everything; it answers None while it cannot tell, and
        the server calls :meth:`dispatch` once it can). Returns the first deliveries."""
        if sub_key in self._subs:
            raise ValueError(f"queue {self.spec.name!r}: subscription {sub_key!r} exists")
        private = backlog is None
        if backlog is None:
            backlog = SubscriptionBacklog(self.spec.subscription_limit(max_backlog))
        s = Sub(sub_key, sub_key if client is None else client, self._next_sid, backlog,
                 private, eligible, self._cursor_start())
        self._next_sid += 1
        self._subs[sub_key] = s
        self._sub_list.append(s)
        self._by_sid[s.sid] = s
        out: list[Action] = []
        self._settle(now, out)
        return out

    def replace_subscriber(
        self,
        sub_key: Any,
        now: float,
        *,
        max_backlog: int | None = None,
        eligible: Eligible | None = None,
    ) -> list[Action]:
        """A subscribe with the ``replace`` option: new filter/options, leases kept, backlog
        recomputed (it may now be below the number already leased: nothing more is
        delivered until acks bring it under). Unknown ``sub_key``: same as add."""
        s = self._subs.get(sub_key)
        if s is None:
            return self.add_subscriber(sub_key, now, max_backlog=max_backlog, eligible=eligible)
        if s.private:
            s.bl.limit = self.spec.subscription_limit(max_backlog)
        s.eligible = eligible
        s.cursor = self._cursor_start()
        out: list[Action] = []
        self._settle(now, out)
        return out

    def remove_subscriber(self, sub_key: Any, now: float) -> list[Action]:
        """Unsubscribe (or the subscription's client went away): its leases are broken at
        once and the messages go to other subscriptions."""
        s = self._subs.pop(sub_key, None)
        out: list[Action] = []
        if s is None:
            return out
        self._sub_list.remove(s)
        if s.owed is not None:  # (the barriers it was owed are not sent)
            self._n_owed -= 1
        base = self._base
        for g in sorted(s.leases):
            j = g - base
            self._release(j)
            if self._amo:
                self._finish(j)
            else:
                self._lease_failed(j, now, RETURN_UNSUBSCRIBE, s.key, out)
        del self._by_sid[s.sid]
        self._settle(now, out)
        return out

    def disconnect(self, client: Any, now: float) -> list[Action]:
        """Remove every subscription of ``client``."""
        out: list[Action] = []
        for s in [s for s in self._sub_list if s.client == client]:
            out.extend(self.remove_subscriber(s.key, now))
        return out

    # ------------------------------------------------------------------------------------
    # acknowledgements
    # ------------------------------------------------------------------------------------
    def ack(
        self,
        client: Any,
        bookmarks: str | Iterable[str],
        now: float,
        option: str | None = None,
    ) -> list[Action]:
        """``sow_delete`` with a bookmark or a comma list of them from connection ``client``
        (a subscription's ``client``; by default its ``sub_key``). ``option``: None, "cancel"
        or "expire" (ignored for at-most-once). Unknown bookmarks are ignored, except ones
        newer than anything this queue has seen, which are kept for DeferredAckExpiration
        and stop that message from ever entering the queue."""
        if isinstance(bookmarks, str):
            bookmarks = bookmarks.split(",")
        targets: list[int] = []
        out: list[Action] = []
        for text in bookmarks:
            text = text.strip()
            if not text:
                continue
            pb = parse_bookmark(text)
            if pb is None:
                continue
            j = self._find_bookmark(pb)
            if j >= 0:
                targets.append(j)
            elif option != "cancel" and pb[1] > self._pub_last.get(pb[0], -1):
                self._defer(pb, now, out)
        return self._ack_columns(client, targets, now, option, out)

    def ack_positions(
        self,
        client: Any,
        positions: Iterable[int],
        now: float,
        option: str | None = None,
    ) -> list[Action]:
        """Like :meth:`ack` with journal positions: for ``sow_delete`` with a filter, the
        server evaluates the filter over :meth:`messages` and acks the positions that match."""
        targets = [j for j in (self._find_position(p) for p in positions) if j >= 0]
        return self._ack_columns(client, targets, now, option, [])

    def _ack_columns(self, client, targets, now, option, out) -> list[Action]:
        if option not in ACK_OPTIONS:
            raise ValueError(f"unknown acknowledgement option {option!r}")
        st, pos = self._st, self._pos
        amo = self._amo
        for j in targets:
            prev = st[j]
            if prev == DONE:
                continue
            if prev == LEASED or prev == SENT:
                if self._strict and self._by_sid[self._holder[j]].client != client:
                    continue  # strict Leasing: leased to another client, no effect
            if amo or not option:
                if prev == LEASED or prev == SENT:
                    self._release(j)
                self._finish(j)
                out.append(Acked(pos[j], self._bm(j)))
            elif option == "cancel":
                if prev != LEASED:
                    continue  # nothing to return
                holder = self._release(j)
                self._lease_failed(j, now, RETURN_CANCEL, holder.key, out)
            else:  # expire
                if prev == LEASED:
                    self._release(j)
                self._finish(j)
                out.append(Expired(pos[j], self._bm(j), REASON_FORCED_EXPIRE))
        self._settle(now, out)
        return out

    def _defer(self, pb: tuple[int, int], now: float, out: list[Action]) -> None:
        t = now + self.spec.deferred_ack_expiration
        self._deferred[pb] = t
        if t < self._deferred_purge_at:
            self._deferred_purge_at = t
        out.append(Acked(None, f"{pb[0]}|{pb[1]}|"))

    def remove(self, bookmarks: Iterable[str], now: float) -> tuple[list[int], list[Action]]:
        """Messages that left the queue on another instance of a replicated queue (an ack,
        an expiry or an at-most-once send journaled there and replicated here): they leave
        this queue too, whatever their state here (a lease here ends). A bookmark newer than
        anything this queue has seen is kept for DeferredAckExpiration, as for a client's
        ack. Returns the positions removed, and what followed (deliveries to subscriptions
        that had a removed message leased); the removals themselves are not actions: the
        instance that made them journaled them."""
        removed: list[int] = []
        out: list[Action] = []
        st = self._st
        for text in bookmarks:
            pb = parse_bookmark(text.strip())
            if pb is None:
                continue
            j = self._find_bookmark(pb)
            if j < 0:
                if pb[1] > self._pub_last.get(pb[0], -1):
                    self._defer(pb, now, [])
                continue
            prev = st[j]
            if prev == DONE:
                continue
            if prev == LEASED or prev == SENT:
                self._release(j)
            self._finish(j)
            removed.append(self._pos[j])
        self._settle(now, out)
        return removed, out

    # ------------------------------------------------------------------------------------
    # time
    # ------------------------------------------------------------------------------------
    def poll(self, now: float) -> list[Action]:
        """Run everything due at ``now``: lease expiries (redelivery), expirations, and
        delivery. Call when ``now >= next_deadline()``; harmless at any other time. Call it
        once after :meth:`replay` too."""
        out: list[Action] = []
        st, base = self._st, self._base
        h = self._lease_heap
        while h and h[0][0] <= now:
            _, g, dc = heappop(h)
            j = g - base
            if j < 0 or self._dc[j] != dc:
                continue
            s = st[j]
            if s == LEASED:
                holder = self._release(j)
                self._lease_failed(j, now, RETURN_LEASE_EXPIRED, holder.key, out)
            elif s == SENT:  # at-most-once: the lease period frees the backlog slot
                self._release(j)
                self._finish(j)
        self._expire_due(now, out)
        if self._deferred and now >= self._deferred_purge_at:
            d = self._deferred
            for k in [k for k, t in d.items() if t <= now]:
                del d[k]
            self._deferred_purge_at = min(d.values(), default=INF)
        self._settle(now, out)
        return out

    def next_deadline(self) -> float | None:
        """The earliest instant at which :meth:`poll` has something to do (None = nothing
        pending). Arm ONE timer for it; re-read after every engine call."""
        best = INF
        st, base, dc = self._st, self._base, self._dc
        h = self._lease_heap
        while h:
            _, g, c = h[0]
            j = g - base
            if j >= 0 and dc[j] == c and (st[j] == LEASED or st[j] == SENT):
                best = h[0][0]
                break
            heappop(h)
        eh = self._exp_heap
        dl = self._dl
        while eh:
            d, g = eh[0]
            j = g - base
            if j >= 0 and st[j] == AVAIL and dl[j] == d:
                if d < best:
                    best = d
                break
            heappop(eh)
        j = self._exp_j
        end = self._active_end
        fl = self._fl
        while True:
            j = st.find(AVAIL, j, end)
            if j < 0:
                j = end
                break
            if fl[j] & F_HEAP:
                j += 1
                continue
            if dl[j] < best:
                best = dl[j]
            break
        self._exp_j = j
        return None if best == INF else best

    def _expire_due(self, now: float, out: list[Action]) -> None:
        st, fl, dl = self._st, self._fl, self._dl
        j = self._exp_j
        end = self._active_end
        while True:
            j = st.find(AVAIL, j, end)
            if j < 0:
                j = end
                break
            if fl[j] & F_HEAP:
                j += 1
                continue
            if dl[j] > now:
                break
            self._finish(j)
            out.append(Expired(self._pos[j], self._bm(j), REASON_TIME_LIMIT))
            j += 1
        self._exp_j = j
        eh = self._exp_heap
        base = self._base
        while eh and eh[0][0] <= now:
            d, g = heappop(eh)
            j = g - base
            if j >= 0 and st[j] == AVAIL and dl[j] == d:
                self._finish(j)
                out.append(Expired(self._pos[j], self._bm(j), REASON_TIME_LIMIT))

    def dispatch(self, now: float) -> list[Action]:
        """Deliver whatever can be delivered now (after a shared backlog gained room through
        another engine, or after the server changed what ``eligible`` answers)."""
        out: list[Action] = []
        for s in self._sub_list:
            s.cursor = self._cursor_start()
        self._settle(now, out)
        return out

    def delivery_waits(self, position: int, sub_key: Any) -> None:
        """The server has not sent the delivery of ``position`` to ``sub_key`` yet (it
        waits for its record). Until :meth:`delivery_sent`, that lease is no delivery: if it
        ends first (its lease period, a cancel, the subscription's end), the message comes
        back without it counting toward MaxDeliveries or its ``delivery_count``. Nothing to
        journal; no effect unless the message is leased to ``sub_key``."""
        j = self._leased_to(position, sub_key)
        if j >= 0:
            self._fl[j] |= F_UNSENT

    def delivery_sent(self, position: int, sub_key: Any) -> None:
        """The delivery :meth:`delivery_waits` spoke of was sent after all: it counts."""
        j = self._leased_to(position, sub_key)
        if j >= 0:
            self._fl[j] &= ~F_UNSENT & 0xFF

    def _leased_to(self, position: int, sub_key: Any) -> int:
        j = self._find_position(position)
        if j < 0 or self._st[j] != LEASED:
            return -1
        s = self._subs.get(sub_key)
        return j if s is not None and self._holder[j] == s.sid else -1

    # ------------------------------------------------------------------------------------
    # state transitions
    # ------------------------------------------------------------------------------------
    def _lease_failed(self, j: int, now: float, reason: str, sub_key: Any, out: list) -> None:
        """An at-least-once lease ended without an ack (already released): return the
        message to the queue, or expire it when a limit says so."""
        fl = self._fl
        unsent = bool(fl[j] & F_UNSENT)
        if unsent:  # never sent: the lease was no delivery
            fl[j] &= ~F_UNSENT & 0xFF
            p = self._pos[j]
            self._unsent[p] = self._unsent.get(p, 0) + 1
        reasons = []
        if self._dl[j] <= now:
            reasons.append(REASON_TIME_LIMIT)
        if reason == RETURN_CANCEL:
            c = self._cc[j] + 1
            self._cc[j] = c if c < 0xFFFF else 0xFFFF
            if self._max_cancels and c >= self._max_cancels:
                reasons.append(REASON_MAX_CANCELS)
        if self._max_deliveries and self._deliveries(j) >= self._max_deliveries:
            reasons.append(REASON_MAX_DELIVERIES)
        if reasons:
            self._finish(j)
            out.append(Expired(self._pos[j], self._bm(j), ",".join(reasons)))
            return
        out.append(Returned(self._pos[j], self._bm(j), reason, sub_key, unsent))
        self._st[j] = AVAIL
        g = self._base + j
        d = self._dl[j]
        if d != INF and (self._fl[j] & F_HEAP or j < self._exp_j):
            self._fl[j] |= F_HEAP
            heappush(self._exp_heap, (d, g))
        if self._prio:
            key = self._key(j)
            for s in self._sub_list:
                if key < s.cursor:
                    s.cursor = key
        else:
            for s in self._sub_list:
                if g < s.cursor:
                    s.cursor = g

    # ------------------------------------------------------------------------------------
    # dispatch
    # ------------------------------------------------------------------------------------
    # ------------------------------------------------------------------------------------
    # lookups and views
    # ------------------------------------------------------------------------------------
    def messages(self, *, include_leased: bool = False,
                 now: float | None = None) -> Iterator[QueuedMessage]:
        """The queue's messages in delivery order, read-only: available ones (what a ``sow``
        query or a view over the queue shows), plus leased ones with ``include_leased``
        (what a ``sow_delete`` with a filter may acknowledge). Inactive messages (beyond
        TargetQueueDepth) and at-most-once messages already sent are never included;
        ``now`` hides messages whose expiration has passed but that ``poll`` has not yet
        removed. Materialise (``list(...)``) before calling any other engine method."""
        st, base = self._st, self._base
        if self._plist is not None:  # a Priority queue
            cols: Iterable[int] = [(k & IDX_MASK) - base for k in self._plist]
        else:
            cols = range(self._head, self._active_end)
        dl = self._dl
        for j in cols:
            s = st[j]
            if s == AVAIL:
                if now is not None and dl[j] <= now:
                    continue
            elif not (s == LEASED and include_leased):
                continue
            holder = self._holder[j]
            pr = self._pr[j] - 1 if self._prio and self._pr[j] else None
            yield QueuedMessage(
                self._pos[j], self._bm(j), STATE_NAMES[s],
                self._by_sid[holder].key if holder >= 0 else None,
                self._deliveries(j), self._cc[j], None if dl[j] == INF else dl[j], pr,
                bool(self._fl[j] & F_BARRIER),
            )

    @property
    def low_water_position(self) -> int:
        """Every queued message at or before this journal position has left the queue for
        good (acked, expired, or sent at-most-once): recovery resumes after it."""
        self._advance_head()
        st = self._st
        j = self._head
        if self._amo and j < len(st):
            m = NOT_REMOVED.search(st, j)
            j = m.start() if m else len(st)
        return self._pos[j - 1] if j > 0 else self._low_water

    def checkpoint(self) -> QueueCheckpoint:
        return QueueCheckpoint(self.spec.name, self.spec.recovery_point, self.low_water_position)

    @property
    def depth(self) -> int:
        """Messages in the queue: available + leased + inactive."""
        return self._n_active + self._n_inactive

    @property
    def leased_count(self) -> int:
        """Outstanding leases (and unacked at-most-once sends): what MaxBacklog limits."""
        return self._outstanding

    @property
    def available_count(self) -> int:
        return self._n_active - (0 if self._amo else self._outstanding)

    @property
    def inactive_count(self) -> int:
        return self._n_inactive

    def subscriber_backlog(self, sub_key: Any) -> tuple[int, int]:
        """``(leased, limit)`` of a subscription."""
        bl = self._subs[sub_key].bl
        return bl.leased, bl.limit

    def position_of(self, bookmark: str) -> int | None:
        """The journal position of the queued message with ``bookmark`` (None: not queued)."""
        pb = parse_bookmark(bookmark)
        j = -1 if pb is None else self._find_bookmark(pb)
        return None if j < 0 or self._st[j] == DONE else self._pos[j]

    def bookmark_at(self, position: int) -> str | None:
        """The bookmark of the queued message at ``position`` (None: not queued)."""
        j = self._find_position(position)
        return None if j < 0 or self._st[j] == DONE else self._bm(j)

    def holds(self, position: int) -> bool:
        """Whether the message at ``position`` is still in the queue (not acked or expired)."""
        j = self._find_position(position)
        return j >= 0 and self._st[j] != DONE

    def is_available(self, position: int) -> bool:
        """Whether the message at ``position`` is available: queued and active, not leased."""
        j = self._find_position(position)
        return j >= 0 and self._st[j] == AVAIL

    def subscribers(self) -> list[Any]:
        return [s.key for s in self._sub_list]

    def __len__(self) -> int:
        return self.depth
