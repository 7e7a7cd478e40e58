"""Message queues through the official client: leases, backlog, acks, dead letters, restarts.

The queue server runs on the test clock (``TestClock``, what ``--test-clock`` gives): it stands
still until a test advances it, so no lease or expiration runs out while a loaded machine is
slow, and the tests about leases and expiration move time explicitly (:func:`advance`)
instead of waiting for it and asserting how long they waited.
"""

from __future__ import annotations

import json
import threading
import time

import AMPS
import pytest

from amps_emulator.config import loads_config
from amps_emulator.server.core.clock import TestClock
from tests.support.clients import clients_for
from tests.support.paths import FIXTURES
from tests.support.servers import ServerThread, config_xml, start_server

QUEUES = """<SOW>
  <Queue><Name>work</Name><MessageType>json</MessageType><LeasePeriod>1s</LeasePeriod>
    <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog></Queue>
  <Queue><Name>amo</Name><MessageType>json</MessageType><Semantics>at-most-once</Semantics>
    <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog></Queue>
  <Queue><Name>prio</Name><MessageType>json</MessageType><Priority>/p</Priority>
    <MaxPerSubscriptionBacklog>1</MaxPerSubscriptionBacklog></Queue>
  <Queue><Name>barrier</Name><MessageType>json</MessageType><BarrierExpression>/eod = 1</BarrierExpression>
    <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog></Queue>
  <Queue><Name>short</Name><MessageType>json</MessageType><Expiration>1s</Expiration>
    <MaxDeliveries>2</MaxDeliveries><LeasePeriod>500ms</LeasePeriod></Queue>
  <Queue><Name>multi</Name><MessageType>json</MessageType><UnderlyingTopic>^orders\\.(us|eu)$</UnderlyingTopic>
    <DefaultPublishTarget>orders.us</DefaultPublishTarget><Filter>/qty > 0</Filter>
    <MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog></Queue>
  <Queue><Name>from-sow</Name><MessageType>json</MessageType><UnderlyingTopic>prices</UnderlyingTopic>
    <MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog></Queue>
  <Topic><Name>prices</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>
</SOW>
""" + (FIXTURES / "seed003_dead_letter.xml").read_text()


def queue_config(d) -> str:
    return config_xml(d, extra=QUEUES)


@pytest.fixture
def clock():
    return TestClock()


@pytest.fixture
def qserver(tmp_path, clock):
    srv = ServerThread(loads_config(queue_config(tmp_path), "queues.xml"), timebase=clock).start()
    yield srv
    srv.stop()


@pytest.fixture
def advance(qserver, clock):
    """``advance(seconds)``: move the server's clock forward, on its loop; the lease and
    expiration timers that fall due run there before it returns."""
    return lambda seconds: qserver.call(lambda: clock.advance(seconds))


@pytest.fixture
def connect(qserver):
    yield from clients_for(qserver.uri)


class Delivered:
    """What a handler saw (the client reuses its Message object, so copy it out)."""

    def __init__(self, client, m) -> None:
        self.client = client
        self.message = m.__deepcopy__({})  # acked later through the client's own Message.ack
        self.topic = m.get_topic()
        self.bookmark = m.get_bookmark()
        self.lease = m.get_lease_period()
        self.data = json.loads(m.get_data())

    def ack(self, option: str | None = None) -> None:
        if option:
            self.message.ack(option)
        else:
            self.message.ack()


