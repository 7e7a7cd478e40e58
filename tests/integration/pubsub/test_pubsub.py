"""Pub/sub driven by the official AMPS Python client against a real server on port 0."""

from __future__ import annotations

import json
import threading

import AMPS
import pytest

from tests.support.clients import store_client


def test_logon_and_server_version(client_factory):
    c = client_factory("versioned")
    assert c.get_server_version() == 5030400
    assert c.get_server_version_info().get_old_style_version() == 5030400
    assert c.get_name() == "versioned"


def test_pubsub_across_clients_and_to_publishers_own_subscription(client_factory, collector):
    sub_client = client_factory()
    pub_client = client_factory()
    remote, own = collector(), collector()
    sub_client.subscribe(remote, "orders", timeout=5000)
    pub_client.subscribe(own, "orders", timeout=5000)
    for i in range(3):
        pub_client.publish("orders", json.dumps({"id": i}))
    pub_client.publish("other-topic", '{"id":99}')
    pub_client.flush(5000)
    sub_client.flush(5000)
    for got in (remote.wait_for(3), own.wait_for(3)):
        assert [json.loads(d)["id"] for _, t, d, _, _ in got] == [0, 1, 2]
        assert {t for _, t, _, _, _ in got} == {"orders"}
    assert len(remote.items) == 3 and len(own.items) == 3


def test_content_filter_selects_messages(client_factory, collector):
    c = client_factory()
    hits = collector()
    c.subscribe(hits, "trades", filter="/qty > 10 AND /sym IN ('IBM','MSFT')", timeout=5000)
    rows = [{"sym": "IBM", "qty": 5}, {"sym": "IBM", "qty": 50}, {"sym": "AAPL", "qty": 500},
            {"sym": "MSFT", "qty": 11}, {"sym": "MSFT"}]
    for r in rows:
        c.publish("trades", json.dumps(r))
    c.publish("trades", "not json at all")
    c.flush(5000)
    got = hits.wait_for(2)
    assert [json.loads(d) for _, _, d, _, _ in got] == [rows[1], rows[3]]


def test_regex_topic_subscription(client_factory, collector):
    c = client_factory()
    hits = collector()
    c.subscribe(hits, "^orders\\.(us|eu)$", timeout=5000)
    for topic in ("orders.us", "orders.asia", "orders.eu", "xorders.us"):
        c.publish(topic, json.dumps({"t": topic}))
    c.flush(5000)
    got = hits.wait_for(2)
    assert [t for _, t, _, _, _ in got] == ["orders.us", "orders.eu"]


def test_non_regex_topic_takes_a_dotted_name_literally(client_factory, collector):
    c = client_factory()
    regex, literal = collector(), collector()
    c.subscribe(regex, "orders.us", timeout=5000)  # "." matches any character
    c.execute_async(AMPS.Command("subscribe").set_topic("orders.us")
                    .set_options("non_regex_topic"), literal)
    for topic in ("ordersXus", "orders.us"):
        c.publish(topic, json.dumps({"t": topic}))
    c.flush(5000)
    assert [t for _, t, _, _, _ in regex.wait_for(2)] == ["ordersXus", "orders.us"]
    assert [t for _, t, _, _, _ in literal.wait_for(1)] == ["orders.us"]
    with pytest.raises(AMPS.BadRegexTopicException):  # not compiled as a regex at all
        c.subscribe(collector(), "orders[", timeout=5000)
    c.execute(AMPS.Command("subscribe").set_topic("orders[").set_options("non_regex_topic"))


def test_bad_regex_topic_raises(client_factory, collector):
    c = client_factory()
    with pytest.raises(AMPS.BadRegexTopicException):
        c.subscribe(collector(), "orders[", timeout=5000)


def test_unsubscribe_stops_delivery(client_factory, collector):
    c = client_factory()
    kept, dropped = collector(), collector()
    c.subscribe(kept, "u", timeout=5000)
    sub_id = c.subscribe(dropped, "u", timeout=5000)
    c.publish("u", '{"n":1}')
    c.flush(5000)
    assert len(dropped.wait_for(1)) == 1
    c.unsubscribe(sub_id)
    c.unsubscribe("no-such-subscription")  # unknown ids are ignored
    c.publish("u", '{"n":2}')
    c.flush(5000)
    assert len(kept.wait_for(2)) == 2
    assert len(dropped.items) == 1


def test_unsubscribe_all(client_factory, collector):
    c = client_factory()
    a, b = collector(), collector()
    c.subscribe(a, "ua", timeout=5000)
    c.subscribe(b, "ub", timeout=5000)
    c.unsubscribe()  # no argument = all
    probe = collector()
    c.subscribe(probe, "ua", timeout=5000)
    c.publish("ua", "{}")
    c.publish("ub", "{}")
    c.flush(5000)
    probe.wait_for(1)
    assert a.items == [] and b.items == []


def test_two_thousand_publishes_arrive_in_order_after_flush(client_factory, collector):
    sub, pub = client_factory(), client_factory()
    got = collector()
    sub.subscribe(got, "seq", timeout=5000)
    for i in range(2000):
        pub.publish("seq", '{"i":%d}' % i)
    pub.flush(10000)
    items = got.wait_for(2000)
    assert [json.loads(d)["i"] for _, _, d, _, _ in items] == list(range(2000))


