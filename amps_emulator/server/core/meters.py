"""Counters the message path bumps for monitoring (the Admin interface's ``/metrics`` and the
console's charts read them; nothing on the message path reads them back).

* Messages in and out per topic (:func:`count`): two dicts of the broker, keyed by topic key
  (name and message type). A topic is counted under its own key while fewer than
  :data:`TOPIC_CAP` topics are; past that, under :data:`OTHER_TOPICS`, so a client that
  publishes to ever new topic names cannot grow them without bound.
* The persisted-ack latency (:class:`AckLatency`): from a publish being logged to its
  persisted ack being released by the transaction log, as a histogram with fixed buckets.
  Acks released as soon as they are logged (nothing to wait for: the ``memory`` or ``strict``
  durability, no sync replication destination behind) fall in the first bucket.
"""

from __future__ import annotations

import bisect
import collections
import time
from collections.abc import Callable

#: how many topics are counted one by one; the rest together under :data:`OTHER_TOPICS`
TOPIC_CAP = 1024
#: the key the topics past :data:`TOPIC_CAP` are counted under (no topic has an empty name)
OTHER_TOPICS = ""

#: the histogram's upper bounds, seconds (a last bucket, +Inf, takes the rest)
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0)


def count(counts: dict[str, int], topic: str, n: int) -> None:
    """Add ``n`` to ``topic``'s count (the message path inlines the first case)."""
    if topic in counts:
        counts[topic] += n
    elif len(counts) < TOPIC_CAP:
        counts[topic] = n
    else:
        counts[OTHER_TOPICS] = counts.get(OTHER_TOPICS, 0) + n


class AckLatency:
    """Persisted-ack latency. The transaction log tells it of each run of acks that has to wait
    (:meth:`waiting`: the position the run waits for, how many acks) and of each release
    (:meth:`released`: the position now safe); acks sent at once are :meth:`at_once`."""

    __slots__ = ("buckets", "count", "sum", "peak", "_marks", "_clock")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        #: acks per bucket (not cumulative); the last is past :data:`LATENCY_BUCKETS`
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)
        self.count = 0
        self.sum = 0.0
        #: the longest latency since :meth:`take_peak` was last called
        self.peak = 0.0
        self._marks: collections.deque[tuple[int, float, int]] = collections.deque()
        self._clock = clock

    def at_once(self, n: int) -> None:
        self.buckets[0] += n
        self.count += n

    def waiting(self, position: int, n: int) -> None:
        self._marks.append((position, self._clock(), n))

    def released(self, safe: int) -> None:
        """Everything waiting for a position up to ``safe`` went out now."""
        marks = self._marks
        if not marks or marks[0][0] > safe:
            return
        now = self._clock()
        while marks and marks[0][0] <= safe:
            _, since, n = marks.popleft()
            self.observe(now - since, n)

    def dropped(self) -> None:
        """The waiting acks were failed or forgotten (the log failed for good, a reset)."""
        self._marks.clear()

    def observe(self, seconds: float, n: int = 1) -> None:
        self.buckets[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += n
        self.count += n
        self.sum += seconds * n
        if seconds > self.peak:
            self.peak = seconds

    def take_peak(self) -> float:
        peak, self.peak = self.peak, 0.0
        return peak

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, acks at or below it)`` for each bucket, +Inf last."""
        out, total = [], 0
        for bound, n in zip((*LATENCY_BUCKETS, float("inf")), self.buckets, strict=True):
            total += n
            out.append((bound, total))
        return out


__all__ = ["LATENCY_BUCKETS", "OTHER_TOPICS", "TOPIC_CAP", "AckLatency", "count"]
