"""The event-loop timer behind a connection's heartbeat (:class:`server.core.heartbeat.Heartbeat`
decides; this arms the timer for its next deadline and acts on what it says)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amps_emulator.server.core.heartbeat import Beat, Heartbeat
from amps_emulator.server.core.ports import Timebase


class BeatTimer:
    """At each of ``heartbeat``'s deadlines: ``send()`` a beat when one is due, or
    ``silent(seconds)`` when the client has said nothing for too long (the timer stops)."""

    __slots__ = ("heartbeat", "_timebase", "_send", "_silent", "_handle")

    def __init__(self, heartbeat: Heartbeat, timebase: Timebase, send: Callable[[], None],
                 silent: Callable[[float], None]) -> None:
        self.heartbeat = heartbeat
        self._timebase = timebase
        self._send = send
        self._silent = silent
        self._handle: Any = None

    def start(self, interval: float) -> None:
        self.heartbeat.start(interval, self._timebase.monotonic())
        self._arm()

    def stop(self) -> None:
        self.heartbeat.stop()
        self.cancel()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self) -> None:
        self.cancel()
        deadline = self.heartbeat.next_deadline()
        if deadline is None:
            return
        delay = max(0.0, deadline - self._timebase.monotonic())
        self._handle = self._timebase.call_later(delay + 0.001, self.tick)

    def tick(self) -> None:
        self._handle = None
        now = self._timebase.monotonic()
        action = self.heartbeat.poll(now)
        if action is Beat.TIMEOUT:
            self._silent(self.heartbeat.silent_for(now))
            return
        if action is Beat.SEND:
            self._send()
            self.heartbeat.sent(self._timebase.monotonic())
        self._arm()
