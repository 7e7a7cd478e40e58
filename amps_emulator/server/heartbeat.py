"""Per-connection heartbeat state: a pure state machine driven by an explicit clock.

A client turns heartbeating on with ``{"c":"heartbeat","o":"start,N"}``. From then on the
server sends ``{"c":"heartbeat"}`` whenever it has sent nothing for ``N`` seconds, and
disconnects a client that has gone silent. The connection asks :meth:`Heartbeat.poll` at
:meth:`Heartbeat.next_deadline` and does what it says; tests drive it with a fake clock.

When a client counts as silent: AMPS documents that the server considers a connection gone
after two heartbeat intervals without any traffic from it (one interval, then a grace period
of one more), and the clients answer the server's heartbeats. So a client is disconnected
once both

* two intervals have passed since anything last arrived from it, and
* one whole interval (the grace) has passed since the server's last heartbeat, the one the
  client was to answer.

The second condition is what keeps a client that answers only every second heartbeat (the
JavaScript client beats on a server heartbeat only when its own last beat is more than an
interval old) from being dropped by jitter: its answer to the heartbeat the server sends at
the two-interval mark arrives a round trip after that mark, which the old rule (drop at
exactly two intervals) lost about one time in three. A client that sends nothing at all is
still dropped at the server's next heartbeat tick after two silent intervals, between two and
three intervals after its last traffic. A server busy sending other traffic sends no
heartbeats, and then the two-interval rule alone applies.
"""

from __future__ import annotations

import enum


class Beat(enum.Enum):
    NOTHING = 0
    SEND = 1
    TIMEOUT = 2


class Heartbeat:
    __slots__ = ("interval", "last_received", "last_sent", "last_beat")

    def __init__(self) -> None:
        self.interval: float | None = None
        self.last_received = 0.0
        self.last_sent = 0.0
        #: when the server last sent a heartbeat of its own (the one awaiting an answer)
        self.last_beat = 0.0

    @property
    def active(self) -> bool:
        return self.interval is not None

    def start(self, interval: float, now: float) -> None:
        if interval <= 0:
            raise ValueError("heartbeat interval must be positive")
        self.interval = interval
        self.last_received = now
        self.last_sent = now
        self.last_beat = now

    def stop(self) -> None:
        self.interval = None

    def received(self, now: float) -> None:
        self.last_received = now

    def sent(self, now: float) -> None:
        """Anything went out: the next heartbeat is due an interval after it."""
        self.last_sent = now

    def beat_sent(self, now: float) -> None:
        """The server sent a heartbeat: the client has one interval (the grace) to answer."""
        self.last_sent = now
        self.last_beat = now

    def silent_for(self, now: float) -> float:
        """How long nothing has arrived from the client."""
        return now - self.last_received

    def _timeout_at(self, iv: float) -> float:
        return max(self.last_received + 2 * iv, self.last_beat + iv)

    def poll(self, now: float) -> Beat:
        """What to do at ``now``: nothing, send a heartbeat, or drop the silent client."""
        iv = self.interval
        if iv is None:
            return Beat.NOTHING
        if now >= self._timeout_at(iv):
            return Beat.TIMEOUT
        if now >= self.last_sent + iv:  # as next_deadline computes it, to the last bit
            return Beat.SEND
        return Beat.NOTHING

    def next_deadline(self) -> float | None:
        """The earliest time at which :meth:`poll` may answer something other than nothing."""
        iv = self.interval
        if iv is None:
            return None
        return min(self.last_sent + iv, self._timeout_at(iv))
