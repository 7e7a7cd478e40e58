"""The ``rate=`` option of bookmark replays, on an injected clock."""

from __future__ import annotations

import pytest

from amps_emulator.protocol.reasons import CommandError
from amps_emulator.server.delivery.replay import Rate


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_messages_per_second():
    clock = Clock()
    r = Rate("4", clock)
    assert [r.wait(10, 0) for _ in range(1)] == [0.0]  # the first goes at once
    assert r.wait(10, 0) == pytest.approx(0.25)
    clock.t += 0.25
    assert r.wait(10, 0) == 0.0
    assert r.wait(10, 0) == pytest.approx(0.25)


def test_bytes_per_second():
    clock = Clock()
    r = Rate("1KB", clock)
    assert r.wait(512, 0) == 0.0
    assert r.wait(512, 0) == pytest.approx(0.5)
    clock.t += 0.5
    assert r.wait(512, 0) == 0.0


def test_a_multiple_of_the_original_pace():
    clock = Clock()
    r = Rate("2X", clock)
    assert r.wait(1, 5_000_000) == 0.0            # published at 5 s: the reference
    assert r.wait(1, 7_000_000) == pytest.approx(1.0)  # 2 s later at twice the speed
    clock.t += 1.0
    assert r.wait(1, 7_000_000) == 0.0


@pytest.mark.parametrize("bad", ["", "fast", "0", "-1", "0X", "2Y"])
def test_bad_rates_are_invalid_options(bad):
    with pytest.raises(CommandError) as e:
        Rate(bad, Clock())
    assert e.value.reason == "invalid options"


def test_rate_max_gap_caps_the_wait_between_two_messages():
    clock = Clock()
    r = Rate("1X", clock, "2s")
    assert r.wait(1, 0) == 0.0
    assert r.wait(1, 3_600_000_000) == pytest.approx(2.0)  # an hour later: two seconds
    clock.t += 2.0
    assert r.wait(1, 3_600_000_000) == 0.0
    assert r.wait(1, 3_601_000_000) == pytest.approx(1.0)  # then the original pace again
    with pytest.raises(CommandError):
        Rate("1X", clock, "soon")
