"""Paths of the official client that only work when the server answers as AMPS does: queue
auto-ack and ack batching, a publish to a queue's own name, ``publish_flush`` with persisted
acks, pausing an active bookmark subscription, and one timestamp per message."""

from __future__ import annotations

import json
import queue

import AMPS
import pytest

from tests.support.clients import Collector, clients_for, store_client
from tests.support.servers import config_xml, start_server

EXTRA = """<SOW>
  <Queue><Name>jobs</Name><MessageType>json</MessageType>
    <UnderlyingTopic>jobs-source</UnderlyingTopic></Queue>
  <Queue><Name>bulk</Name><MessageType>json</MessageType>
    <MaxPerSubscriptionBacklog>4</MaxPerSubscriptionBacklog></Queue>
  <Topic><Name>quotes</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>
  <Topic><Name>scratch</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>
</SOW>"""


@pytest.fixture
def fidelity_srv(tmp_path):
    # everything recorded except the SOW topic "scratch"
    s = start_server(config_xml(tmp_path, txlog_topics=("^(?!scratch$).*",), extra=EXTRA))
    yield s
    s.stop()


@pytest.fixture
def connect(fidelity_srv):
    yield from clients_for(fidelity_srv.uri)


def data(m) -> dict:
    return json.loads(m.get_data())


def stamp(m) -> str:
    return m.get_timestamp()


# -- queues ----------------------------------------------------------------------------------

def test_auto_ack_consumer_drains_a_queue_fed_through_its_own_name(connect):
    """No LeasePeriod, backlog 1: only acks move the queue on, and the client sends them
    itself only for messages with a lease (``lp``). A publish to the queue's name reaches
    its (single, literal) UnderlyingTopic."""
    consumer = connect()
    consumer.set_auto_ack(True)
    leases = Collector(lambda m: (m.get_lease_period(), json.loads(m.get_data())["i"]))
    consumer.subscribe(leases, "jobs", timeout=5000)
    raw = Collector(data)
    connect().subscribe(raw, "jobs-source", timeout=5000)
    pub = connect()
    for i in range(30):
        pub.publish("jobs", json.dumps({"i": i}))
    assert len(leases.wait_for(30)) == 30, leases.items
    assert [i for _, i in leases.items] == list(range(30))
    assert all(lp for lp, _ in leases.items)
    assert len(raw.wait_for(30)) == 30


def test_ack_batches_are_sized_by_the_granted_backlog(connect):
    """The client batches acks up to set_ack_batch_size, but never beyond the backlog the
    subscribe ack grants; otherwise a backlog-limited consumer waits for its ack timeout."""
    consumer = connect()
    consumer.set_auto_ack(True)
    consumer.set_ack_batch_size(10)
    consumer.set_ack_timeout(600_000)  # an unsized batch would hold the acks "forever"
    got = Collector(data)
    consumer.subscribe(got, "bulk", options="max_backlog=3", timeout=5000)
    assert consumer.get_ack_batch_size() == 3
    pub = connect()
    for i in range(10):
        pub.publish("bulk", json.dumps({"i": i}))
    assert len(got.wait_for(10)) == 10, got.items
    assert [d["i"] for d in got.items] == list(range(10))


def test_processed_ack_of_a_queue_subscription_reports_the_granted_backlog(connect):
    c = connect()
    acks: queue.Queue = queue.Queue()
    cmd = AMPS.Command("subscribe").set_topic("bulk").set_options("max_backlog=50") \
        .add_ack_type("processed")
    c.execute_async(cmd, lambda m: acks.put((m.get_command(), m.get_options())))
    assert acks.get(timeout=5) == ("ack", "max_backlog=4")  # capped by the queue


# -- commands --------------------------------------------------------------------------------

@pytest.mark.parametrize("store", [False, True])
def test_publish_flush_with_persisted_acks(fidelity_srv, connect, store):
    c = store_client(fidelity_srv.uri, "flusher") if store else connect()
    try:
        for i in range(50):
            c.publish("events", json.dumps({"i": i}))
        c.publish_flush(5000, AMPS.Message.AckType.PersistedEnum)
        journal = fidelity_srv.server.txlog.journal
        assert journal.durable_position >= journal.last_position
        if store:
            assert c.get_unpersisted_count() == 0
        c.publish("not-recorded-anywhere", "{}")
        c.publish_flush(5000, AMPS.Message.AckType.PersistedEnum)
    finally:
        c.close()


def test_pause_and_resume_an_active_bookmark_subscription(connect):
    sub, pub = connect(), connect()
    got = Collector(data)
    cmd = AMPS.Command("subscribe").set_topic("history").set_bookmark("0").set_sub_id("h1")
    sub.execute_async(cmd, got)
    for i in range(3):
        pub.publish("history", json.dumps({"i": i}))
    assert len(got.wait_for(3)) == 3
    sub.execute_async(AMPS.Command("subscribe").set_sub_id("h1").set_options("pause"), got)
    for i in range(3, 6):
        pub.publish("history", json.dumps({"i": i}))
    pub.publish_flush(5000, AMPS.Message.AckType.PersistedEnum)
    assert len(got.wait_for(4, timeout=0.5)) == 3  # paused: logged, not delivered
    sub.execute_async(AMPS.Command("subscribe").set_sub_id("h1").set_options("resume"), got)
    assert len(got.wait_for(6)) == 6
    assert [d["i"] for d in got.items] == list(range(6))


def test_pause_refuses_a_live_subscription(connect):
    c = connect()
    c.subscribe(lambda m: None, "plain", sub_id="p1", timeout=5000)
    with pytest.raises(AMPS.AMPSException, match="invalid options"):
        c.execute_async(AMPS.Command("subscribe").set_topic("plain").set_sub_id("p1")
                        .set_options("pause"), lambda m: None)


@pytest.mark.parametrize("topic", ["quotes", "scratch"])  # recorded, and not
def test_one_message_one_timestamp(connect, topic):
    c, pub = connect(), connect()
    live = Collector(stamp)
    c.subscribe(live, topic, options="timestamp", timeout=5000)
    pub.publish(topic, json.dumps({"id": 1}))
    assert len(live.wait_for(1)) == 1
    stamps = {"live": live.items[0]}
    stamps["sow"] = next(m.get_timestamp() for m in c.execute(
        AMPS.Command("sow").set_topic(topic).set_options("timestamp"))
        if m.get_command() == "sow")
    if topic == "quotes":
        replay = Collector(stamp)
        c.execute_async(AMPS.Command("subscribe").set_topic(topic).set_bookmark("0")
                        .set_options("timestamp"), replay)
        assert len(replay.wait_for(1)) == 1
        stamps["replay"] = replay.items[0]
    assert len(set(stamps.values())) == 1 and stamps["live"].endswith("Z"), stamps


def test_delta_deliveries_carry_the_records_timestamp(connect):
    c, pub = connect(), connect()
    delta = Collector(lambda m: (m.get_timestamp(), m.get_data()))
    c.execute_async(AMPS.Command("delta_subscribe").set_topic("quotes").set_options("timestamp"),
                    delta)
    pub.publish("quotes", json.dumps({"id": 7, "px": 1, "qty": 2}))
    pub.publish("quotes", json.dumps({"id": 7, "px": 2, "qty": 2}))
    assert len(delta.wait_for(2)) == 2
    ts, body = delta.items[1]
    assert json.loads(body) == {"id": 7, "px": 2}  # a delta, stamped
    sow_ts = next(m.get_timestamp() for m in c.execute(
        AMPS.Command("sow").set_topic("quotes").set_options("timestamp"))
        if m.get_command() == "sow")
    assert ts == sow_ts
