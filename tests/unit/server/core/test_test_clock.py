"""The test clock: timers run in deadline order as it is advanced, each seeing its own time."""

from __future__ import annotations

import asyncio

import pytest

from amps_emulator.server.core.clock import TestClock


async def test_advance_runs_due_timers_in_order_at_their_own_time():
    clock = TestClock(start=1000.0)
    clock.bind(asyncio.get_running_loop())
    seen = []
    clock.call_later(5, lambda: seen.append(("b", clock.monotonic(), clock.time())))
    clock.call_later(2, lambda: seen.append(("a", clock.monotonic(), clock.time())))
    cancelled = clock.call_later(3, lambda: seen.append(("never",)))
    cancelled.cancel()

    def rearm():  # a timer that arms another one that is due within the same advance
        seen.append(("c", clock.monotonic()))
        clock.call_later(1, lambda: seen.append(("d", clock.monotonic())))

    clock.call_later(6, rearm)
    clock.call_later(1, lambda: 1 / 0)  # a failing timer does not stop the others
    assert clock.advance(4.5) == 2
    assert seen == [("a", 2.0, 1002.0)] and clock.monotonic() == 4.5
    assert clock.advance(10) == 3
    assert seen[1:] == [("b", 5.0, 1005.0), ("c", 6.0), ("d", 7.0)]
    assert clock.monotonic() == 14.5 and clock.pending() == 0
    with pytest.raises(ValueError):
        clock.advance(-1)
    ran = asyncio.Event()
    clock.call_later(0, ran.set)  # no delay: the next loop iteration, no advance needed
    await asyncio.wait_for(ran.wait(), 5)
