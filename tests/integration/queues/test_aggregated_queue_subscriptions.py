"""Aggregated subscriptions over a queue, through the official client: ``sow_and_subscribe``
(or ``sow_and_delta_subscribe``) on a queue with ``grouping`` and ``projection`` aggregates
the messages available in the queue now, as a view over the queue does. A lease takes a
message out of its group, a cancel or an expired lease puts it back, an ack or an
expiration removes it for good; a group left empty goes out of focus. The subscription only
reads: it leases nothing and a queue subscriber still gets every message. On the test clock,
so a lease runs out only when a test moves time."""

from __future__ import annotations

import json

import AMPS
import pytest

from amps_emulator.config import loads_config
from amps_emulator.server.core.clock import TestClock
from tests.integration.queues.test_queues import Worker
from tests.support.clients import Inbox, clients_for
from tests.support.servers import ServerThread, config_xml, until

SOW = """<SOW>
  <Queue><Name>work</Name><MessageType>json</MessageType><UnderlyingTopic>orders</UnderlyingTopic>
    <LeasePeriod>10s</LeasePeriod><Expiration>1h</Expiration>
    <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog></Queue>
  <View><Name>waiting</Name><MessageType>json</MessageType><UnderlyingTopic>work</UnderlyingTopic>
    <Projection><Field>/region</Field><Field>SUM(/value) AS /total</Field>
      <Field>COUNT(/id) AS /n</Field></Projection>
    <Grouping><Field>/region</Field></Grouping></View>
</SOW>"""

#: per region: how many orders wait, and their total value
OPTS = "grouping=[/region],projection=[/region,SUM(/value) AS /total,COUNT(/id) AS /n]"


@pytest.fixture
def clock():
    return TestClock()


@pytest.fixture
def srv(tmp_path, clock):
    s = ServerThread(loads_config(config_xml(tmp_path, extra=SOW), "qagg.xml"),
                     timebase=clock).start()
    yield s
    s.stop()


@pytest.fixture
def connect(srv):
    yield from clients_for(srv.uri)


def view(c) -> list:
    """The view over the queue with the same definition: what it holds now."""
    return sorted((json.loads(m.get_data()) for m in c.sow("waiting", timeout=5000)
                   if m.get_command() == "sow"), key=lambda d: d["region"])


def order(c, i: int, region: str, value: int) -> None:
    c.publish("orders", json.dumps({"id": i, "region": region, "value": value}))


def groups(c, command: str = "sow_and_subscribe", opts: str = "oof," + OPTS,
           flt: str | None = None) -> Inbox:
    cmd = AMPS.Command(command).set_topic("work").set_options(opts).set_batch_size(10)
    if flt:
        cmd.set_filter(flt)
    return Inbox.of(c, cmd)


def by_region(got: list) -> list:
    return sorted(got, key=lambda kd: (kd[0], kd[1].get("region", "")))


def test_leases_acks_and_returns_move_messages_out_of_and_into_the_groups(connect, srv, clock):
    c = connect("watcher")
    order(c, 1, "east", 10)
    order(c, 2, "east", 90)
    order(c, 3, "west", 5)
    c.flush(5000)
    g = groups(c)
    assert by_region(g.take()) == [("sow", {"region": "east", "total": 100, "n": 2}),
                                   ("sow", {"region": "west", "total": 5, "n": 1})]
    # a new message in the queue joins its group
    order(c, 4, "west", 7)
    assert g.take() == [("p", {"region": "west", "total": 12, "n": 2})]
    # a consumer leases both east messages at once: the group empties, out of focus
    worker = Worker(connect("worker"), "work", auto=None, options="max_backlog=2",
                    flt="/region = 'east'")
    assert worker.wait(2)
    assert g.take() == [("oof", {"region": "east", "total": 100, "n": 2})]
    # one is acknowledged: gone for good; the other's lease runs out: it is back
    worker.messages[0].ack()
    worker.client.flush(5000)
    assert g.take() == []
    # the consumer now takes no east messages (its lease stays): when the lease runs out
    # the message is back in the queue, and in its group
    worker.client.execute_async(AMPS.Command("subscribe").set_topic("work")
                                .set_sub_id(worker.sub_id).set_options("replace")
                                .set_filter("/region = 'north'"), worker._on)
    worker.client.flush(5000)
    assert g.take() == []
    srv.call(lambda: clock.advance(11))
    assert g.take() == [("p", {"region": "east", "total": 90, "n": 1})]
    assert view(c) == [{"region": "east", "total": 90, "n": 1},  # (the view reads the same)
                       {"region": "west", "total": 12, "n": 2}]
    # the subscription leased nothing: a second consumer gets the three still waiting
    other = Worker(connect("other"), "work", auto="ack")
    assert other.wait(3)
    assert sorted(d["id"] for d in other.settled()) == [2, 3, 4]
    assert by_region(g.take()) == [("oof", {"region": "east", "total": 90, "n": 1}),
                                   ("oof", {"region": "west", "total": 7, "n": 1}),
                                   ("p", {"region": "west", "total": 7, "n": 1})]


