"""Shared codes of the queue engine: message states, flags, priority keys, bookmark parsing.

Used by :mod:`queues.engine`, :mod:`queues.compaction` and :mod:`queues.recovery`, which
all work on the same per-message columns (docs/contributing/internals.md, "The queue engine").
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["parse_bookmark", "prio_store"]

# message states (bytes of _st)
AVAIL = 0  # in the queue, deliverable
LEASED = 1  # at-least-once: leased to a subscription
DONE = 2  # left the queue (acked, expired, barrier released) - a hole until the prefix is cut
INACTIVE = 3  # beyond TargetQueueDepth: in the log, not yet part of the active queue
SENT = 4  # at-most-once: sent (so out of the queue), backlog slot held until acked
STATE_NAMES = {AVAIL: "available", LEASED: "leased"}

F_HEAP = 1  # expiration tracked in _exp_heap, not by the forward scan
F_BARRIER = 2
F_UNSENT = 4  # the current lease's delivery is not sent yet (the server reads its record)

INF = math.inf
IDX_BITS = 40
IDX_MASK = (1 << IDX_BITS) - 1
U64 = (1 << 64) - 1
PRIO_MAX = U64 - 1
KEY_END = 1 << 200  # beyond every priority key
NOT_DONE = re.compile(rb"[^\x02]")
DONE_RUN = re.compile(rb"\x02+")
NOT_REMOVED = re.compile(rb"[^\x02\x04]")
COMPACT_MIN = 1024  # cut the acked prefix once it is this long and half the columns
SPARSE_MIN = 65536  # squeeze acked holes out once there are this many and 2x the live ones
FAST, ROUND_ROBIN, PROPORTIONAL = 0, 1, 2
FAIRNESS = {"fast": FAST, "round-robin": ROUND_ROBIN, "proportional": PROPORTIONAL}
ACK_OPTIONS = (None, "", "cancel", "expire")


def parse_bookmark(bookmark: str | tuple[int, int]) -> tuple[int, int] | None:
    """``"P|S|"`` (or a ``(P, S)`` tuple) -> ``(P, S)``; None when it is not that form."""
    if isinstance(bookmark, tuple):
        return bookmark
    parts = bookmark.split("|")
    if len(parts) != 3 or parts[2].strip():
        return None
    try:
        pid = int(parts[0])
        seq = int(parts[1])
    except ValueError:
        return None
    if pid < 0 or seq < 0 or pid > U64 or seq > U64:
        return None
    return pid, seq


def prio_store(value: Any) -> int:
    """Priority as stored: value + 1 (0 = NULL). Ints as is, floats truncated, both clamped
    to [0, 2**64 - 2]; None, bools, NaN, infinities and anything else are NULL (lowest)."""
    if value is None or isinstance(value, bool):
        return 0
    if isinstance(value, int):
        v = value
    elif isinstance(value, float):
        if value != value or value in (INF, -INF):
            return 0
        v = int(value)
    else:
        return 0
    if v < 0:
        v = 0
    elif v > PRIO_MAX:
        v = PRIO_MAX
    return v + 1
