"""A lease whose delivery the server never sent (it waited for its record, in a compressed
journal segment, past the lease's end; or its subscription ended meanwhile) is no delivery:
it does not count toward MaxDeliveries nor in ``delivery_count``, in the engine and in a
replay of the full queue events."""

from __future__ import annotations

from amps_emulator.queues import (
    Deliver,
    Enqueue,
    Expired,
    LeaseExpire,
    QueueEngine,
    QueueSpec,
    Returned,
    decode_event,
    encode_event,
    events_for,
)
from amps_emulator.queues.recovery import replay


def bm(i: int) -> str:
    return f"7|{i}|"


def once(**kw) -> QueueEngine:
    """A queue whose messages may be delivered once, with a 10 s lease, holding message 1."""
    eng = QueueEngine(QueueSpec("q", lease_period=10.0, max_deliveries=1, **kw))
    eng.enqueue(1, bm(1), 0.0)
    return eng


def test_a_lease_that_ends_while_its_delivery_waits_does_not_count():
    eng = once()
    (d,) = eng.add_subscriber("s", 0.0)
    eng.delivery_waits(d.position, d.sub_key)  # its record is being decompressed
    out = eng.poll(10.0)  # the lease ends before the delivery is sent
    assert out[0] == Returned(1, bm(1), "lease_expired", "s", True)
    assert [(type(a), a.delivery_count) for a in out[1:]] == [(Deliver, 1)]  # again, the first
    assert [m.delivery_count for m in eng.messages(include_leased=True)] == [1]
    assert eng.poll(20.0) == [Expired(1, bm(1), "max_deliveries")]  # that one was sent


def test_a_delivery_sent_after_its_wait_counts():
    eng = once()
    (d,) = eng.add_subscriber("s", 0.0)
    eng.delivery_waits(d.position, d.sub_key)
    eng.delivery_sent(d.position, d.sub_key)  # decompressed before the lease ended: sent
    assert eng.poll(10.0) == [Expired(1, bm(1), "max_deliveries")]


def test_a_subscription_that_ends_while_its_delivery_waits_leaves_the_message_undelivered():
    eng = once()
    (d,) = eng.add_subscriber("s", 0.0)
    eng.delivery_waits(d.position, d.sub_key)
    assert eng.remove_subscriber("s", 1.0) == [Returned(1, bm(1), "unsubscribe", "s", True)]
    (again,) = eng.add_subscriber("t", 2.0)
    assert (again.position, again.delivery_count, again.lease_expiry) == (1, 1, 12.0)
    assert eng.poll(10.0) == []  # the first lease's end is not the new lease's
    assert eng.poll(12.0) == [Expired(1, bm(1), "max_deliveries")]


def test_waits_for_a_message_not_leased_to_that_subscription_is_ignored():
    eng = once()
    (d,) = eng.add_subscriber("s", 0.0)
    eng.delivery_waits(d.position, "another")
    eng.delivery_waits(99, "s")
    assert eng.poll(10.0) == [Expired(1, bm(1), "max_deliveries")]


def test_replay_with_counters_takes_an_unsent_lease_off_the_count():
    spec = QueueSpec("q", lease_period=10.0, max_deliveries=2)
    eng, records = QueueEngine(spec), []

    def journal(actions):
        for ev in events_for(actions, spec, full=True):
            records.append(decode_event(*encode_event(ev)))

    records.append(Enqueue(1, bm(1), 0.0))
    eng.enqueue(1, bm(1), 0.0)
    (d,) = eng.add_subscriber("s", 0.0)
    journal([d])
    eng.delivery_waits(1, "s")
    journal(eng.poll(10.0))  # unsent lease ends; delivered again (sent)
    assert LeaseExpire(1, True) in records
    rec = replay(QueueEngine(spec), records, now=11.0, keep_counters=True)
    assert [m.delivery_count for m in rec.messages()] == [1]
    (again,) = rec.add_subscriber("s", 11.0)
    assert again.delivery_count == 2
