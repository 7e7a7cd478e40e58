"""Per-connection heartbeat state: a pure state machine driven by an explicit clock.

A client turns heartbeating on with ``{"c":"heartbeat","o":"start,N"}``. From then on the
server sends ``{"c":"heartbeat"}`` whenever it has sent nothing for ``N`` seconds, and
disconnects the client when nothing at all has arrived from it for ``2 * N`` seconds (the
grace AMPS documents). The connection asks :meth:`Heartbeat.poll` at
:meth:`Heartbeat.next_deadline` and does what it says; tests drive it with a fake clock.
"""

from __future__ import annotations

import enum


class Beat(enum.Enum):
    NOTHING = 0
    SEND = 1
    TIMEOUT = 2


class Heartbeat:
    __slots__ = ("interval", "last_received", "last_sent")

    def __init__(self) -> None:
        self.interval: float | None = None
        self.last_received = 0.0
        self.last_sent = 0.0

    @property
    def active(self) -> bool:
        return self.interval is not None

    def start(self, interval: float, now: float) -> None:
        if interval <= 0:
            raise ValueError("heartbeat interval must be positive")
        self.interval = interval
        self.last_received = now
        self.last_sent = now

    def stop(self) -> None:
        self.interval = None

    def received(self, now: float) -> None:
        self.last_received = now

    def sent(self, now: float) -> None:
        self.last_sent = now

    def poll(self, now: float) -> Beat:
        """What to do at ``now``: nothing, send a heartbeat, or drop the silent client."""
        iv = self.interval
        if iv is None:
            return Beat.NOTHING
        if now - self.last_received >= 2 * iv:
            return Beat.TIMEOUT
        if now - self.last_sent >= iv:
            return Beat.SEND
        return Beat.NOTHING

    def next_deadline(self) -> float | None:
        """The earliest time at which :meth:`poll` may answer something other than nothing."""
        iv = self.interval
        if iv is None:
            return None
        return min(self.last_sent + iv, self.last_received + 2 * iv)
