"""The sync gate on acks (replication/gate.py): what every current sync destination
acknowledged bounds what acks may cover; downgrade and upgrade by the age of the oldest
unacknowledged record, never under MinSyncDestinations; held acks."""

from __future__ import annotations

import msgspec

from amps_emulator.config import loads_config
from amps_emulator.journal import MemoryJournal
from amps_emulator.replication.gate import AckGate


def dests(*specs: tuple[str, str]) -> tuple:
    """Destinations named and typed as ``specs`` (name, sync type)."""
    body = "".join(f"""<Destination><Name>{n}</Name><Group>{n}</Group><SyncType>{t}</SyncType>
        <Topic><Name>.*</Name><MessageType>json</MessageType></Topic>
        <Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:{9000 + i}</InetAddr></Transport>
        </Destination>""" for i, (n, t) in enumerate(specs))
    cfg = loads_config(f"""<AMPSConfig><Name>A</Name>
      <TransactionLog><JournalDirectory>/tmp/x</JournalDirectory>
        <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
      <Replication>{body}</Replication></AMPSConfig>""", "a.xml")
    return cfg.replication.destinations


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def setup(*specs: tuple[str, str], min_sync: int | None = None) -> tuple[AckGate, MemoryJournal, Clock]:
    clock = Clock()
    journal = MemoryJournal(clock=clock)
    gate = AckGate(dests(*specs), lambda: journal, clock, min_sync=min_sync)
    return gate, journal, clock


def publish(journal: MemoryJournal, n: int = 1) -> int:
    for _ in range(n):
        journal.append(topic="orders", client_name="p", body=b"{}", message_type="json")
    return journal.last_position


def test_sync_destinations_bound_the_safe_position_async_ones_do_not():
    gate, journal, _ = setup(("B", "sync"), ("C", "sync"), ("D", "async"))
    last = publish(journal, 5)
    assert gate.safe(last) == 0
    gate.states["B"].acked_through = 5
    assert gate.safe(last) == 0  # C has acknowledged nothing
    gate.states["C"].acked_through = 3
    assert gate.safe(last) == 3
    assert gate.safe(2) == 2  # never beyond what is durable here
    gate.states["C"].acked_through = 5
    assert gate.safe(last) == 5  # D (async) never held anything


def test_held_acks_freeze_the_gate_until_released():
    gate, journal, _ = setup(("B", "sync"))
    st = gate.states["B"]
    st.acked_through = publish(journal, 2)
    st.held_at = st.acked_through
    st.acked_through = publish(journal, 3)
    assert gate.safe(journal.last_position) == 2
    st.held_at = None
    assert gate.safe(journal.last_position) == 5


def test_downgrade_by_age_and_grace_then_upgrade_once_caught_up():
    gate, journal, clock = setup(("B", "sync"), ("D", "async"))
    st = gate.states["B"]
    st.connected = True
    publish(journal, 2)
    clock.now += 5
    assert gate.downgrade(age=10, grace_period=0) == []  # 5 s old: not yet
    assert gate.downgrade(age=2, grace_period=30) == []  # lagging 5 s, grace 30 s
    assert gate.downgrade(age=2, grace_period=1) == ["B"]
    assert not st.sync and st.downgraded and gate.safe(journal.last_position) == 2
    assert gate.downgrade(age=0, grace_period=0) == []  # D is configured async: never touched
    assert gate.upgrade(age=1) == []  # still 5 s behind
    st.acked_through = journal.last_position
    assert gate.upgrade(age=1) == ["B"]
    assert st.sync and not st.downgraded


def test_min_sync_destinations_is_a_floor_for_downgrades():
    gate, journal, clock = setup(("B", "sync"), ("C", "sync"), min_sync=1)
    publish(journal)
    clock.now += 60
    assert gate.downgrade(age=1, grace_period=0) == ["B"]  # C stays: 1 sync destination left
    assert gate.states["C"].sync
    assert not gate.set_async(gate.states["C"])


def test_a_disconnected_downgraded_destination_is_not_upgraded():
    gate, journal, clock = setup(("B", "sync"))
    st = gate.states["B"]
    publish(journal)
    clock.now += 60
    assert gate.downgrade(age=1, grace_period=0) == ["B"]
    st.acked_through = journal.last_position
    assert gate.upgrade(age=1) == []  # not connected: it would hold acks again at once
    st.connected = True
    assert gate.upgrade(age=1) == ["B"]


def test_upstream_acks_wait_only_for_sync_destinations_that_forward_the_record():
    gate, journal, _ = setup(("A", "sync"), ("C", "sync"))
    last = publish(journal, 4)
    gate.states["A"].acked_through = 1
    gate.states["C"].acked_through = 3
    # a record from A: never goes back to A; C has no PassThrough for A's group: not forwarded
    assert gate.safe_for(last, ("A",), "A") == last
    # C's destination passes every group through: a record from A waits for C (a chain)
    c = gate.states["C"]
    c.dest = msgspec.structs.replace(c.dest, pass_through=".*")
    assert gate.safe_for(last, ("A",), "A") == 3
    assert gate.safe_for(last, ("X", "C"), "C") == last  # came through C: not sent back there