def test_a_cancelled_lease_returns_and_an_expired_message_leaves(connect, srv, clock):
    c = connect("watcher")
    order(c, 1, "east", 10)
    c.flush(5000)
    g = groups(c)
    assert g.take() == [("sow", {"region": "east", "total": 10, "n": 1})]
    w = Worker(connect("worker"), "work", auto=None)
    assert w.wait(1)
    assert g.take() == [("oof", {"region": "east", "total": 10, "n": 1})]
    w.messages[0].ack("cancel")  # back in the queue, and at once leased again by w
    assert w.wait(2)
    assert g.take() == []  # (returned and leased in one step: never available meanwhile)
    w.client.unsubscribe(w.sub_id)  # the subscriber goes: its lease ends, the message is back
    w.client.flush(5000)
    assert g.take() == [("p", {"region": "east", "total": 10, "n": 1})]
    srv.call(lambda: clock.advance(3601))  # the message's Expiration
    assert g.take()[-1:] == [("oof", {"region": "east", "total": 10, "n": 1})]
    assert list(c.sow("work", timeout=5000))[1:-1] == []


def test_the_filter_applies_to_the_messages_and_a_delta_subscription_sends_changes(connect):
    c = connect("watcher")
    order(c, 1, "east", 10)
    order(c, 2, "east", 20)
    order(c, 3, "west", 30)
    c.flush(5000)
    g = groups(c, "sow_and_delta_subscribe", OPTS, flt="/value >= 20")
    assert by_region(g.take()) == [("sow", {"region": "east", "total": 20, "n": 1}),
                                   ("sow", {"region": "west", "total": 30, "n": 1})]
    order(c, 4, "east", 5)  # not matched: no change
    order(c, 5, "east", 25)
    assert g.take() == [("p", {"region": "east", "total": 45, "n": 2})]
    w = Worker(connect("worker"), "work", auto="ack", flt="/id = 3")
    assert w.wait(1)
    assert g.take() == []  # no oof option: the empty group just goes


def test_the_aggregated_subscription_keeps_its_other_rules(connect):
    c = connect("watcher")
    order(c, 1, "east", 10)
    c.flush(5000)
    for cmd in (AMPS.Command("sow_and_subscribe").set_topic("work").set_options(OPTS)
                .set_bookmark("0"),
                AMPS.Command("sow_and_subscribe").set_topic("work")
                .set_options(OPTS + ",select=[-/,+/region]")):
        with pytest.raises(AMPS.InvalidOptionsException):
            list(c.execute(cmd))
    # the refused ones left nothing behind; an aggregated sow of the queue still works
    rows = [json.loads(m.get_data()) for m in c.execute(
        AMPS.Command("sow").set_topic("work").set_options(OPTS)) if m.get_command() == "sow"]
    assert rows == [{"region": "east", "total": 10, "n": 1}]


def test_unsubscribing_or_disconnecting_stops_following_the_queue(connect, srv):
    c = connect("watcher")
    order(c, 1, "east", 10)
    c.flush(5000)
    g = groups(c)
    assert len(g.take()) == 1
    watch = srv.call(lambda: srv.server.queue_service.watch)

    def following() -> int:  # (the view over the queue follows it too)
        return srv.call(lambda: len(watch._followers.get("work", ())))

    assert following() == 2
    c.unsubscribe("all")
    c.flush(5000)
    assert following() == 1
    d = connect("dropper")
    groups(d).take()
    assert following() == 2
    d.close()
    assert until(lambda: following() == 1)
    order(c, 2, "east", 1)
    assert view(c) == [{"region": "east", "total": 11, "n": 2}]
