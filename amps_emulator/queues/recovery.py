"""Rebuilding a queue from the log (AMPS "Startup and Recovery for Queues").

The server finds where to start with :func:`queues.events.plan_recovery`, then feeds, in log
order, an :class:`~queues.events.Enqueue` for every publish record that enters the queue and
the decoded queue events (:func:`queues.events.decode_event`) to :func:`replay`, with a new
engine: ``replay(QueueEngine(spec), events, now=..., start_after=...)``. Recovery drives
the engine; the engine imports nothing of recovery. What comes out is the state a restarted
AMPS has: every message acknowledged or expired before the crash is gone (never delivered
again); every other one is available again, since leases do not survive the connections that
held them; delivery and cancel counters restart from zero ("reset if the server restarts")
unless ``keep_counters``. At-most-once messages journaled as sent (``Lease``) are gone.
``Transfer`` events (who owns a message of a replicated queue) are skipped: ownership is kept
by the server (:mod:`server.services.queue_ownership`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .codes import AVAIL, DONE, parse_bookmark
from .compaction import compact_prefix
from .engine import QueueEngine
from .events import Ack, Cancel, Enqueue, Expire, Lease, LeaseExpire, Transfer
from .sortedkeys import SortedKeys

__all__ = ["replay"]


def replay(
    eng: QueueEngine,
    events: Iterable[Any],
    *,
    now: float,
    start_after: int = 0,
    keep_counters: bool = False,
) -> QueueEngine:
    """Apply ``events`` to a new, empty engine ``eng`` and return it. Records of messages at
    or before ``start_after`` are ignored (it becomes the engine's low-water position).
    Afterwards call ``eng.poll(now)``: it expires what expired while the server was down and
    fills the TargetQueueDepth, before subscriptions are added."""
    if len(eng._st) or eng._sub_list:
        raise ValueError("replay needs a new, empty engine")
    if start_after > eng._last_pos:
        eng._low_water = eng._last_pos = start_after
    append = eng._append
    st = eng._st
    amo = eng._amo
    prio = eng._prio
    if prio:
        eng._plist = None  # built once at the end
    for ev in events:
        t = type(ev)
        if t is Enqueue:
            if ev.position > start_after:
                append(ev.position, ev.bookmark, ev.timestamp, ev.expiration,
                       ev.priority, ev.is_barrier, now)
            continue
        if t is Ack and ev.position is None:
            pb = parse_bookmark(ev.bookmark)
            if pb is not None:
                j = eng._find_bookmark(pb)
                if j >= 0:
                    eng._finish(j)
                elif pb[1] > eng._pub_last.get(pb[0], -1):
                    eng._defer(pb, now, [])
            continue
        if t is Transfer:
            continue  # ownership (replicated queues): the server's, not the engine's
        j = eng._find_position(ev.position)
        if j < 0 or st[j] == DONE:
            continue
        if t is Ack or t is Expire:
            eng._finish(j)
        elif t is Lease:
            if amo:
                eng._finish(j)
            elif keep_counters:
                eng._dc[j] += 1
        elif t is Cancel or t is LeaseExpire:
            if keep_counters:
                if t is Cancel and eng._cc[j] < 0xFFFF:
                    eng._cc[j] += 1
                if ev.unsent:  # that lease was never sent: no delivery
                    p = ev.position
                    eng._unsent[p] = eng._unsent.get(p, 0) + 1
        else:
            raise TypeError(f"not a queue event: {ev!r}")
        eng._advance_head()
        if eng._head >= eng._compact_min and eng._head * 2 >= len(eng._st):
            compact_prefix(eng)
    if prio:
        eng._plist = SortedKeys(
            eng._key(j) for j in range(eng._head, len(st)) if st[j] == AVAIL
        )
    eng._advance_head()
    return eng
