"""Queue work waiting for a record in a compressed segment (server.services.queue_held): it is
carried out in order once woken, and one action whose record cannot be read is given up (one
log line) without keeping the others waiting."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from amps_emulator.journal import SegmentPending
from amps_emulator.server.services.queue_held import HeldFilter, HeldWork


def reader(pending: set, rec=lambda position: f"rec-{position}"):
    """``read(position, hold)`` of records ``rec(position)``, those in ``pending`` not
    decompressed yet."""
    def read(position, hold):
        if position in pending:
            raise SegmentPending(f"segment of {position}")
        return rec(position)
    return read


def queue(at_most_once: bool = False) -> SimpleNamespace:
    """A queue as HeldWork sees it: its name, and its engine's spec."""
    return SimpleNamespace(name="jobs", engine=SimpleNamespace(
        spec=SimpleNamespace(at_most_once=at_most_once)))


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
    q = queue()
    for position in (1, 2, 3):
        work.run(q, SimpleNamespace(position=position))
    assert carried == [] and len(work.waiting) == 3  # behind the first, in order
    pending.clear()
    with caplog.at_level(logging.ERROR, logger="amps_emulator.queues"):
        work.drain()
    assert carried == ["rec-1", "rec-3"] and not work.waiting
    assert [r.getMessage() for r in caplog.records] == [
        "queue jobs: the record of a delivery that waited could not be read"]


def test_a_delivery_whose_lease_ended_while_it_waited_is_not_sent():
    pending = {1}
    clock = [100.0]

    read = reader(pending)

    carried = []
    work = HeldWork(lambda: None, read, lambda q, action, rec: carried.append((rec, action.lease_expiry)),
                    lambda: clock[0])
    q = queue()
    work.run(q, SimpleNamespace(position=1, lease_expiry=110.0))
    clock[0] = 115.0  # the lease ended: the message returned and was delivered again
    work.run(q, SimpleNamespace(position=1, lease_expiry=125.0))
    work.run(q, SimpleNamespace(position=2, lease_expiry=None))  # (no lease period)
    pending.clear()
    work.drain()
    assert carried == [("rec-1", 125.0), ("rec-2", None)]


def test_a_filter_waits_for_its_record_then_the_queue_dispatches_again():
    pending = {2}
    ready = []

    read = reader(pending, lambda position: position)

    flt = HeldFilter(lambda: None, read, lambda rec: rec % 2 == 0, lambda: ready.append(True))
    # in order: what comes after the record being decompressed waits behind it (None: the
    # filter cannot tell yet, so a barrier released meanwhile is owed to the subscription)
    assert [flt(p) for p in (0, 1, 2, 4)] == [True, False, None, None]
    pending.clear()
    flt._go_on()  # (woken on the loop)
    assert ready == [True]
    assert [flt(p) for p in (2, 3, 4)] == [True, False, True]
    flt._go_on()  # a wake nothing waited for dispatches nothing
    assert ready == [True]


def test_the_engine_is_told_which_deliveries_wait_and_which_are_sent_after_their_wait():
    pending = {1}
    clock = [100.0]

    read = reader(pending)

    told = []
    work = HeldWork(lambda: None, read, lambda q, action, rec: None, lambda: clock[0],
                    lambda q, action, sent: told.append((action.position, action.lease_expiry, sent)))
    q = queue()
    work.run(q, SimpleNamespace(position=3, lease_expiry=110.0))  # carried out at once
    work.run(q, SimpleNamespace(position=1, lease_expiry=110.0))
    clock[0] = 115.0
    work.run(q, SimpleNamespace(position=1, lease_expiry=125.0))
    pending.clear()
    work.drain()
    assert told == [(1, 110.0, False), (1, 125.0, False), (1, 125.0, True)]  # (not the lapsed one)


def test_a_queue_query_waits_for_each_pending_record_and_keeps_the_order():
    """``query_steps`` reads a record being decompressed again after each wait (yielding the
    decompression it waits for), and gives the records in the queue's order."""
    from concurrent.futures import Future

    from amps_emulator.server.services.queue_held import query_steps

    waits = {2: 2, 4: 1}  # position: reads that find its segment still being decompressed
    job = SimpleNamespace(future=Future())

    def read(position, hold):
        if waits.get(position):
            waits[position] -= 1
            hold.job = job
            raise SegmentPending(f"segment of {position}")
        return SimpleNamespace(position=position, body=b"{}", key="q", topic="q")

    steps = query_steps(read, lambda body, key: {}, [SimpleNamespace(position=p) for p in range(6)],
                        None, None)
    yielded = []
    try:
        while True:
            yielded.append(next(steps))
    except StopIteration as stop:
        recs, total = stop.value
    assert yielded == [job.future] * 3 and not any(waits.values())
    assert [r.position for r in recs] == list(range(6)) and total == 6
