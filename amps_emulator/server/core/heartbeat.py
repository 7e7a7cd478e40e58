"""Per-connection heartbeat state: a pure state machine driven by an explicit clock.

A client turns heartbeating on with ``{"c":"heartbeat","o":"start,N"}``. From then on the
server disconnects it once nothing at all has arrived from it for ``2 * N`` seconds (AMPS
documents that the server considers a connection gone after two heartbeat intervals without
traffic: the interval, then a grace period of one more), and keeps the connection from
going quiet by sending ``{"c":"heartbeat"}`` whenever it has sent nothing for half an
interval. The connection asks :meth:`Heartbeat.poll` at :meth:`Heartbeat.next_deadline` and
does what it says; tests drive it with a fake clock.

Why half an interval: the clients beat in answer to what the server sends. 60East's Python
(C++) client answers every server heartbeat, but the JavaScript client beats, on a server
heartbeat or any other message, only when its own last beat is more than an interval old
(whole milliseconds), and gives up on the connection when it has not beaten for two
intervals. Heartbeats exactly an interval apart land on both edges of that window, by
construction (the client's beat is itself the answer to the previous heartbeat), so jitter
decided whether it beat in time: an idle JavaScript client on a 1 s heartbeat dropped
itself, or was dropped by the server at exactly 2 s, about one run in three. With something
sent at least every half interval, a message always arrives well inside the window (the
client beats at most 1.5 intervals apart), and every client has at least half an interval to
answer the last heartbeat before the two-interval limit.
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

    def silent_for(self, now: float) -> float:
        """How long nothing has arrived from the client."""
        return now - self.last_received

    def poll(self, now: float) -> Beat:
        """What to do at ``now``: nothing, send a heartbeat, or drop the silent client."""
        iv = self.interval
        if iv is None:
            return Beat.NOTHING
        # compared as next_deadline computes them, so a timer at its deadline acts
        if now >= self.last_received + 2 * iv:
            return Beat.TIMEOUT
        if now >= self.last_sent + iv / 2:
            return Beat.SEND
        return Beat.NOTHING

    def next_deadline(self) -> float | None:
        """The earliest time at which :meth:`poll` may answer something other than nothing."""
        iv = self.interval
        if iv is None:
            return None
        return min(self.last_sent + iv / 2, self.last_received + 2 * iv)
