"""A queue whose messages are in a compressed journal segment, on a real server driven by the
official Python client and the test clock: a subscription's filter, a ``sow_delete`` by
filter and a view over the queue read those messages with the segment decompressed off the
event loop (another client is answered meanwhile), with the results they had before; and a
delivery that waited longer than its lease is sent once, with a lease of its own, and was no
delivery (MaxDeliveries); a barrier released while a subscription's filter waits reaches it
once, in order."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from typing import Any

import AMPS
import pytest

from amps_emulator.config import loads_config
from amps_emulator.protocol.bookmarks import format_timestamp
from amps_emulator.server.core.clock import TestClock
from amps_emulator.server.services import queue_service, queue_views
from tests.integration.actions.test_housekeeping_actions import N, SowQuery, client, compressed_log
from tests.support.clients import Collector
from tests.support.journals import SlowGunzip, compressing_config
from tests.support.servers import ServerThread, until

QUEUED = 40


def config(d, limits: str = "") -> str:
    """``limits``: more elements of the queue (MaxDeliveries, ...)."""
    return compressing_config(d, "compressed-queue-test", f"""
<SOW><Queue><Name>work-q</Name><MessageType>json</MessageType><UnderlyingTopic>work</UnderlyingTopic>
  <LeasePeriod>10s</LeasePeriod><MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog>{limits}</Queue>
  <View><Name>waiting</Name><MessageType>json</MessageType><UnderlyingTopic>work-q</UnderlyingTopic>
    <Projection><Field>/i</Field><Field>/odd</Field></Projection><Grouping><Field>/i</Field></Grouping>
  </View></SOW>""")


@pytest.fixture
def srv(tmp_path, monkeypatch, request):
    """The server; a test's indirect parameter adds elements to the queue's config."""
    monkeypatch.setattr(queue_service, "CACHE_RECORDS", 4)  # queue reads go to the journal
    limits = getattr(request, "param", "")
    s = ServerThread(loads_config(config(tmp_path, limits), "compressed-queue.xml"),
                     timebase=TestClock()).start()
    yield s
    s.stop()


@pytest.fixture
def slow():
    s = SlowGunzip()
    yield s
    s.release.set()


@pytest.fixture
def publisher(srv):
    """A client whose ``QUEUED`` messages on ``work`` (``i``, ``odd``) are in the oldest
    segment, compressed."""
    c = client(srv, "publisher")
    for i in range(QUEUED):
        c.publish("work", json.dumps({"i": i, "odd": i % 2}))
    compressed_log(srv, c, N)
    yield c
    c.close()


def answered_meanwhile(slow: SlowGunzip, c) -> None:
    """The decompression began and is held: another client's publishes are answered."""
    assert slow.entered.wait(30)
    for i in range(N + 1, N + 6):
        c.publish("orders", json.dumps({"i": i}))
    c.flush(5000)
    assert not slow.release.is_set() and slow.calls == 1


def off_the_loop(slow: SlowGunzip) -> bool:
    return bool(slow.threads) and all(t.name.startswith("amps-gunzip") for t in slow.threads)


def taken(m) -> int | None:
    """A queue message's ``i``, acknowledged (so the next one comes)."""
    if m.get_command() not in ("p", "publish"):
        return None
    m.ack()
    return json.loads(m.get_data())["i"]


def ids(items) -> list[int]:
    return [i for i in items if i is not None]


def test_a_subscription_filter_reads_a_compressed_segment_off_the_loop(srv, publisher, slow,
                                                                      monkeypatch):
    slow.install(monkeypatch)
    work = Collector(taken)
    consumer = client(srv, "consumer")
    consumer.execute_async(AMPS.Command("subscribe").set_topic("work-q").set_filter("/odd = 0"),
                           work)
    answered_meanwhile(slow, publisher)
    assert ids(work.items) == []
    slow.release.set()
    evens = list(range(0, QUEUED, 2))
    assert work.wait_until(lambda items: len(ids(items)) >= len(evens), 20)
    assert ids(work.items) == evens  # what the filter takes, in order
    assert off_the_loop(slow)
    consumer.close()