class Worker:
    """A queue subscriber; ``auto`` acks each message as it arrives (or cancels/expires)."""

    def __init__(self, client, topic: str, auto: str | None = "ack", options: str = "",
                 flt: str | None = None) -> None:
        self.client = client
        self.auto = auto
        self.messages: list[Delivered] = []
        self._cv = threading.Condition()
        kw = {"options": options} if options else {}
        if flt:
            kw["filter"] = flt
        self.sub_id = client.subscribe(self._on, topic, timeout=5000, **kw)

    def _on(self, m) -> None:
        d = Delivered(self.client, m)
        with self._cv:
            self.messages.append(d)
            self._cv.notify_all()
        if self.auto == "ack":
            m.ack()
        elif self.auto in ("cancel", "expire"):
            m.ack(self.auto)

    @property
    def data(self) -> list:
        with self._cv:
            return [d.data for d in self.messages]

    def settled(self) -> list:
        """The data received once everything the server sent this client before now has
        arrived (a flush round trip on its connection: deliveries come before the ack)."""
        self.client.flush(5000)
        return self.data

    def wait(self, n: int, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cv:
            while len(self.messages) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
            return True


def publish(c, topic: str, rows) -> None:
    for r in rows:
        c.publish(topic, json.dumps(r))
    c.flush(5000)


def test_delivery_carries_topic_bookmark_and_lease_and_ack_removes(connect):
    pub = connect()
    w = Worker(connect(), "work")
    publish(pub, "work", [{"i": i} for i in range(5)])
    assert w.wait(5)
    m = w.messages[0]
    assert m.topic == "work" and m.bookmark.count("|") == 2
    assert m.lease.endswith("Z")
    pub.flush(5000)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and list(pub.sow("work", timeout=5000))[1:-1]:
        time.sleep(0.02)
    assert [x for x in pub.sow("work", timeout=5000) if x.get_command() == "sow"] == []


def test_three_workers_drain_a_thousand_messages_exactly_once(connect):
    pub = connect()
    workers = [Worker(connect(), "work", options="max_backlog=5") for _ in range(3)]
    publish(pub, "work", [{"i": i} for i in range(1000)])
    deadline = time.monotonic() + 20
    while sum(len(w.messages) for w in workers) < 1000 and time.monotonic() < deadline:
        time.sleep(0.02)
    seen = sorted(d["i"] for w in workers for d in w.data)
    assert seen == list(range(1000))
    assert all(w.messages for w in workers), "every worker got a share"


def test_backlog_limits_unacked_deliveries(connect):
    pub = connect()
    w = Worker(connect(), "work", auto=None, options="max_backlog=3")
    publish(pub, "work", [{"i": i} for i in range(10)])
    assert w.wait(3)
    assert not w.wait(4, timeout=0.5)  # nothing beyond the backlog until an ack
    w.messages[0].ack()
    assert w.wait(4)
    assert [d["i"] for d in w.data] == [0, 1, 2, 3]


def test_a_worker_that_stops_acking_loses_its_messages_after_the_lease(connect, advance):
    pub = connect()
    stuck = Worker(connect(), "work", auto=None, options="max_backlog=4")
    publish(pub, "work", [{"i": 1}, {"i": 2}, {"i": 3}])
    assert stuck.wait(3)  # leased at t=0 for the queue's one second
    advance(0.5)
    # The healthy worker does not take #100, so #100 (leased at t=0.5) fills the stuck
    # worker's backlog and it stays the fuller of the two when the first three leases run
    # out (proportional fairness gives returned messages to the emptier backlog).
    healthy = Worker(connect(), "work", options="max_backlog=10", flt="/i < 100")
    publish(pub, "work", [{"i": 100}])
    assert stuck.wait(4)
    advance(0.49)  # t=0.99: no lease has run out, nothing moves
    assert healthy.settled() == []
    advance(0.02)  # t=1.01: the leases of 1, 2 and 3 ran out, #100's has not
    assert healthy.wait(3, timeout=10)
    assert sorted(d["i"] for d in healthy.data) == [1, 2, 3]
    assert [d["i"] for d in stuck.settled()] == [1, 2, 3, 100]  # none went back to it


def test_a_killed_workers_leases_move_immediately(connect):
    pub = connect()
    doomed_client = connect()
    doomed = Worker(doomed_client, "work", auto=None, options="max_backlog=2")
    publish(pub, "work", [{"i": 1}, {"i": 2}])
    assert doomed.wait(2)
    other = Worker(connect(), "work", options="max_backlog=10")
    assert other.settled() == []  # both are leased to the doomed worker
    doomed_client.close()
    # the clock stands still, so no lease ran out: the disconnection moved them
    assert other.wait(2, timeout=10)


def test_cancel_returns_the_message_and_expire_removes_it(connect):
    pub = connect()
    w = Worker(connect(), "work", auto=None, options="max_backlog=10")
    publish(pub, "work", [{"i": 1}, {"i": 2}])
    assert w.wait(2)
    w.messages[0].ack("cancel")
    assert w.wait(3)
    assert w.data[2] == {"i": 1}
    w.messages[1].ack("expire")
    w.messages[2].ack()
    w.client.flush(5000)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and [x for x in pub.sow("work", timeout=5000) if x.get_command() == "sow"]:
        time.sleep(0.02)
    assert [x for x in pub.sow("work", timeout=5000) if x.get_command() == "sow"] == []


def test_at_most_once_removes_on_delivery(connect):
    pub = connect()
    w = Worker(connect(), "amo", auto=None, options="max_backlog=2")
    publish(pub, "amo", [{"i": i} for i in range(3)])
    assert w.wait(2)
    assert not w.wait(3, timeout=0.3)  # backlog full until acked
    w.messages[0].ack()
    assert w.wait(3)
    w.client.close()
    again = Worker(connect(), "amo", options="max_backlog=10")
    assert not again.wait(1, timeout=0.5)  # nothing is redelivered in at-most-once


def test_priority_orders_delivery(connect):
    pub = connect()
    publish(pub, "prio", [{"i": 1, "p": 1}, {"i": 2, "p": 9}, {"i": 3}, {"i": 4, "p": 5}])
    w = Worker(connect(), "prio")
    assert w.wait(4)
    assert [d["i"] for d in w.data] == [2, 4, 1, 3]


def test_barrier_waits_for_everything_before_it(connect):
    pub = connect()
    w = Worker(connect(), "barrier", auto=None, options="max_backlog=10")
    publish(pub, "barrier", [{"i": 1}, {"i": 2}, {"i": 3, "eod": 1}, {"i": 4}])
    assert w.wait(2)
    assert not w.wait(3, timeout=0.3)
    for m in list(w.messages):
        m.ack()
    assert w.wait(4)
    assert [d["i"] for d in w.data] == [1, 2, 3, 4]


def test_seed_dead_letter_configuration_moves_failed_jobs(connect):
    pub = connect()
    failed = Worker(connect(), "FailedJobs")
    canceller = Worker(connect(), "Jobs", auto="cancel")
    publish(pub, "Jobs", [{"job": 42}])
    assert failed.wait(1)
    assert failed.data == [{"message": {"job": 42}, "reason": "max_cancels"}]
    assert len(canceller.messages) == 3


def test_forced_expire_and_time_limit_reasons(connect, advance):
    pub = connect()
    failed = Worker(connect(), "FailedJobs")
    w = Worker(connect(), "Jobs", auto="expire")
    publish(pub, "Jobs", [{"job": 7}])
    assert failed.wait(1)
    assert failed.data[0] == {"message": {"job": 7}, "reason": "forced_expire"}
    w.client.unsubscribe(w.sub_id)
    pub.execute(AMPS.Command("publish").set_topic("Jobs").set_data('{"job":8}').set_expiration(1))
    pub.flush(5000)
    advance(0.99)
    assert len(failed.settled()) == 1  # within its one-second lifetime: still queued
    advance(0.02)
    assert failed.wait(2, timeout=10)  # nobody took it within its one-second lifetime
    assert failed.data[1] == {"message": {"job": 8}, "reason": "time_limit"}


def test_max_deliveries_and_queue_expiration(connect, advance):
    pub = connect()
    w = Worker(connect(), "short", auto=None, options="max_backlog=5")
    publish(pub, "short", [{"i": 1}])
    assert w.wait(1)
    advance(0.5)  # the 500 ms lease ran out: delivered again
    assert w.wait(2, timeout=10)
    advance(0.5)  # MaxDeliveries 2: then it is expired, not redelivered
    assert len(w.settled()) == 2
    w.client.unsubscribe(w.sub_id)
    publish(pub, "short", [{"i": 2}])

    def queued() -> list:
        return [json.loads(m.get_data()) for m in pub.sow("short", timeout=5000)
                if m.get_command() == "sow"]

    advance(0.99)
    assert queued() == [{"i": 2}]  # inside the queue's one-second Expiration
    advance(0.02)  # it passes with nobody subscribed
    assert queued() == []
    late = Worker(connect(), "short")
    assert late.settled() == []


def test_underlying_topics_filter_and_default_publish_target(connect):
    pub = connect()
    w = Worker(connect(), "multi", options="max_backlog=100")
    pub.publish("orders.us", json.dumps({"id": 1, "qty": 5}))
    pub.publish("orders.eu", json.dumps({"id": 2, "qty": 5}))
    pub.publish("orders.asia", json.dumps({"id": 3, "qty": 5}))
    pub.publish("orders.eu", json.dumps({"id": 4, "qty": 0}))  # fails the queue's Filter
    pub.publish("multi", json.dumps({"id": 5, "qty": 5}))  # goes to DefaultPublishTarget
    pub.flush(5000)
    assert w.wait(3)
    assert not w.wait(4, timeout=0.3)
    assert sorted(d["id"] for d in w.data) == [1, 2, 5]
    assert {m.topic for m in w.messages} == {"multi"}


def test_sow_topic_as_underlying_topic_enqueues_every_publish(connect):
    pub = connect()
    publish(pub, "prices", [{"id": 1, "px": 1}, {"id": 1, "px": 2}, {"id": 2, "px": 3}])
    w = Worker(connect(), "from-sow", options="max_backlog=100")
    assert w.wait(3)
    assert [d["px"] for d in w.data] == [1, 2, 3]
    assert len([m for m in pub.sow("prices", timeout=5000) if m.get_command() == "sow"]) == 2


def test_sow_query_on_a_queue_and_bookmark_replay_of_its_topic(connect):
    pub = connect()
    publish(pub, "work", [{"i": i} for i in range(4)])
    rows = [json.loads(m.get_data()) for m in pub.sow("work", timeout=5000) if m.get_command() == "sow"]
    assert rows == [{"i": i} for i in range(4)]
    w = Worker(connect(), "work", options="max_backlog=10")
    assert w.wait(4)
    replay = []
    done = threading.Event()

    def on(m):
        if m.get_command() == "ack":
            done.set()
        else:
            replay.append(json.loads(m.get_data())["i"])

    pub.execute_async(AMPS.Command("subscribe").set_topic("work").set_bookmark("0")
                      .add_ack_type("completed"), on)
    assert done.wait(10)
    assert replay == [0, 1, 2, 3]  # the log, with no queue semantics (they were all acked)


def test_ack_by_filter(connect):
    pub = connect()
    w = Worker(connect(), "work", auto=None, options="max_backlog=10")
    publish(pub, "work", [{"i": i} for i in range(4)])
    assert w.wait(4)
    ack = pub.sow_delete("work", "/i < 2", 5000)
    assert int(ack.get_sow_deleted()) == 2


def test_queue_state_survives_a_server_kill(tmp_path):
    from tests.support.procserver import ProcServer

    srv = ProcServer.with_config(tmp_path, queue_config)
    try:
        pub = AMPS.Client("kill-publisher")
        pub.connect(srv.uri)
        pub.logon(5000)
        publish(pub, "work", [{"i": i} for i in range(10)])
        pub.close()
        c = AMPS.Client("kill-worker")
        c.set_ack_batch_size(3)  # acks go out three bookmarks per sow_delete, as in production
        c.connect(srv.uri)
        c.logon(5000)
        w = Worker(c, "work", auto=None, options="max_backlog=10")
        assert w.wait(10)
        for m in w.messages[:6]:
            m.ack()
        c.flush(5000)
        time.sleep(1.2)  # let the acks reach the disk and the low-water checkpoint
        srv.kill()
        c.close()
        srv.start()
        c2 = AMPS.Client("kill-worker-2")
        c2.connect(srv.uri)
        c2.logon(5000)
        w2 = Worker(c2, "work", options="max_backlog=10")
        assert w2.wait(4)
        assert not w2.wait(5, timeout=0.5)  # acked messages are never delivered again
        assert sorted(d["i"] for d in w2.data) == [6, 7, 8, 9]
        c2.close()
    finally:
        srv.stop()


def test_delta_subscription_to_a_queue_gets_full_messages(connect):
    pub = connect()
    c = connect()
    got = []
    done = threading.Event()

    def on(m):
        got.append(json.loads(m.get_data()))
        m.ack()
        done.set()

    c.delta_subscribe(on, "work", timeout=5000)
    publish(pub, "work", [{"i": 1, "a": "x", "b": "y"}])
    assert done.wait(5)
    assert got == [{"i": 1, "a": "x", "b": "y"}]


def test_replace_recomputes_the_backlog_and_keeps_leases(connect):
    pub = connect()
    c = connect()
    got = []
    cv = threading.Condition()

    def on(m):
        with cv:
            got.append(json.loads(m.get_data())["i"])
            cv.notify_all()

    def wait_for(n):
        with cv:
            return cv.wait_for(lambda: len(got) >= n, timeout=5)

    c.subscribe(on, "work", options="max_backlog=1", sub_id="resizable", timeout=5000)
    publish(pub, "work", [{"i": i} for i in range(5)])
    assert wait_for(1)
    c.subscribe(on, "work", options="replace,max_backlog=3", sub_id="resizable", timeout=5000)
    assert wait_for(3)
    with cv:
        assert not cv.wait_for(lambda: len(got) > 3, timeout=0.3)
    assert got == [0, 1, 2]  # message 0 kept its lease; two more fill the larger backlog


ACTIONS = """<SOW>
  <Topic><Name>cache</Name><MessageType>json</MessageType><Key>/id</Key>
    <Durability>transient</Durability></Topic>
</SOW>
<Actions>
  <Action>
    <On><Module>amps-action-on-publish-message</Module>
      <Options><Topic>^incoming$</Topic><MessageType>json</MessageType></Options></On>
    <Do><Module>amps-action-do-publish-message</Module>
      <Options><Topic>copies</Topic><MessageType>json</MessageType>
        <Data>{"copy": {{AMPS_DATA}}, "from": "{{AMPS_TOPIC}}"}</Data></Options></Do>
  </Action>
  <Action>
    <On><Module>amps-action-on-sow-delete-message</Module>
      <Options><Topic>cache</Topic><MessageType>json</MessageType></Options></On>
    <Do><Module>amps-action-do-publish-message</Module>
      <Options><Topic>deleted-log</Topic><MessageType>json</MessageType>
        <Data>{{AMPS_DATA}}</Data></Options></Do>
  </Action>
  <Action>
    <On><Module>amps-action-on-publish-message</Module>
      <Options><Topic>purge</Topic><MessageType>json</MessageType></Options></On>
    <Do><Module>amps-action-do-delete-sow</Module>
      <Options><Topic>cache</Topic><MessageType>json</MessageType><Filter>/id &lt; 3</Filter></Options></Do>
  </Action>
</Actions>"""


def test_on_publish_on_sow_delete_and_do_delete_sow_actions(tmp_path):
    srv = start_server(config_xml(tmp_path, extra=ACTIONS), "actions.xml")
    try:
        c = AMPS.Client("action-driver")
        c.connect(srv.uri)
        c.logon(5000)
        copies = c.subscribe("copies", timeout=5000).timeout(5000)
        deleted = c.subscribe("deleted-log", timeout=5000).timeout(5000)
        c.publish("incoming", '{"n":1}')
        m = next(iter(copies))
        assert json.loads(m.get_data()) == {"copy": {"n": 1}, "from": "incoming"}
        for i in range(6):
            c.publish("cache", json.dumps({"id": i}))
        c.publish("purge", "{}")  # do-delete-sow removes ids 0..2, which fires on-sow-delete
        c.flush(5000)
        removed = []
        for m in deleted:
            if m is None:
                break
            removed.append(json.loads(m.get_data())["id"])
            if len(removed) == 3:
                break
        assert sorted(removed) == [0, 1, 2]
        left = sorted(json.loads(m.get_data())["id"] for m in c.sow("cache", timeout=5000)
                      if m.get_command() == "sow")
        assert left == [3, 4, 5]
        c.close()
    finally:
        srv.stop()
