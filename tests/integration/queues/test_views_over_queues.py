"""Views over a queue, through the official client: a view computed from the messages
available in the queue now. A lease takes a message out of the view, a cancel, an expired
lease or a subscriber gone puts it back, an ack or an expiration removes it for good. The
view only reads: a query of it leases nothing. On the test clock, so a lease runs out only
when a test moves time."""

from __future__ import annotations

import json

import AMPS
import pytest

from amps_emulator.config import loads_config
from amps_emulator.server.core.clock import TestClock
from tests.integration.queues.test_queues import Worker
from tests.support.clients import Inbox, clients_for
from tests.support.servers import ServerThread, config_xml

#: the docs' use: the total value of the orders still waiting in the work queue, per region
SOW = """<SOW>
  <Queue><Name>work</Name><MessageType>json</MessageType><UnderlyingTopic>orders</UnderlyingTopic>
    <LeasePeriod>10s</LeasePeriod><Expiration>1h</Expiration>
    <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog></Queue>
  <View><Name>waiting</Name><MessageType>json</MessageType><UnderlyingTopic>work</UnderlyingTopic>
    <Projection><Field>/region</Field><Field>SUM(/value) AS /total</Field>
      <Field>COUNT(/id) AS /n</Field></Projection>
    <Grouping><Field>/region</Field></Grouping></View>
  <View><Name>big</Name><MessageType>json</MessageType><UnderlyingTopic>waiting</UnderlyingTopic>
    <Projection><Field>/region</Field><Field>/total</Field></Projection>
    <Grouping><Field>/region</Field></Grouping><Filter>/total >= 100</Filter></View>
  <Queue><Name>capped</Name><MessageType>json</MessageType><UnderlyingTopic>capped-in</UnderlyingTopic>
    <TargetQueueDepth>1000</TargetQueueDepth><MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog></Queue>
  <View><Name>capped-count</Name><MessageType>json</MessageType><UnderlyingTopic>capped</UnderlyingTopic>
    <Projection><Field>COUNT(/id) AS /n</Field></Projection><Grouping><Field>/k</Field></Grouping></View>
</SOW>"""


@pytest.fixture
def clock():
    return TestClock()


@pytest.fixture
def srv(tmp_path, clock):
    s = ServerThread(loads_config(config_xml(tmp_path, extra=SOW), "qviews.xml"),
                     timebase=clock).start()
    yield s
    s.stop()


@pytest.fixture
def connect(srv):
    yield from clients_for(srv.uri)


def rows(c, topic: str) -> list:
    return sorted((json.loads(m.get_data()) for m in c.sow(topic, timeout=5000)
                   if m.get_command() == "sow"), key=lambda d: d.get("region", ""))


def order(c, i: int, region: str, value: int) -> None:
    c.publish("orders", json.dumps({"id": i, "region": region, "value": value}))


def test_a_lease_takes_a_message_out_and_an_ack_keeps_it_out(connect):
    c = connect("viewer")
    order(c, 1, "east", 10)
    order(c, 2, "east", 90)
    order(c, 3, "west", 5)
    c.flush(5000)
    assert rows(c, "waiting") == [{"region": "east", "total": 100, "n": 2},
                                  {"region": "west", "total": 5, "n": 1}]
    assert rows(c, "big") == [{"region": "east", "total": 100}]
    assert len(rows(c, "work")) == 3  # a query of the queue (or of the view) leases nothing
    got = Inbox.of(c, AMPS.Command("sow_and_subscribe").set_topic("waiting").set_options("oof"))
    assert len(got.take()) == 2
    worker = Worker(connect("worker"), "work", auto=None, options="max_backlog=2",
                    flt="/region = 'east'")
    assert worker.wait(2)
    assert got.take() == [("oof", {"region": "east", "total": 100, "n": 2})]
    assert rows(c, "waiting") == [{"region": "west", "total": 5, "n": 1}]
    assert rows(c, "big") == []
    worker.messages[0].ack()
    worker.client.flush(5000)
    assert got.take() == []  # acknowledged: gone from the queue, still not in the view
    worker.client.unsubscribe(worker.sub_id)  # the other lease ends: back in the view
    assert got.take() == [("p", {"region": "east", "total": 90, "n": 1})]


def test_a_message_returns_when_its_subscriber_goes(connect, srv, clock):
    c = connect("viewer")
    order(c, 1, "east", 10)
    order(c, 2, "west", 20)
    c.flush(5000)
    got = Inbox.of(c, AMPS.Command("sow_and_subscribe").set_topic("waiting").set_options("oof"))
    assert len(got.take()) == 2
    slow = Worker(connect("slow"), "work", auto=None, flt="/region = 'east'")
    assert slow.wait(1)
    assert got.take() == [("oof", {"region": "east", "total": 10, "n": 1})]
    srv.call(lambda: clock.advance(11))  # the lease runs out and the queue delivers it again,
    assert slow.wait(2)  # at once, to the subscriber that has room: still leased, not shown
    assert got.take() == []
    slow.client.close()  # the subscriber goes: its lease ends, the message is back
    assert got.take() == [("p", {"region": "east", "total": 10, "n": 1})]


def test_an_expired_message_leaves_the_view(connect, srv, clock):
    c = connect("viewer")
    order(c, 1, "east", 10)
    c.flush(5000)
    got = Inbox.of(c, AMPS.Command("sow_and_subscribe").set_topic("waiting").set_options("oof"))
    assert len(got.take()) == 1
    srv.call(lambda: clock.advance(3601))
    assert got.take() == [("oof", {"region": "east", "total": 10, "n": 1})]
    assert rows(c, "waiting") == []


def test_messages_beyond_the_target_queue_depth_join_as_the_queue_drains(connect):
    c = connect("viewer")
    for i in range(1005):
        c.publish("capped-in", json.dumps({"id": i, "k": "all"}))
    c.flush(5000)
    assert rows(c, "capped-count") == [{"n": 1000}]  # the active part; five wait beyond it
    c.sow_delete("capped", "/id < 10", 5000)  # acknowledged: five come into the active part
    assert rows(c, "capped-count") == [{"n": 995}]


def test_the_view_is_rebuilt_from_the_recovered_queue_and_cannot_be_published_to(tmp_path):
    xml = config_xml(tmp_path, extra=SOW)
    first = ServerThread(loads_config(xml, "qviews.xml")).start()
    try:
        c = AMPS.Client("first")
        c.connect(first.uri)
        c.logon(5000)
        order(c, 1, "east", 10)
        order(c, 2, "east", 20)
        c.flush(5000)
        w = Worker(c, "work", auto="ack", flt="/id = 1")
        assert w.wait(1)
        c.flush(5000)
        c.close()
    finally:
        first.stop()
    again = ServerThread(loads_config(xml, "qviews.xml")).start()
    try:
        c = AMPS.Client("again")
        c.connect(again.uri)
        c.logon(5000)
        assert rows(c, "waiting") == [{"region": "east", "total": 20, "n": 1}]
        with pytest.raises(AMPS.AMPSException):
            c.execute(AMPS.Command("publish").set_topic("waiting").set_data('{"region":"x"}')
                      .add_ack_type("processed"))
        c.close()
    finally:
        again.stop()
