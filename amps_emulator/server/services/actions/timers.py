"""The actions that run on the server clock: ``on-schedule``, and the per-record timers of
``on-message-condition-timeout`` and ``on-alert``.

Every timer is armed with the server's ``call_later`` (:mod:`server.core.clock`), so under
``--test-clock`` nothing runs until the clock is advanced, and then each due run happens
once per period passed, in order.

**on-schedule**: the next due instant comes from :class:`config.schedule.Every` (a period
from start, a daily or a weekly time, local or UTC); after each run the next one is armed
from the instant that was due, so runs neither drift nor pile up.

**on-message-condition-timeout** watches one SOW topic: each record that starts matching
``Filter`` (all records without one) is tracked on its own from that moment; if it is still
tracked ``Duration`` later (no update took it out of the filter, no delete or expiry removed
it) the action runs once for it. A record that leaves the filter and matches again is tracked
anew. At start-up the records already in the topic are tracked from their last update, so one
that was due before the restart runs at once. **on-alert** is the same watch, but its action
runs exactly once per tracked record: on the timeout, or on the out-of-focus, whichever comes
first, with the ``EventVariable`` set to ``TimeoutEvent`` or ``OOFEvent``.
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from amps_emulator.config.schedule import Every, parse_every
from amps_emulator.config.units import parse_duration
from amps_emulator.protocol.topics import display_name
from amps_emulator.server.services.actions.variables import Vars

if TYPE_CHECKING:
    from amps_emulator.config.model import Action, ActionStep
    from amps_emulator.server.core.ports import Timebase, Timer
    from amps_emulator.sow import Record

log = logging.getLogger("amps_emulator.actions")

#: run an action with these variables (the engine's ``run``); False: it stopped early
RunAction = Callable[["Action", Vars], bool]


class Schedule:
    """One ``on-schedule`` trigger, armed on the server clock."""

    def __init__(self, step: ActionStep, action: Action, timebase: Timebase, run: RunAction) -> None:
        self.action = action
        self.every: Every = parse_every(step.option("Every") or "")
        self.name = step.option("Name") or "unknown"
        self.timebase = timebase
        self._run = run
        self._timer: Timer | None = None
        self.due: float | None = None  # the UNIX time of the next run
        self.runs = 0

    def start(self, started: float) -> None:
        self._arm(self.every.first_after_start(started))

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.due = None

    def _arm(self, due: float) -> None:
        self.due = due
        self._timer = self.timebase.call_later(max(due - self.timebase.time(), 0.0), self._fire)

    def _fire(self) -> None:
        due = self.due
        if due is None:
            return
        self._timer = None
        self.runs += 1
        try:
            self._run(self.action, {"AMPS_SCHEDULE_NAME": self.name})
        finally:
            if self.due == due:  # not stopped by its own run (a do-shutdown)
                self._arm(self.every.next_after(due))


class _Tracked:
    __slots__ = ("timer", "since", "data")

    def __init__(self, timer: Timer, since: float, data: bytes) -> None:
        self.timer = timer
        self.since = since  # UNIX time tracking began
        self.data = data  # the record as it is now


class ConditionWatch:
    """One ``on-message-condition-timeout`` or ``on-alert`` trigger over one SOW topic key."""

    def __init__(self, step: ActionStep, action: Action, topic_key: str,
                 matches: Callable[[Any], bool], timebase: Timebase, run: RunAction) -> None:
        self.action = action
        self.topic = topic_key
        self.matches = matches
        self.duration = parse_duration(step.option("Duration") or "0")
        self.alert = step.module == "amps-action-on-alert"
        self.oof_event = step.option("OOFEvent") or "OOFEvent"
        self.timeout_event = step.option("TimeoutEvent") or "TimeoutEvent"
        self.event_variable = step.option("EventVariable") or "AMPS_EVENT"
        self.timebase = timebase
        self._run = run
        self.tracked: dict[str, _Tracked] = {}
        #: records whose run already happened and that still match (not run again until they
        #: leave the filter and come back)
        self.done: set[str] = set()

    # -- what happens to records -------------------------------------------------------
    def recover(self, records: Iterable[Record], decode: Callable[[bytes], Any]) -> None:
        """Track the records already in the topic at start-up, from their last update."""
        now = self.timebase.time()
        for rec in records:
            if self.matches(decode(rec.data)):
                since = min(rec.timestamp, now) if rec.timestamp else now
                self._track(rec.sow_key, rec.data, since, max(since + self.duration - now, 0.0))

    def updated(self, sow_key: str, data: bytes, doc: Any) -> None:
        """A publish stored ``data`` as the record ``sow_key``."""
        if self.matches(doc):
            t = self.tracked.get(sow_key)
            if t is not None:
                t.data = data
            elif sow_key not in self.done:
                self._track(sow_key, data, self.timebase.time(), self.duration)
        else:
            self._out_of_focus(sow_key, data)

    def removed(self, sow_key: str, data: bytes) -> None:
        """The record left the topic (deleted, expired)."""
        self._out_of_focus(sow_key, data)

    def stop(self) -> None:
        for t in self.tracked.values():
            t.timer.cancel()
        self.tracked.clear()

    # -- internals ---------------------------------------------------------------------
    def _track(self, sow_key: str, data: bytes, since: float, delay: float) -> None:
        timer = self.timebase.call_later(delay, lambda: self._timed_out(sow_key))
        self.tracked[sow_key] = _Tracked(timer, since, data)

    def _out_of_focus(self, sow_key: str, data: bytes) -> None:
        self.done.discard(sow_key)
        t = self.tracked.pop(sow_key, None)
        if t is None:
            return
        t.timer.cancel()
        if self.alert:
            self._run(self.action, self._variables(sow_key, data, t.since, self.oof_event))

    def _timed_out(self, sow_key: str) -> None:
        t = self.tracked.pop(sow_key, None)
        if t is None:
            return
        self.done.add(sow_key)
        self._run(self.action, self._variables(sow_key, t.data, t.since, self.timeout_event))

    def _variables(self, sow_key: str, data: bytes, since: float, event: str) -> Vars:
        out: Vars = {"AMPS_TOPIC": display_name(self.topic), "AMPS_SOW_KEY": sow_key,
                     "AMPS_DATA": data,
                     "AMPS_TIMESTAMP": _dt.datetime.fromtimestamp(since, _dt.UTC).strftime(
                         "%Y%m%dT%H%M%S.%fZ")}
        if self.alert:
            out[self.event_variable] = event
        return out
