"""The lanes of the long-filter compiles (server.net.filter_lanes): a text's length picks a
lane, each lane is one worker thread of its own, started on first use."""

from __future__ import annotations

import threading

from amps_emulator.server.net.filter_lanes import SMALL_LANE, FilterLanes


def test_a_text_longer_than_the_small_lane_goes_to_the_other_worker():
    lanes = FilterLanes()
    try:
        small, large = lanes.pool(SMALL_LANE), lanes.pool(SMALL_LANE + 1)
        assert small is not large
        assert lanes.pool(3000) is small and lanes.pool(200_000) is large
        names = [p.submit(lambda: threading.current_thread().name).result(10)
                 for p in (small, large)]
        assert names[0].startswith("amps-filter-small") and names[1].startswith("amps-filter-large")
    finally:
        lanes.shutdown()


def test_the_large_lane_being_held_leaves_the_small_lane_free():
    lanes = FilterLanes(small_lane=10)
    release = threading.Event()
    try:
        held = lanes.pool(11).submit(release.wait, 30)
        assert lanes.pool(10).submit(lambda: "done").result(10) == "done"
        assert not held.done()
    finally:
        release.set()
        lanes.shutdown()


def test_shutting_down_lanes_never_used_starts_nothing():
    before = threading.active_count()
    FilterLanes().shutdown()
    assert threading.active_count() == before
