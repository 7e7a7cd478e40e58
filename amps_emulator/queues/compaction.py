"""Freeing the columns of messages that left the queue.

Two ways, both amortised O(1) per message:

* :func:`compact_prefix` cuts the DONE prefix off every column (``del col[:head]``) and
  moves ``_base`` so global indexes stay valid. The usual case: messages are acked roughly
  in order.
* :func:`compact_sparse` squeezes runs of DONE columns out of the middle, for when one
  message stays leased for a long time (the default LeasePeriod is infinite) while
  thousands behind it are acked. One DONE column per run stays as a tombstone, so the
  low-water mark ``pos[head - 1]`` remains exact. Global indexes change: every one held
  anywhere (subscription cursors and leases, heaps, barriers, the bookmark index, priority
  keys) is renumbered. Stale heap entries are dropped (they would land on a tombstone).

Called by the engine at the end of an operation, never during dispatch.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections import deque
from heapq import heapify

from .codes import AVAIL, DONE_RUN, IDX_BITS, IDX_MASK, KEY_END, LEASED, SENT
from .columns import QueueState
from .sortedkeys import SortedKeys

__all__ = ["compact_prefix", "compact_sparse"]


def compact_prefix(eng: QueueState) -> None:
    """Cut columns ``[0, head)`` (all DONE); remember the last cut position as low water."""
    h = eng._head
    eng._low_water = eng._pos[h - 1]
    for col in (eng._pos, eng._pid, eng._seq, eng._st, eng._fl, eng._holder,
                eng._dc, eng._cc, eng._dl):
        del col[:h]
    if eng._prio:
        del eng._pr[:h]
    eng._base += h
    eng._head = 0
    eng._active_end -= h
    eng._exp_j = max(0, eng._exp_j - h)


def compact_sparse(eng: QueueState) -> None:
    """Squeeze runs of DONE columns out of the middle (a message leased for a long time
    pins the prefix). One DONE column is kept per run as a tombstone, so ``pos[head-1]``
    stays the exact low-water mark. Every global index held anywhere is renumbered."""
    st, base = eng._st, eng._base
    n = len(st)
    keep = array("q")
    j = 0
    for m in DONE_RUN.finditer(st):
        s0, e0 = m.span()
        keep.extend(range(j, s0))
        keep.append(e0 - 1)
        j = e0
    keep.extend(range(j, n))

    def col(j: int) -> int:  # old column -> new column (first kept at or after it)
        return bisect_left(keep, j)

    def gidx(g: int) -> int:
        return base + col(g - base)

    for name in ("_pos", "_pid", "_seq", "_holder", "_dc", "_cc", "_dl") + (
        ("_pr",) if eng._prio else ()
    ):
        old = getattr(eng, name)
        setattr(eng, name, array(old.typecode, map(old.__getitem__, keep)))
    old_st, old_fl = st, eng._fl
    eng._st = bytearray(map(old_st.__getitem__, keep))
    eng._fl = bytearray(map(old_fl.__getitem__, keep))
    eng._lease_heap = [
        (e, gidx(g), c) for e, g, c in eng._lease_heap
        if g >= base and old_st[g - base] in (LEASED, SENT)
    ]
    heapify(eng._lease_heap)
    eng._exp_heap = [
        (d, gidx(g)) for d, g in eng._exp_heap if g >= base and old_st[g - base] == AVAIL
    ]
    heapify(eng._exp_heap)
    eng._barriers = deque(gidx(g) for g in eng._barriers)
    if eng._index is not None:
        eng._index = {k: gidx(g) for k, g in eng._index.items()}
    for sub in eng._sub_list:
        sub.leases = {gidx(g) for g in sub.leases}
        if not eng._prio:
            sub.cursor = gidx(max(sub.cursor, base))
        elif sub.cursor != KEY_END:
            c = sub.cursor
            sub.cursor = ((c >> IDX_BITS) << IDX_BITS) | gidx(max(c & IDX_MASK, base))
    eng._head = col(eng._head)
    eng._active_end = col(eng._active_end)
    eng._exp_j = col(eng._exp_j)
    if eng._plist is not None:
        stn = eng._st
        eng._plist = SortedKeys(
            eng._key(j) for j in range(len(stn)) if stn[j] == AVAIL or stn[j] == LEASED
        )
