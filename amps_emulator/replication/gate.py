"""Sync destinations gate acks (docs/design/replication.md 2.3, 2.4, 8.2 item 6), sans-IO.

Each ``Replication/Destination`` has a :class:`DestinationState` that outlives its
connections: what the destination has acknowledged (an upstream log position), whether it is
sync now (a sync destination can be downgraded to async and upgraded back), the link's history
for the Admin (connect and disconnect times, counts, bytes).

:class:`AckGate` answers the one question the transaction log asks: of what is durable here,
how far has every *current* sync destination acknowledged? Persisted acks to publishers, the
``bm`` acks of bookmark subscriptions, acks to an upstream instance and ``fully_durable``
deliveries go no further than that (``safe``). Async and downgraded destinations gate nothing.
A sync destination that is down holds everything after what it acknowledged last, until it
comes back (and acknowledges) or is downgraded: AMPS never downgrades by itself.

Downgrade and upgrade (the actions ``amps-action-do-downgrade-replication`` /
``-upgrade-replication``, the Admin's ``downgrade`` / ``upgrade``) are decided here on the age
of each destination's oldest unacknowledged record; ``Tuning/Replication/MinSyncDestinations``
is a floor no downgrade goes under.

For tests of HA applications (an emulator extension), a destination's acks can be *held*: the
gate stays where it was while the link goes on, as if the destination lagged; releasing counts
everything it acknowledged meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from amps_emulator.config.model import Destination
from amps_emulator.journal import Journal


class DestinationState:
    """One outgoing destination across its connections."""

    def __init__(self, dest: Destination, acked_through: int) -> None:
        self.dest = dest
        #: sync now: the configured SyncType, unless downgraded
        self.sync = dest.sync
        self.downgraded = False
        #: an Admin ``upgrade`` while the destination lagged: upgrade once it has caught up
        self.upgrade_pending = False
        #: upstream position the destination acknowledged (records it does not select count
        #: once everything before them is acknowledged)
        self.acked_through = acked_through
        #: an emulator ``hold``: the gate stays at this position until released
        self.held_at: int | None = None
        #: an emulator ``cut``: the link is down and not retried until restored
        self.cut = False
        #: while the connector waits to try again: when (server monotonic time), else None
        self.retry_at: float | None = None
        self.connected = False
        self.peer_name: str | None = None
        self.peer_group: str | None = None
        self.connect_time: float | None = None  # wall clock (server clock), seconds
        self.disconnect_time: float | None = None
        self.disconnect_count = 0
        self.messages_out = 0  # cumulative over every connection
        self.bytes_out = 0
        self._rate_at: float | None = None
        self._rate_counts = (0, 0)
        self.messages_out_per_sec = 0.0
        self.bytes_out_per_sec = 0.0

    @property
    def name(self) -> str:
        return self.dest.name

    @property
    def gate_position(self) -> int:
        """How far this destination lets acks go (when it is sync)."""
        return self.acked_through if self.held_at is None else min(self.held_at, self.acked_through)

    @property
    def replication_type(self) -> str:
        return "sync" if self.sync else "async"

    def connected_to(self, peer_name: str, peer_group: str, now: float) -> None:
        self.connected = True
        self.peer_name = peer_name
        self.peer_group = peer_group
        self.connect_time = now

    def disconnected(self, now: float) -> None:
        if self.connected:
            self.disconnect_count += 1
        self.connected = False
        self.disconnect_time = now

    def sample_rates(self, now: float) -> None:
        """``messages_out_per_sec`` / ``bytes_out_per_sec`` since the previous sample."""
        if self._rate_at is not None and now > self._rate_at:
            span = now - self._rate_at
            self.messages_out_per_sec = (self.messages_out - self._rate_counts[0]) / span
            self.bytes_out_per_sec = (self.bytes_out - self._rate_counts[1]) / span
        self._rate_at = now
        self._rate_counts = (self.messages_out, self.bytes_out)


class AckGate:
    """Every destination's state, and what they let through."""

    def __init__(self, dests: Iterable[Destination], journal: Callable[[], Journal],
                 wallclock: Callable[[], float], *, min_sync: int | None = None) -> None:
        self._journal = journal
        self.wallclock = wallclock
        self.min_sync = min_sync
        #: when this instance started (server clock): GracePeriods count from here
        self.started_at = wallclock()
        start = journal().last_position  # what was logged before this start is not held
        self.states: dict[str, DestinationState] = {d.name: DestinationState(d, start) for d in dests}

    def safe(self, durable: int) -> int:
        """Of ``durable``, what every current sync destination has acknowledged."""
        pos = durable
        for st in self.states.values():
            if st.sync and st.gate_position < pos:
                pos = st.gate_position
        return pos

    def safe_for(self, durable: int, path: tuple[str, ...], upstream_group: str | None) -> int:
        """What a record that came along ``path`` from an instance of ``upstream_group`` may be
        acknowledged up to (to its upstream): only the sync destinations that forward it count.
        A record never goes back along its path (loop prevention), so in a pair each side acks
        the other's records on its own durability, and two sync gates never wait on each other."""
        pos = durable
        for st in self.states.values():
            if not st.sync or st.gate_position >= pos:
                continue
            if (st.peer_name or st.dest.name) in path or not st.dest.passes(upstream_group):
                continue
            pos = st.gate_position
        return pos

    @property
    def sync_count(self) -> int:
        return sum(1 for st in self.states.values() if st.sync)

    def lag(self, st: DestinationState) -> float:
        """Seconds since the oldest record ``st`` has not acknowledged was logged (0: none)."""
        journal = self._journal()
        pos = st.gate_position
        if pos >= journal.last_position:
            return 0.0
        for rec in journal.read(max(pos + 1, journal.first_position)):
            return max(0.0, self.wallclock() - rec.timestamp / 1e6)
        return 0.0

    def in_grace(self, grace_period: float) -> bool:
        """Less than ``grace_period`` seconds since start-up: the downgrade/upgrade actions
        leave every destination alone (time for the other instances to start and connect)."""
        return self.wallclock() - self.started_at < grace_period

    # -- downgrade / upgrade (server.ports.ReplicationControl) ----------------------------
    def downgrade(self, age: float, grace_period: float) -> list[str]:
        out: list[str] = []
        if self.in_grace(grace_period):
            return out
        for st in self.states.values():
            if not st.sync or not st.dest.sync:  # configured async: never touched
                continue
            if self.lag(st) <= age:
                continue
            if self.min_sync is not None and self.sync_count - 1 < self.min_sync:
                break
            self.set_async(st)
            out.append(st.name)
        return out

    def upgrade(self, age: float, grace_period: float = 0.0) -> list[str]:
        out: list[str] = []
        if self.in_grace(grace_period):
            return out
        for st in self.states.values():
            if st.downgraded and st.connected and self.lag(st) < age:
                self.set_sync(st)
                out.append(st.name)
        return out

    def set_async(self, st: DestinationState) -> bool:
        """Downgrade ``st`` (False: it is not sync, or MinSyncDestinations forbids it)."""
        if not st.sync or (self.min_sync is not None and self.sync_count - 1 < self.min_sync):
            return False
        st.sync = False
        st.downgraded = True
        st.upgrade_pending = False
        return True

    def set_sync(self, st: DestinationState) -> bool:
        """Upgrade a downgraded ``st`` (False: it was not downgraded)."""
        if not st.downgraded:
            return False
        st.sync = True
        st.downgraded = False
        st.upgrade_pending = False
        return True

    def caught_up(self, st: DestinationState) -> bool:
        journal = self._journal()
        return st.connected and st.gate_position >= journal.durable_position


