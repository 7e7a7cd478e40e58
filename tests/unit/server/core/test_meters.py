"""The monitoring counters of the message path: topics counted one by one up to the cap, then
together; the persisted-ack latency histogram fed by the transaction log's waits and releases."""

from __future__ import annotations

from amps_emulator.server.core.meters import (
    LATENCY_BUCKETS,
    OTHER_TOPICS,
    TOPIC_CAP,
    AckLatency,
    count,
)


def test_topics_past_the_cap_are_counted_together():
    counts: dict[str, int] = {}
    for i in range(TOPIC_CAP):
        count(counts, f"t{i}", 1)
    count(counts, "t0", 2)
    count(counts, "one-too-many", 5)
    count(counts, "and-another", 1)
    assert len(counts) == TOPIC_CAP + 1
    assert counts["t0"] == 3 and counts[OTHER_TOPICS] == 6 and "one-too-many" not in counts


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_wait_is_observed_when_its_position_is_released():
    clock = Clock()
    lat = AckLatency(clock)
    lat.at_once(3)  # released as they were logged
    lat.waiting(10, 2)  # a run of two publishes up to position 10
    clock.now += 0.004
    lat.waiting(12, 1)
    clock.now += 0.3
    lat.released(11)  # the first run only
    assert lat.count == 5 and abs(lat.sum - 2 * 0.304) < 1e-9
    assert abs(lat.take_peak() - 0.304) < 1e-9 and lat.take_peak() == 0.0
    clock.now += 2
    lat.released(12)
    assert lat.count == 6
    cumulative = dict(lat.cumulative())
    assert cumulative[LATENCY_BUCKETS[0]] == 3  # the ones at once
    assert cumulative[0.25] == 3 and cumulative[0.5] == 5 and cumulative[2.5] == 6
    assert cumulative[float("inf")] == lat.count


def test_dropped_waits_are_never_observed():
    clock = Clock()
    lat = AckLatency(clock)
    lat.waiting(5, 4)
    lat.dropped()  # the log failed for good (failure acks), or a reset forgot them
    clock.now += 1
    lat.released(100)
    assert lat.count == 0 and lat.sum == 0.0