def test_asking_a_waiting_subscription_filter_again_waits_once(srv, publisher, slow, monkeypatch):
    """While a queue subscription's filter waits for a compressed segment, whoever asks it
    about a message (the replicated queue's transfer decisions) asks the same filter: one
    wait, and one dispatch once it is decompressed, not one per question."""
    svc = srv.server.queue_service
    queue = svc.queues["work-q"]
    redispatched = []
    real = svc._redispatch
    monkeypatch.setattr(svc, "_redispatch", lambda q: (redispatched.append(q.name), real(q)))
    slow.install(monkeypatch)
    work = Collector(taken)
    consumer = client(srv, "consumer")
    consumer.execute_async(AMPS.Command("subscribe").set_topic("work-q").set_filter("/odd = 0"),
                           work)
    assert slow.entered.wait(30)
    positions = srv.call(lambda: [m.position for m in queue.engine.messages(
        include_leased=True, now=svc.now())][:5])
    assert len(positions) == 5
    for pos in positions:  # not taken while its record is being decompressed
        assert srv.call(lambda p=pos: svc.some_subscription_takes(queue, p)) is False
    slow.release.set()
    evens = list(range(0, QUEUED, 2))
    assert work.wait_until(lambda items: len(ids(items)) >= len(evens), 20)
    assert redispatched == ["work-q"]
    consumer.close()


def test_a_sow_delete_by_filter_reads_a_compressed_segment_off_the_loop(srv, publisher, slow,
                                                                       monkeypatch):
    slow.install(monkeypatch)
    consumer = client(srv, "consumer")
    done = threading.Event()

    def delete() -> None:
        consumer.sow_delete("work-q", "/i < 25", 30000)
        done.set()

    threading.Thread(target=delete, daemon=True).start()
    answered_meanwhile(slow, publisher)
    assert not done.is_set()  # its acks come after the work they report
    slow.release.set()
    assert done.wait(20)
    query = SowQuery()
    consumer.execute_async(AMPS.Command("sow").set_topic("work-q"), query)
    assert query.done.wait(20)
    assert query.ids == list(range(25, QUEUED))  # the others acknowledged, none twice
    assert off_the_loop(slow)
    consumer.close()


def test_a_sow_delete_by_filter_is_done_when_its_client_leaves_while_it_waits(
        srv, publisher, slow, monkeypatch):
    slow.install(monkeypatch)
    consumer = client(srv, "consumer")

    def delete() -> None:
        with contextlib.suppress(AMPS.AMPSException):  # (it leaves before the acks)
            consumer.sow_delete("work-q", "/i < 25", 30000)

    threading.Thread(target=delete, daemon=True).start()
    answered_meanwhile(slow, publisher)  # (the delete reads the compressed segment)
    consumer.close()
    assert until(lambda: srv.call(lambda: "consumer" not in srv.server.broker.by_name))
    slow.release.set()
    queue = srv.server.queue_service.queues["work-q"]
    assert until(lambda: srv.call(lambda: queue.engine.depth) == QUEUED - 25)
    viewer = client(srv, "viewer")
    query = SowQuery()
    viewer.execute_async(AMPS.Command("sow").set_topic("work-q"), query)
    assert query.done.wait(20)
    assert query.ids == list(range(25, QUEUED))  # the delete was done all the same
    viewer.close()


def view_ids(c) -> list[int]:
    return sorted(json.loads(m.get_data())["i"] for m in c.sow("waiting", timeout=5000)
                  if m.get_command() == "sow")


def leased_out_of_view(srv) -> tuple[Any, Any]:
    """A client of the view over the queue, and a consumer that leased every message (so
    none is in the view) and has not acknowledged them; the decompressed segments are
    forgotten (so the view's next check reads a compressed one)."""
    viewer = client(srv, "viewer")
    assert view_ids(viewer) == list(range(QUEUED))
    leased = Collector(lambda m: m.get_command() in ("p", "publish") or None)
    consumer = client(srv, "consumer")
    consumer.execute_async(AMPS.Command("subscribe").set_topic("work-q")
                           .set_options(f"max_backlog={QUEUED}"), leased)
    assert leased.wait_until(lambda items: len(ids(items)) >= QUEUED, 20)
    assert until(lambda: view_ids(viewer) == [])
    journal = srv.server.txlog.journal
    srv.call(lambda: [s.cache.forget(s.path) for s in journal.segments if s.cache is not None])
    return viewer, consumer