def _stamp(t: float | None) -> str:
    """An Admin timestamp (AMPS's ISO-8601 form), empty when never."""
    if t is None:
        return ""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


def describe_destination(gate: AckGate, st: DestinationState, instance_name: str,
                         now: float) -> dict[str, object]:
    """The Monitoring Reference's fields of ``/amps/instance/replication/<destination>`` (rates
    sampled at ``now``, monotonic), plus the emulator's ``held``/``cut``/``acked_position``."""
    dest = st.dest
    st.sample_rates(now)
    lag = gate.lag(st)
    return {
        "name": dest.name,
        "destination_name": st.peer_name or dest.name,
        "destination_group_name": st.peer_group or dest.group,
        "client_name": f"{instance_name}!{dest.name}!{st.replication_type}!amps-replication",
        "client_type": "replication source",
        "authenticated_id": "",
        "destination_admin_addr": "",
        "pass_through": dest.pass_through is not None,
        "replication_type": st.replication_type,
        "is_connected": st.connected,
        "connect_time": _stamp(st.connect_time),
        "disconnect_time": _stamp(st.disconnect_time),
        "disconnect_count": st.disconnect_count,
        "messages_out": st.messages_out,
        "bytes_out": st.bytes_out,
        "messages_out_per_sec": round(st.messages_out_per_sec, 3),
        "bytes_out_per_sec": round(st.bytes_out_per_sec, 3),
        "seconds_behind": int(lag) if lag >= 1 else 0,
        "configured_sync_type": dest.sync_type,
        "acked_position": st.acked_through,
        "held": st.held_at is not None,
        "cut": st.cut,
    }


__all__ = ["AckGate", "DestinationState", "describe_destination"]
