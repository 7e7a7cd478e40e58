"""Delivery: which available message goes to which subscription, and when.

:class:`QueueDispatch` adds to :class:`~queues.columns.QueueState` the dispatch loop
(``_dispatch``, ``_pick_priority`` for Priority queues, ``_choose`` for the fairness model),
leasing, TargetQueueDepth activation, barrier release, and ``_settle``, which ends every
engine operation: activate, dispatch, then free the columns of messages that left
(:mod:`queues.compaction`).
"""

from __future__ import annotations

from heapq import heappush

from .actions import REASON_TIME_LIMIT, Acked, Deliver, Expired
from .codes import AVAIL, F_HEAP, FAST, IDX_MASK, INACTIVE, INF, KEY_END, LEASED, ROUND_ROBIN, SENT
from .columns import QueueState, Sub
from .compaction import compact_prefix, compact_sparse

__all__ = ["QueueDispatch"]


class QueueDispatch(QueueState):
    """Delivery over a queue's state; :class:`~queues.engine.QueueEngine` builds on it."""

    def _settle(self, now: float, out: list) -> None:
        if self._n_inactive:
            self._activate(now, out)
        if self._sub_list:
            self._dispatch(now, out)
        self._advance_head()
        n, h = len(self._st), self._head
        if h >= self._compact_min and h * 2 >= n:
            compact_prefix(self)
        else:
            live = self._n_active + self._n_inactive + (self._outstanding if self._amo else 0)
            holes = n - h - live
            if holes >= self._sparse_min and holes > self._sparse_ratio * live:
                compact_sparse(self)

    def _activate(self, now: float, out: list) -> None:
        """TargetQueueDepth: move inactive messages into the active queue while it is short."""
        st, tqd = self._st, self._tqd
        while self._n_inactive and self._n_active < tqd:
            j = self._active_end
            self._active_end = j + 1
            if st[j] != INACTIVE:
                continue  # acknowledged before it became active
            self._n_inactive -= 1
            st[j] = AVAIL
            self._n_active += 1
            d = self._dl[j]
            if d <= now:
                self._finish(j)
                out.append(Expired(self._pos[j], self._bm(j), REASON_TIME_LIMIT))
            elif self._fl[j] & F_HEAP and d != INF:
                heappush(self._exp_heap, (d, self._base + j))
        if not self._n_inactive:
            self._active_end = len(st)

    def _dispatch(self, now: float, out: list) -> None:
        subs = self._sub_list
        if self._n_owed:
            self._pay_owed(out)
        st, pos = self._st, self._pos
        mb = self._max_backlog
        while True:
            if self._n_inactive:
                self._activate(now, out)
            end = self._active_end
            if self._barriers:
                self._advance_head()
                bj = self._barriers[0] - self._base
                if bj == self._head:
                    self._release_barrier(bj, now, out)
                    continue
                if bj < end:
                    end = bj
            if mb is not None and self._outstanding >= mb:
                return
            if self._prio:
                best, contenders = self._pick_priority(subs)
                if contenders is None:
                    return
                j = (best & IDX_MASK) - self._base
            else:
                base = self._base
                head = self._head
                j = end
                contenders = None
                for s in subs:
                    bl = s.bl
                    if bl.leased >= bl.limit or s.owed is not None:
                        continue  # (no room, or owed a barrier first)
                    c = s.cursor - base
                    if c < head:
                        c = head
                    el = s.eligible
                    while True:
                        k = st.find(AVAIL, c, end)
                        if k < 0:
                            k = end
                            break
                        if el is None or el(pos[k]):
                            break
                        c = k + 1
                    s.cursor = base + k
                    if k < j:
                        j = k
                        contenders = [s]
                    elif k == j and k < end and contenders is not None:
                        contenders.append(s)
                if contenders is None:
                    return
            s = contenders[0] if len(contenders) == 1 else self._choose(contenders)
            if self._fair == ROUND_ROBIN:
                self._rr_last = s.sid
            self._lease(s, j, now, out)

    def _pick_priority(self, subs: list[Sub]) -> tuple[int, list[Sub] | None]:
        """The highest-priority key some subscription with room can take, and those that can."""
        best = KEY_END
        contenders: list[Sub] | None = None
        st, pos, base = self._st, self._pos, self._base
        plist = self._plist
        if plist is None:  # not a Priority queue
            return best, None
        for s in subs:
            bl = s.bl
            if bl.leased >= bl.limit or s.owed is not None:
                continue
            el = s.eligible
            found = KEY_END
            if s.cursor < best:
                for key in plist.iter_from(s.cursor):
                    if key > best:
                        break
                    j = (key & IDX_MASK) - base
                    if st[j] == AVAIL and (el is None or el(pos[j])):
                        found = key
                        break
                    s.cursor = key + 1
                else:
                    s.cursor = KEY_END
                if found != KEY_END:
                    s.cursor = found
            else:
                found = s.cursor if s.cursor == best else KEY_END
                if found == best and found != KEY_END:
                    j = (found & IDX_MASK) - base
                    if not (st[j] == AVAIL and (el is None or el(pos[j]))):
                        found = KEY_END
            if found < best:
                best = found
                contenders = [s]
            elif found == best and found != KEY_END and contenders is not None:
                contenders.append(s)
        return best, contenders

    def _choose(self, contenders: list[Sub]) -> Sub:
        f = self._fair
        if f == FAST:
            return contenders[0]
        if f == ROUND_ROBIN:
            last = self._rr_last
            for s in contenders:
                if s.sid > last:
                    return s
            return contenders[0]
        # proportional: lowest leased/limit; ties go to the first found
        best = contenders[0]
        bl_b = best.bl
        for s in contenders[1:]:
            bl = s.bl
            if bl.leased * bl_b.limit < bl_b.leased * bl.limit:
                best, bl_b = s, bl
        return best

    def _lease(self, s: Sub, j: int, now: float, out: list) -> None:
        st = self._st
        g = self._base + j
        self._holder[j] = s.sid
        dc = self._dc[j] + 1
        self._dc[j] = dc
        s.bl.leased += 1
        s.leases.add(g)
        self._outstanding += 1
        if self._amo:
            st[j] = SENT  # at-most-once: removed from the queue as it is sent
            self._n_active -= 1
            if self._plist is not None:
                self._plist.discard(self._key(j))
        else:
            st[j] = LEASED
        lp = self._lease_period
        if lp is not None:
            exp = now + lp
            heappush(self._lease_heap, (exp, g, dc))
        else:
            exp = None
        out.append(Deliver(s.key, self._pos[j], f"{self._pid[j]}|{self._seq[j]}|", exp,
                           self._deliveries(j) if self._unsent else dc))

    def _release_barrier(self, bj: int, now: float, out: list) -> None:
        """All messages before the barrier are acknowledged: deliver it to every current
        subscription whose filter matches (backlog ignored) and remove it.

        A subscription whose filter cannot tell yet (``eligible`` answers None: the server
        reads the barrier's record off the loop, or the subscription waits behind another
        record) is owed the barrier: it takes nothing else until a later dispatch (the server
        asks for one once the filter can tell) delivers the barrier to it, or not, as its
        filter says; that ``Deliver`` comes after the barrier's ``Acked``."""
        p, bm = self._pos[bj], self._bm(bj)
        if self._dl[bj] <= now:
            self._finish(bj)
            out.append(Expired(p, bm, REASON_TIME_LIMIT))
            return
        self._dc[bj] = 1
        for s in self._sub_list:
            if s.owed is not None:  # behind a barrier it is owed still: this one waits too
                s.owed.append((p, bm))
                continue
            el = s.eligible
            takes = True if el is None else el(p)
            if takes is None:
                s.owed = [(p, bm)]
                self._n_owed += 1
            elif takes:
                out.append(Deliver(s.key, p, bm, None, 1, True))
        self._finish(bj)
        out.append(Acked(p, bm, True))

    def _pay_owed(self, out: list) -> None:
        """Deliver the barriers each subscription is owed, in order, as far as its filter
        can tell now (see ``_release_barrier``)."""
        for s in self._sub_list:
            owed = s.owed
            if owed is None:
                continue
            el = s.eligible
            while owed:
                p, bm = owed[0]
                takes = True if el is None else el(p)
                if takes is None:
                    break  # (asked again at the next dispatch)
                del owed[0]
                if takes:
                    out.append(Deliver(s.key, p, bm, None, 1, True))
            if not owed:
                s.owed = None
                self._n_owed -= 1
