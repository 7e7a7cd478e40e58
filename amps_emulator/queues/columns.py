"""The state of one queue: per-message columns, cursors, heaps and subscriptions.

:class:`QueueState` is passive state: the columns (docs/contributing/internals.md, "The queue
engine"), the scan cursors (``_head``, ``_active_end``, ``_exp_j``, each subscription's
``cursor``), the lease and expiration heaps, the bookmark index, barriers and
the subscriptions, plus the few state transitions every layer needs (``_finish``,
``_release``, lookups). :mod:`queues.compaction` and :mod:`queues.recovery` operate on it;
:mod:`queues.dispatch` adds delivery and :mod:`queues.engine` the public operations, each as
a subclass (one object, so the hot paths keep plain ``self._x`` attribute access instead of a
second indirection per column).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from typing import Any

from .codes import (
    AVAIL,
    COMPACT_MIN,
    DONE,
    F_BARRIER,
    FAIRNESS,
    IDX_BITS,
    INACTIVE,
    INF,
    LEASED,
    NOT_DONE,
    SPARSE_MIN,
    U64,
)
from .sortedkeys import SortedKeys
from .spec import QueueSpec

__all__ = ["Eligible", "QueueState", "Sub", "SubscriptionBacklog"]

#: whether a subscription takes the message at a position; None: not known yet (the server
#: has the queue dispatch again once it is, see ``QueueDispatch._release_barrier``)
Eligible = Callable[[int], bool | None]


class SubscriptionBacklog:
    """A subscription's backlog: ``leased`` outstanding messages out of ``limit``.

    The engine makes a private one per subscription. A subscription whose topic regex
    matches several queues shares one backlog across their engines: the server creates it
    with ``limit = min(spec.subscription_limit(max_backlog) for each queue)``, passes it to
    every engine's ``add_subscriber(backlog=...)``, and calls ``dispatch(now)`` on the other
    engines when an ack on one of them frees capacity. (Never modified by the engine except
    ``leased``, and ``limit`` for a private backlog on replace.)
    """

    __slots__ = ("limit", "leased")

    def __init__(self, limit: int, leased: int = 0) -> None:
        self.limit = limit
        self.leased = leased

    def __repr__(self) -> str:
        return f"SubscriptionBacklog(limit={self.limit}, leased={self.leased})"


class Sub:
    """A subscription's state in one engine."""

    __slots__ = ("key", "client", "sid", "bl", "private", "eligible", "cursor", "leases", "owed")

    def __init__(self, key: Any, client: Any, sid: int, bl: SubscriptionBacklog, private: bool,
                 eligible: Eligible | None, cursor: int) -> None:
        self.key = key
        self.client = client
        self.sid = sid  # also the subscription order (fast / round-robin / ties)
        self.bl = bl
        self.private = private
        self.eligible = eligible
        self.cursor = cursor  # global index (FIFO) or priority key
        self.leases: set[int] = set()  # global indexes leased (or sent, at-most-once)
        #: barriers released while ``eligible`` could not tell whether it takes them:
        #: (position, bookmark), oldest first, delivered (or not) before anything else
        self.owed: list[tuple[int, str]] | None = None


