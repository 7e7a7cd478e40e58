"""Queue work waiting for a record in a compressed segment (server.services.queue_held): it is
carried out in order once woken, and one action whose record cannot be read is given up (one
log line) without keeping the others waiting."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from amps_emulator.journal import SegmentPending
from amps_emulator.server.services.queue_held import HeldWork


def test_waiting_work_goes_on_in_order_past_a_record_that_cannot_be_read(caplog):
    pending = {1}
    broken = {2}

    def read(position, hold):
        if position in pending:
            raise SegmentPending(f"segment of {position}")
        if position in broken:
            raise OSError("the archived segment went away")
        return f"rec-{position}"

    carried = []
    work = HeldWork(lambda: None, read, lambda q, action, rec: carried.append(rec))
    q = SimpleNamespace(name="jobs")
    for position in (1, 2, 3):
        work.run(q, SimpleNamespace(position=position))
    assert carried == [] and len(work.waiting) == 3  # behind the first, in order
    pending.clear()
    with caplog.at_level(logging.ERROR, logger="amps_emulator.queues"):
        work.drain()
    assert carried == ["rec-1", "rec-3"] and not work.waiting
    assert [r.getMessage() for r in caplog.records] == [
        "queue jobs: the record of a delivery that waited could not be read"]
