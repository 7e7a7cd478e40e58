"""``amps-action-on-schedule``'s ``Every``: the parser and the next due instant, and the
timer on a test clock."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amps_emulator.config.model import Action, ActionOption, ActionStep
from amps_emulator.config.schedule import WEEKDAYS, parse_every
from amps_emulator.server.core.clock import TestClock
from amps_emulator.server.services.actions.timers import Schedule

# 2026-03-02 is a Monday
MONDAY_UTC = dt.datetime(2026, 3, 2, 10, 15, 30, tzinfo=dt.UTC).timestamp()


@pytest.mark.parametrize("text, period", [("4h", 4 * 3600.0), ("10s", 10.0), ("500ms", 0.5),
                                          ("1m", 60.0), ("30", 30.0), (" 1d ", 86400.0)])
def test_durations_are_periods_from_start(text, period):
    every = parse_every(text)
    assert every.is_period and every.period == period
    assert every.first_after_start(1000.0) == 1000.0 + period
    assert every.next_after(1000.0 + period) == 1000.0 + 2 * period


@pytest.mark.parametrize("text", ["sometimes", "25:00", "12:60", "12:00:61", "Funday at 10:00",
                                  "0s", "", "10:00 Z", "at 10:00"])
def test_bad_values_say_what_is_wrong(text):
    with pytest.raises(ValueError, match="expected|no such|day of the week|more than 0"):
        parse_every(text)


def test_daily_utc_time():
    every = parse_every("10:20Z")
    assert not every.is_period and every.utc
    due = every.next_after(MONDAY_UTC)  # 10:15:30 -> 10:20:00 the same day
    assert dt.datetime.fromtimestamp(due, dt.UTC) == dt.datetime(2026, 3, 2, 10, 20, tzinfo=dt.UTC)
    nxt = every.next_after(due)
    assert nxt - due == 86400.0
    # a time already passed today is tomorrow's
    assert dt.datetime.fromtimestamp(parse_every("09:00:05Z").next_after(MONDAY_UTC), dt.UTC) \
        == dt.datetime(2026, 3, 3, 9, 0, 5, tzinfo=dt.UTC)


def test_weekly_utc_time():
    every = parse_every("saturday at 11:00Z")
    due = dt.datetime.fromtimestamp(every.next_after(MONDAY_UTC), dt.UTC)
    assert due == dt.datetime(2026, 3, 7, 11, 0, tzinfo=dt.UTC)
    assert every.next_after(due.timestamp()) - due.timestamp() == 7 * 86400.0
    # the same weekday, earlier in the day: next week
    monday = parse_every("Monday at 10:00Z").next_after(MONDAY_UTC)
    assert dt.datetime.fromtimestamp(monday, dt.UTC) == dt.datetime(2026, 3, 9, 10, 0, tzinfo=dt.UTC)


def test_local_time_without_z():
    every = parse_every("02:00")
    assert not every.utc
    due = dt.datetime.fromtimestamp(every.next_after(MONDAY_UTC))  # local
    assert (due.hour, due.minute, due.second) == (2, 0, 0)
    assert 0 < every.next_after(MONDAY_UTC) - MONDAY_UTC <= 86400 + 3600  # (a DST day is longer)


@given(st.integers(0, 23), st.integers(0, 59), st.integers(0, 59),
       st.sampled_from((None, *WEEKDAYS)), st.floats(0, 4e9), st.booleans())
def test_next_after_is_the_first_matching_instant_after_now(h, m, s, day, now, utc):
    text = f"{h:02d}:{m:02d}:{s:02d}" + ("Z" if utc else "")
    if day is not None:
        text = f"{day.title()} at {text}"
    every = parse_every(text)
    due = every.next_after(now)
    tz = dt.UTC if utc else None
    moment = dt.datetime.fromtimestamp(due, tz)
    assert due > now
    if utc:  # (local time may skip or repeat the hour around a DST change)
        assert (moment.hour, moment.minute, moment.second) == (h, m, s)
        assert due - now <= (7 if day is not None else 1) * 86400
    if day is not None and utc:
        assert moment.weekday() == WEEKDAYS.index(day)


@given(st.floats(0.001, 1e6), st.floats(0, 4e9))
def test_periods_step_from_the_instant_that_was_due(period, start):
    every = parse_every(f"{period}s")
    first = every.first_after_start(start)
    assert first == pytest.approx(start + period)
    assert every.next_after(first) == pytest.approx(first + period)


def _schedule(every: str, clock: TestClock, runs: list) -> Schedule:
    on = ActionStep(file="t.xml", line=1, kind="on", module="amps-action-on-schedule",
                    options=(ActionOption("Every", every), ActionOption("Name", "tick")))
    action = Action(file="t.xml", line=1, on=(on,), steps=())
    return Schedule(on, action, clock, lambda a, v: runs.append((clock.time(), v)) or True)


def test_the_timer_runs_once_per_period_advanced():
    clock = TestClock(start=1000.0)
    runs: list = []
    sched = _schedule("1s", clock, runs)
    sched.start(clock.time())
    clock.advance(0.5)
    assert runs == []
    clock.advance(3)
    assert [t for t, _ in runs] == [1001.0, 1002.0, 1003.0]
    assert runs[0][1] == {"AMPS_SCHEDULE_NAME": "tick"}
    sched.stop()
    clock.advance(10)
    assert len(runs) == 3 and clock.pending() == 0


def test_a_daily_timer_runs_at_its_time_each_day():
    start = dt.datetime(2026, 3, 2, 1, 0, tzinfo=dt.UTC).timestamp()
    clock = TestClock(start=start)
    runs: list = []
    _schedule("02:00Z", clock, runs).start(clock.time())
    clock.advance(3599)
    assert runs == []
    clock.advance(1 + 2 * 86400)
    assert [dt.datetime.fromtimestamp(t, dt.UTC).hour for t, _ in runs] == [2, 2, 2]
    assert runs[1][0] - runs[0][0] == 86400