class QueueState:
    """One queue's state (see the module docstring); built empty, filled by the engine."""

    def __init__(self, spec: QueueSpec, *, low_water_position: int = 0) -> None:
        self.spec = spec
        self._amo = spec.at_most_once
        self._lease_period = spec.lease_period
        self._max_backlog = spec.max_backlog
        self._strict = spec.strict_leasing
        self._max_cancels = spec.max_cancels
        self._max_deliveries = spec.max_deliveries
        self._expiration = spec.expiration
        self._tqd = spec.target_queue_depth if spec.target_queue_depth is not None else 1 << 62
        self._prio = spec.has_priority
        self._fair = FAIRNESS[spec.fairness_model]

        self._pos = array("q")
        self._pid = array("Q")
        self._seq = array("Q")
        self._st = bytearray()
        self._fl = bytearray()
        self._holder = array("i")
        self._dc = array("I")
        self._cc = array("H")
        self._dl = array("d")
        self._pr = array("Q")  # only filled for Priority queues
        self._plist: SortedKeys | None = SortedKeys() if self._prio else None

        self._base = 0  # global index of column 0
        self._head = 0  # first column not DONE
        self._active_end = 0  # columns >= this are INACTIVE (or DONE by an early ack)
        self._exp_j = 0  # forward expiration scan cursor (column)
        self._last_mono = -INF  # last deadline handled by the forward scan
        self._exp_heap: list[tuple[float, int]] = []
        self._lease_heap: list[tuple[float, int, int]] = []
        self._low_water = low_water_position
        self._last_pos = low_water_position
        self._last_seq = -1
        self._index: dict[tuple[int, int], int] | None = None  # bookmark -> g when needed
        self._pub_last: dict[int, int] = {}  # publisher id -> highest sequence enqueued
        self._deferred: dict[tuple[int, int], float] = {}  # acks for messages not seen yet
        self._deferred_purge_at = INF
        self._barriers: deque[int] = deque()  # global indexes of barrier messages queued
        #: position -> leases of the message that ended before their delivery was sent (they
        #: are in ``_dc``, the lease heap's generation, but were no delivery: MaxDeliveries)
        self._unsent: dict[int, int] = {}

        self._subs: dict[Any, Sub] = {}
        self._sub_list: list[Sub] = []
        self._by_sid: dict[int, Sub] = {}
        self._next_sid = 0
        self._rr_last = -1
        self._outstanding = 0  # leases (and unacked at-most-once sends), for MaxBacklog
        self._n_active = 0  # AVAIL + LEASED messages (the active queue depth)
        self._n_inactive = 0
        self._n_owed = 0  # subscriptions owed a barrier (``Sub.owed``)
        self._compact_min = COMPACT_MIN
        self._sparse_min = SPARSE_MIN
        self._sparse_ratio = 2

    def _cursor_start(self) -> int:
        return 0 if self._prio else self._base + self._head

    def _bm(self, j: int) -> str:
        return f"{self._pid[j]}|{self._seq[j]}|"

    def _key(self, j: int) -> int:
        return ((U64 - self._pr[j]) << IDX_BITS) | (self._base + j)

    def _deliveries(self, j: int) -> int:
        """Deliveries of column ``j`` so far: its leases, less those never sent."""
        dc = self._dc[j]
        return dc - self._unsent.get(self._pos[j], 0) if self._unsent else dc

    def _release(self, j: int) -> Sub:
        """End the lease (or at-most-once send) on column ``j``; return the holder."""
        s = self._by_sid[self._holder[j]]
        s.bl.leased -= 1
        s.leases.discard(self._base + j)
        self._holder[j] = -1
        self._outstanding -= 1
        return s

    def _finish(self, j: int) -> None:
        """Column ``j`` leaves the queue for good."""
        st = self._st
        prev = st[j]
        st[j] = DONE
        if self._unsent:
            self._unsent.pop(self._pos[j], None)
        if prev == AVAIL or prev == LEASED:
            self._n_active -= 1
            if self._plist is not None:
                self._plist.discard(self._key(j))
        elif prev == INACTIVE:
            self._n_inactive -= 1
        if self._index is not None:
            self._index.pop((self._pid[j], self._seq[j]), None)
        if self._fl[j] & F_BARRIER:
            g = self._base + j
            if self._barriers and self._barriers[0] == g:
                self._barriers.popleft()
            else:
                self._barriers.remove(g)

    def _advance_head(self) -> None:
        st, h = self._st, self._head
        if h < len(st) and st[h] == DONE:
            m = NOT_DONE.search(st, h)
            self._head = m.start() if m else len(st)

    def _build_index(self) -> None:
        base, st, pid, seq = self._base, self._st, self._pid, self._seq
        self._index = {
            (pid[j], seq[j]): base + j for j in range(self._head, len(st)) if st[j] != DONE
        }

    def _find_position(self, position: int) -> int:
        p = self._pos
        j = bisect_left(p, position, self._head)
        return j if j < len(p) and p[j] == position else -1

    def _find_bookmark(self, pb: tuple[int, int]) -> int:
        if self._index is not None:
            g = self._index.get(pb)
            if g is None:
                return -1
            j = g - self._base
            return j if j >= 0 else -1
        pid, seq = pb
        sq = self._seq
        j = bisect_left(sq, seq, self._head)
        if j < len(sq) and sq[j] == seq and self._pid[j] == pid:
            return j
        return -1