def test_a_view_over_a_queue_reads_a_compressed_segment_off_the_loop(srv, publisher, slow,
                                                                    monkeypatch):
    viewer, consumer = leased_out_of_view(srv)
    slow.install(monkeypatch)
    consumer.close()  # its leases end: the messages are in the view again
    answered_meanwhile(slow, publisher)
    slow.release.set()
    assert until(lambda: view_ids(viewer) == list(range(QUEUED)))
    assert off_the_loop(slow)
    viewer.close()


def test_a_views_check_that_fails_after_a_wait_is_contained_and_done_again(
        srv, publisher, slow, monkeypatch, caplog):
    """The check a view makes once a record it waited for is decompressed fails (an error of
    its own): the error is logged once, stays out of the loop, and the positions it was to
    check are checked again at the queue's next change."""
    viewer, consumer = leased_out_of_view(srv)
    slow.install(monkeypatch)
    real_sync, failed = queue_views.QueueRows.sync, []

    def sync_failing_once(rows, check):
        if slow.release.is_set() and not failed:
            failed.append(True)
            raise RuntimeError("a check that fails")
        return real_sync(rows, check)

    monkeypatch.setattr(queue_views.QueueRows, "sync", sync_failing_once)
    consumer.close()  # its leases end: the messages are in the view again (after a wait)
    assert slow.entered.wait(30)
    with caplog.at_level(logging.ERROR):
        slow.release.set()
        assert until(lambda: failed)
        assert until(lambda: any("checking the queue for its views failed" in r.getMessage()
                                 for r in caplog.records))
    publisher.publish("work", json.dumps({"i": QUEUED, "odd": 0}))  # the queue's next change
    assert until(lambda: view_ids(viewer) == list(range(QUEUED + 1)))
    viewer.close()


def consume_past_lease(srv, slow, monkeypatch, item):
    """A consumer of ``work-q`` (backlog 1) whose first delivery waits for its record, held,
    while the 10 s lease runs out: (its collector of ``item(message)``, the consumer)."""
    slow.install(monkeypatch)
    got = Collector(lambda m: item(m) if m.get_command() in ("p", "publish") else None)
    consumer = client(srv, "consumer")
    consumer.execute_async(AMPS.Command("subscribe").set_topic("work-q"), got)  # (backlog 1)
    assert slow.entered.wait(30)  # the first delivery waits for its record
    srv.http("/emulator/clock/advance?seconds=15", "POST")  # its 10 s lease ends meanwhile
    return got, consumer


def test_a_delivery_that_waited_past_its_lease_is_sent_once(srv, publisher, slow, monkeypatch):
    got, consumer = consume_past_lease(srv, slow, monkeypatch,
                                       lambda m: (json.loads(m.get_data())["i"], m.get_lease_period()))
    # the lease's end returned the message, which was delivered again (and waits too)
    queue = srv.server.queue_service.queues["work-q"]
    assert until(lambda: srv.call(lambda: len(srv.server.queue_service.held.waiting)) == 2)
    assert srv.call(lambda: queue.engine.leased_count) == 1
    slow.release.set()
    assert got.wait_until(lambda items: len(ids(items)) >= 1, 20)
    consumer.flush(5000)  # (anything sent with the first is in by now)
    first = ids(got.items)
    assert [i for i, _ in first] == [0]  # once, not once per lease
    now = srv.call(srv.server.timebase.time)
    lease_end = first[0][1]
    assert lease_end and lease_end > format_timestamp(int(now * 1_000_000))
    consumer.close()


