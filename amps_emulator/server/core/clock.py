"""The server's one source of time, and the timers that follow it.

Every timer whose meaning is "this much time has passed" (heartbeats, queue leases and message
expiration, SOW expiration and History maintenance, conflation, replay pacing) is armed through
:meth:`Clock.call_later`, and every "now" comes from :meth:`Clock.monotonic` or
:meth:`Clock.time`. :class:`SystemClock` is real time on the event loop. :class:`TestClock`
stands still until it is advanced (``--test-clock``, ``POST /emulator/clock/advance``): then
the timers that fell due run, in deadline order, each seeing the time it was due at — so a
test of a 30-second lease takes no 30 seconds. Housekeeping that is not about elapsed
application time (checkpoints, statistics samples) stays on the loop's own timers.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("amps_emulator.clock")


class SystemClock:
    """Real time; timers on the event loop."""

    is_test = False

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.monotonic: Callable[[], float] = time.monotonic
        self.time: Callable[[], float] = time.time

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def call_later(self, delay: float, callback: Callable[[], Any]) -> Any:
        return self.loop.call_later(delay, callback)  # type: ignore[union-attr]


class _TestTimer:
    __slots__ = ("due", "callback", "cancelled")

    def __init__(self, due: float, callback: Callable[[], Any]) -> None:
        self.due = due
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class TestClock:
    """A clock that moves only when :meth:`advance` is called.

    ``monotonic()`` starts at 0 and ``time()`` at the real time the clock was made (or
    ``start``); both move together. A zero or negative delay still runs on the next loop
    iteration, so work that merely yields to other clients is not held up.
    """

    is_test = True
    __test__ = False  # not a pytest test class

    def __init__(self, start: float | None = None) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._mono = 0.0
        self._epoch = time.time() if start is None else start
        self._timers: list[tuple[float, int, _TestTimer]] = []
        self._order = itertools.count()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def monotonic(self) -> float:
        return self._mono

    def time(self) -> float:
        return self._epoch + self._mono

    def call_later(self, delay: float, callback: Callable[[], Any]) -> Any:
        if delay <= 0:
            return self.loop.call_soon(callback)  # type: ignore[union-attr]
        t = _TestTimer(self._mono + delay, callback)
        heapq.heappush(self._timers, (t.due, next(self._order), t))
        return t

    def pending(self) -> int:
        return sum(1 for _, _, t in self._timers if not t.cancelled)

    def advance(self, seconds: float) -> int:
        """Move time forward by ``seconds``, running every timer that falls due on the way
        (timers those callbacks arm are run too if they fall due). Returns how many ran."""
        if seconds < 0:
            raise ValueError("the test clock does not go backwards")
        target = self._mono + seconds
        ran = 0
        timers = self._timers
        while timers and timers[0][0] <= target:
            due, _, t = heapq.heappop(timers)
            if t.cancelled:
                continue
            self._mono = max(self._mono, due)
            t.cancelled = True
            try:
                t.callback()
            except Exception:  # as the event loop would: log it, run the other timers
                log.exception("timer %r failed", t.callback)
            ran += 1
        self._mono = target
        return ran
