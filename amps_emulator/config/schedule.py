"""``amps-action-on-schedule``'s ``Every``: when a scheduled action runs next.

Three forms, as AMPS reads them:

* a duration (``4h``, ``10s``, ``500ms``, bare seconds): every that long, counted from when
  the server started (the first run is one period after start);
* ``HH:MM`` or ``HH:MM:SS``: every day at that time;
* ``<Weekday> at HH:MM[:SS]``: every week on that day at that time.

A trailing ``Z`` on a time means UTC; without it the time is the server's local time. The
times are whole wall-clock instants: :meth:`Every.next_after` is pure (a UNIX time in, the
next due UNIX time out), so the config reader checks the text with it and the server's timer
(:mod:`server.services.actions.schedule`) arms the server clock with it.
"""

from __future__ import annotations

import datetime as _dt
import re

from .units import parse_duration

__all__ = ["Every", "parse_every", "WEEKDAYS"]

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_TIME = re.compile(r"(?:(?P<day>[A-Za-z]+)\s+at\s+)?(?P<h>\d{1,2}):(?P<m>\d{2})(?::(?P<s>\d{2}))?"
                   r"(?P<z>Z)?", re.IGNORECASE)


class Every:
    """A parsed ``Every``: a period (``period`` seconds) or a time of day (``hour``,
    ``minute``, ``second``; ``weekday`` 0 = Monday for a weekly one; ``utc``)."""

    __slots__ = ("text", "period", "hour", "minute", "second", "weekday", "utc")

    def __init__(self, text: str, *, period: float | None = None, hour: int = 0, minute: int = 0,
                 second: int = 0, weekday: int | None = None, utc: bool = False) -> None:
        self.text = text
        self.period = period
        self.hour = hour
        self.minute = minute
        self.second = second
        self.weekday = weekday
        self.utc = utc

    def __repr__(self) -> str:
        return f"Every({self.text!r})"

    @property
    def is_period(self) -> bool:
        return self.period is not None

    def first_after_start(self, started: float) -> float:
        """The first due time of a server that started at ``started`` (UNIX seconds)."""
        if self.period is not None:
            return started + self.period
        return self.next_after(started)

    def next_after(self, now: float) -> float:
        """The first due time strictly after ``now`` (UNIX seconds)."""
        if self.period is not None:
            return now + self.period
        tz = _dt.UTC if self.utc else None
        here = _dt.datetime.fromtimestamp(now, tz)
        candidate = here.replace(hour=self.hour, minute=self.minute, second=self.second,
                                 microsecond=0)
        if self.weekday is not None:
            candidate += _dt.timedelta(days=(self.weekday - candidate.weekday()) % 7)
        step = _dt.timedelta(days=7 if self.weekday is not None else 1)
        # a naive (local) moment plus a day keeps its wall-clock time across a DST change
        while candidate.timestamp() <= now:
            candidate += step
        return candidate.timestamp()


def parse_every(text: str) -> Every:
    """Read an ``Every`` value; ``ValueError`` says what is wrong."""
    value = text.strip()
    m = _TIME.fullmatch(value)
    if m is None:
        try:
            period = parse_duration(value)
        except ValueError:
            raise ValueError(f"{value!r}: expected a duration such as 4h, a time "
                             "such as 17:30 or 17:30:15Z, or 'Saturday at 11:00'") from None
        if period <= 0:
            raise ValueError(f"{value!r}: the period must be more than 0")
        return Every(value, period=period)
    hour, minute, second = int(m["h"]), int(m["m"]), int(m["s"] or 0)
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"{value!r}: no such time of day")
    weekday = None
    if m["day"] is not None:
        day = m["day"].lower()
        if day not in WEEKDAYS:
            raise ValueError(f"{value!r}: {m['day']!r} is not a day of the week")
        weekday = WEEKDAYS.index(day)
    return Every(value, hour=hour, minute=minute, second=second, weekday=weekday,
                 utc=m["z"] is not None)
