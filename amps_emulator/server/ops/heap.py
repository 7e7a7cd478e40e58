"""The garbage collector's policy for a long-lived server process (the command line's).

CPython's full (generation 2) collection walks every object the collector tracks. A server
that holds much long-lived state (20,000 logical topics of a ``Pattern`` SOW container are
about half a million objects) pays a pause proportional to all of it (0.13 s there) whenever
some client's command happens to allocate enough to set one off, stalling every other client.

So what survives a full collection is *frozen* (``gc.freeze``: moved to the permanent
generation, which no collection walks): a full collection then walks only what was made since
the previous one, a pause proportional to the growth, not to the heap.

The price: a frozen object that later becomes garbage *in a reference cycle* is not collected
while frozen (one freed by its reference count is freed as usual, frozen or not; an object
made after a freeze is collected as usual until a full collection finds it alive). So when
the frozen set has grown to twice what it was after the last complete collection, it is
thawed (``gc.unfreeze``) and collected whole, once, then frozen again: that garbage is
bounded by the live heap, and the complete walk's cost is amortised over as many frozen
objects as it walks. See docs/contributing/internals.md (fair scheduling).
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

log = logging.getLogger("amps_emulator.heap")

#: the frozen set is collected whole once it exceeds this many times its size after the last
#: complete collection (and has grown by at least :data:`MIN_GROWTH` objects)
THAW_FACTOR = 2
MIN_GROWTH = 100_000
#: seconds between two counts of the frozen set (``gc.get_freeze_count`` walks it: a few ms for
#: half a million objects, and full collections of the young objects come often)
CHECK_EVERY = 1.0


class HeapPolicy:
    """Installed by :func:`install`: freezes after each full collection, and collects the
    frozen set whole when it has doubled (see the module docstring). ``schedule`` runs a
    callable soon on the server's loop, from any thread (``loop.call_soon_threadsafe``): the
    complete collection is not run from inside the collector's own callback."""

    def __init__(self, schedule: Any, factor: int = THAW_FACTOR,
                 min_growth: int = MIN_GROWTH, check_every: float = CHECK_EVERY) -> None:
        self.schedule = schedule
        self.factor = factor
        self.min_growth = min_growth
        self.check_every = check_every
        self.base = 0  # frozen objects after the last complete collection
        self.thaw_due = False
        self.thaws = 0  # complete collections run
        self.full = 0  # full collections seen
        self.longest = 0.0  # seconds of the longest full collection
        self._started = 0.0
        self._checked = 0.0  # when the frozen set was last counted

    def start(self) -> None:
        """What start-up built is collected and frozen; from now on every full collection
        freezes its survivors."""
        gc.collect()
        gc.freeze()
        self.base = gc.get_freeze_count()
        gc.callbacks.append(self._on_collection)

    def stop(self) -> None:
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)

    def _on_collection(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        self.full += 1
        self.longest = max(self.longest, took)
        # every tracked object has just survived a full collection: the long-lived ones
        gc.freeze()
        log.debug("full collection: %.1f ms, %d collected", took * 1000, info["collected"])
        now = time.perf_counter()
        if self.thaw_due or now - self._checked < self.check_every:
            return
        self._checked = now
        if gc.get_freeze_count() > max(self.base * self.factor, self.base + self.min_growth):
            self.thaw_due = True  # (until it has run: its own collection comes here too)
            try:
                self.schedule(self.collect_all)
            except RuntimeError:  # the loop is closed: the process is ending
                self.thaw_due = False

    def collect_all(self) -> int:
        """Thaw the frozen set and collect everything (the callback freezes the survivors
        again); the objects collected."""
        self.thaw_due = True
        t0 = time.perf_counter()
        try:
            gc.unfreeze()
            collected = gc.collect()
            self.base = gc.get_freeze_count()
        finally:
            self.thaw_due = False
        self.thaws += 1
        log.info("complete collection of the long-lived heap: %.1f ms, %d collected, %d kept",
                 (time.perf_counter() - t0) * 1000, collected, self.base)
        return collected


def install(schedule: Any) -> HeapPolicy:
    """Start the policy (the server is ready: start-up's objects are long-lived)."""
    policy = HeapPolicy(schedule)
    policy.start()
    return policy