@pytest.mark.parametrize("srv", ["<MaxDeliveries>1</MaxDeliveries>"], indirect=True)
def test_a_lease_that_ended_before_its_delivery_was_sent_is_no_delivery(srv, publisher, slow,
                                                                       monkeypatch):
    """MaxDeliveries 1: the lease that ended while its delivery waited was never a delivery,
    so the message is delivered again (once), not expired undelivered."""
    got, consumer = consume_past_lease(srv, slow, monkeypatch,
                                       lambda m: json.loads(m.get_data())["i"])
    queue = srv.server.queue_service.queues["work-q"]
    # the lease's end returned the message or expired it: either way, more work waits
    assert until(lambda: srv.call(lambda: len(srv.server.queue_service.held.waiting)) >= 2)
    slow.release.set()
    assert got.wait_until(lambda items: len(ids(items)) >= 1, 20)
    consumer.flush(5000)
    assert ids(got.items) == [0]  # delivered, once; not expired with max_deliveries
    assert srv.call(lambda: queue.engine.depth) == QUEUED
    consumer.close()


@pytest.mark.parametrize("srv", ["<Semantics>at-most-once</Semantics>"], indirect=True)
def test_an_at_most_once_delivery_that_waited_past_its_lease_is_still_sent(srv, publisher, slow,
                                                                          monkeypatch):
    """At most once: the message left the queue when it was leased, so the delivery that
    waited for its record past the lease period is sent all the same (not lost)."""
    got, consumer = consume_past_lease(srv, slow, monkeypatch,
                                       lambda m: json.loads(m.get_data())["i"])
    slow.release.set()
    assert got.wait_until(lambda items: len(ids(items)) >= 1, 20)
    consumer.flush(5000)
    assert ids(got.items)[0] == 0  # the first message, not lost
    assert sorted(ids(got.items)) == list(range(len(got.items)))  # each once, none skipped
    consumer.close()


@pytest.mark.parametrize("srv", ["<BarrierExpression>/barrier = 1</BarrierExpression>"],
                         indirect=True)
def test_a_barrier_released_while_a_filter_waits_is_delivered_to_it_once(srv, slow,
                                                                         monkeypatch):
    """The barrier is released (the message before it acknowledged) while a subscription's
    filter waits for the barrier's record, in a compressed segment: the other subscription
    gets the barrier at once, the waiting one once its filter can tell, before anything
    after the barrier and only once (AMPS: to every current subscriber whose filter takes
    it)."""
    pub = client(srv, "publisher")
    for i in range(6):  # 1 is the barrier
        pub.publish("work", json.dumps({"i": i, "barrier": int(i == 1)}))
    compressed_log(srv, pub, N)
    kept: list[Any] = []

    def unacked(m) -> int | None:  # (acknowledged by the test)
        if m.get_command() not in ("p", "publish"):
            return None
        kept.append(m.__deepcopy__({}))
        return json.loads(m.get_data())["i"]

    other_got = Collector(unacked)
    other = client(srv, "other")
    other.execute_async(AMPS.Command("subscribe").set_topic("work-q"), other_got)  # (backlog 1)
    assert other_got.wait_until(lambda items: ids(items) == [0], 20)
    journal = srv.server.txlog.journal  # the barrier's record must be decompressed again
    srv.call(lambda: [s.cache.forget(s.path) for s in journal.segments if s.cache is not None])
    slow.install(monkeypatch)
    held_got = Collector(taken)
    held = client(srv, "held")
    held.execute_async(AMPS.Command("subscribe").set_topic("work-q").set_filter("/i >= 0")
                       .set_options("max_backlog=10"), held_got)
    held.flush(5000)
    kept[0].ack()  # the barrier is released; its record is read off the loop
    assert slow.entered.wait(30)
    assert ids(held_got.items) == []
    slow.release.set()
    assert other_got.wait_until(lambda items: ids(items) == [0, 1, 2], 20)
    assert held_got.wait_until(lambda items: len(ids(items)) >= 4, 20)
    pub.publish("work", json.dumps({"i": 6, "barrier": 0}))  # (anything sent twice is in before)
    assert held_got.wait_until(lambda items: len(ids(items)) >= 5, 20)
    held.flush(5000)
    # the barrier first and once; 2 went to the other subscription, which had room meanwhile
    assert ids(held_got.items) == [1, 3, 4, 5, 6]
    assert off_the_loop(slow)
    for c in (held, other, pub):
        c.close()
