"""``amps-action-do-remove-journal``'s journal side: ``enforce_retention(age=...)`` removes the
segments older than the action's ``Age`` whether or not the config sets any retention, and
never the newest one or one a pin still needs."""

from __future__ import annotations

from amps_emulator.sow.testing import FakeClock
from tests.unit.journal.test_journal_contract import commit, make, publish

__all__ = ["make"]  # the fixture, parametrised over the memory and file journals


def test_remove_by_age_without_configured_retention(make):
    clock = FakeClock(1_800_000_000.0)
    j = make(segment_size=800, clock=clock)
    for i in range(40):
        publish(j, i)
    commit(j)
    old_end = j.last_position
    clock.advance(3 * 86400)
    for i in range(40, 80):
        publish(j, i)
    commit(j)
    assert j.enforce_retention([]).removed == ()  # nothing configured: nothing by itself
    assert j.enforce_retention([], age=4 * 86400).removed == ()  # nothing that old
    pinned = j.enforce_retention([5], age=86400)
    assert pinned.removed == () and pinned.blocked_by_pin == 5
    res = j.enforce_retention([], age=86400)
    assert res.removed and res.records_removed > 0
    bodies = [r.body for r in j.read()]
    assert b"m0" not in bodies and b"m40" in bodies and b"m79" in bodies
    assert j.first_position <= old_end + 2  # nothing of the newer batch went