def test_stream_iteration_and_correlation_id(client_factory):
    c = client_factory()
    stream = c.subscribe("corr", timeout=5000).timeout(5000)
    cmd = AMPS.Command("publish").set_topic("corr").set_data('{"a":1}').set_correlation_id("cx-1")
    c.execute_async(cmd, None)
    msg = next(iter(stream))
    assert msg.get_data() == '{"a":1}'
    assert msg.get_correlation_id() == "cx-1"
    stream.close()


def test_sow_key_and_expiration_are_passed_through(client_factory):
    c = client_factory()
    stream = c.subscribe("passthru", timeout=5000).timeout(5000)
    cmd = (AMPS.Command("publish").set_topic("passthru").set_data("{}")
           .set_sow_key("k1").set_expiration(30))
    c.execute_async(cmd, None)
    msg = next(iter(stream))
    assert msg.get_sow_key() == "k1"
    assert msg.get_expiration() == "30"
    stream.close()


def test_delta_publish_and_delta_subscribe_without_sow(client_factory, collector):
    c = client_factory()
    got = collector()
    c.delta_subscribe(got, "d", timeout=5000)
    c.delta_publish("d", '{"id":1,"v":2}')
    c.flush(5000)
    assert [d for _, _, d, _, _ in got.wait_for(1)] == ['{"id":1,"v":2}']


def test_multiple_subscriptions_on_one_connection_get_one_frame_each(client_factory, collector):
    c = client_factory()
    a, b = collector(), collector()
    c.subscribe(a, "multi", filter="/x = 1", timeout=5000)
    c.subscribe(b, "multi", timeout=5000)
    c.publish("multi", '{"x":1}')
    c.publish("multi", '{"x":2}')
    c.flush(5000)
    assert len(b.wait_for(2)) == 2
    assert len(a.wait_for(1)) == 1


def test_replace_changes_the_filter(client_factory, collector):
    c = client_factory()
    got = collector()
    c.subscribe(got, "rep", filter="/x = 1", timeout=5000, sub_id="sub-r")
    c.subscribe(got, "rep", filter="/x = 2", options="replace", timeout=5000, sub_id="sub-r")
    c.publish("rep", '{"x":1}')
    c.publish("rep", '{"x":2}')
    c.flush(5000)
    assert [d for _, _, d, _, _ in got.wait_for(1)] == ['{"x":2}']
    assert len(got.items) == 1


def test_reusing_a_sub_id_without_replace_fails(client_factory, collector):
    c = client_factory()
    c.subscribe(collector(), "dup", timeout=5000, sub_id="same-id")
    with pytest.raises(AMPS.SubidInUseException):
        c.subscribe(collector(), "dup", timeout=5000, sub_id="same-id")


def test_bad_filter_raises_and_connection_keeps_working(client_factory, collector):
    c = client_factory()
    with pytest.raises(AMPS.BadFilterException):
        c.subscribe(collector(), "bf", filter="/a = = 1", timeout=5000)
    with pytest.raises(AMPS.BadFilterException):
        c.subscribe(collector(), "bf", filter="NOSUCHFUNCTION(/a) = 1", timeout=5000)
    got = collector()
    c.subscribe(got, "bf", filter="/a = 1", timeout=5000)
    c.publish("bf", '{"a":1}')
    c.flush(5000)
    assert len(got.wait_for(1)) == 1


def test_sow_on_a_topic_without_sow_is_invalid_topic(client_factory):
    c = client_factory()
    with pytest.raises(AMPS.InvalidTopicException):
        list(c.sow("no-sow-here", None, timeout=5000))
    with pytest.raises(AMPS.InvalidTopicException):
        c.sow_and_subscribe(lambda m: None, "no-sow-here", timeout=5000)
    with pytest.raises(AMPS.InvalidTopicException):
        c.sow_delete("no-sow-here", "1=1", 5000)
    c.publish("still-fine", "{}")
    c.flush(5000)


def test_second_logon_with_same_name_closes_the_first(client_factory):
    first = client_factory("same-name")
    dropped = threading.Event()
    first.set_disconnect_handler(lambda client: dropped.set())
    second = client_factory("same-name")
    assert dropped.wait(10), "first connection was not closed"
    second.publish("x", "{}")
    second.flush(5000)  # the new connection is healthy
    with pytest.raises(AMPS.DisconnectedException):
        first.publish("x", "{}")
        first.flush(2000)


def test_publish_store_gets_persisted_acks_and_publish_flush_returns(server, client_factory,
                                                                     collector):
    watcher = client_factory()
    got = collector()
    watcher.subscribe(got, "stored", timeout=5000)
    c = store_client(server.uri, "store-publisher")
    try:
        for i in range(500):
            c.publish("stored", '{"i":%d}' % i)
        c.publish_flush(10000)
        assert c.get_unpersisted_count() == 0
    finally:
        c.close()
    assert [json.loads(d)["i"] for _, _, d, _, _ in got.wait_for(500)] == list(range(500))
