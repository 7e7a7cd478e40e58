"""``amps-action-on-deliver-message`` and the ``MessageSource`` of
``amps-action-on-publish-message``, through the official Python client.

Each action reports what it saw by publishing a small JSON record to a topic a watcher
subscribes to; "nothing more" is shown by a marker published after (one connection's
messages arrive in order)."""

from __future__ import annotations

import json

import AMPS
import pytest

from amps_emulator.config import loads_config
from amps_emulator.config.errors import ConfigError
from amps_emulator.pair import EmbeddedPair
from tests.integration.actions.test_actions import (  # noqa: F401 (started: a fixture)
    Box,
    action,
    config,
    keyed,
    marked,
    module,
    publish_to,
    started,
    watch,
)
from tests.support.clients import Collector

#: what an on-deliver-message action reports of each delivery
REPORT = ('{"to":"{{AMPS_CLIENT_NAME}}","topic":"{{AMPS_TOPIC}}","len":{{AMPS_DATA_LENGTH}},'
          '"bm":"{{AMPS_BOOKMARK}}","cid":"{{AMPS_CORRELATION_ID}}","data":{{AMPS_DATA}}}')


def queue(name: str, underlying: str) -> str:
    return (f"<Queue><Name>{name}</Name><MessageType>json</MessageType>"
            f"<UnderlyingTopic>{underlying}</UnderlyingTopic><LeasePeriod>60s</LeasePeriod></Queue>")


@pytest.fixture
def delivering(started):
    """A server reporting every delivery of a topic starting with ``orders`` and of the
    queue ``jobs`` to the topic ``delivered``."""
    return started(
        action(module("On", "on-deliver-message", Topic="^orders", MessageType="json"),
               publish_to("delivered", REPORT))
        + action(module("On", "on-deliver-message", Topic="jobs", MessageType="json"),
                 publish_to("delivered", REPORT)),
        sow=queue("jobs", "jobs-in"))


def test_a_live_delivery_fires_once_per_client_with_its_variables(delivering):
    s = delivering
    watcher = s.client("watcher")
    box = watch(watcher, "delivered")
    reader = s.client("reader")
    reader.subscribe(lambda m: None, "orders")
    reader.subscribe(lambda m: None, "^orders")  # a second subscription, same connection
    reader.subscribe(lambda m: None, "orders", "/qty > 100")  # does not match: no delivery
    other = s.client("other")
    other.subscribe(lambda m: None, "orders.eu")  # another topic
    publisher = s.client("publisher")
    publisher.execute(AMPS.Command("publish").set_topic("orders").set_data('{"qty":5}')
                      .set_correlation_id("c-1"))
    got = marked(box, watcher, "delivered", 1)
    (one,) = got
    assert one["to"] == "reader" and one["topic"] == "orders" and one["cid"] == "c-1"
    assert one["data"] == {"qty": 5} and one["len"] == len('{"qty":5}')
    assert one["bm"]  # recorded in the transaction log: it has a bookmark


def test_no_subscriber_no_delivery_and_other_topics_do_not_fire(delivering):
    s = delivering
    watcher = s.client("watcher")
    box = watch(watcher, "delivered")
    reader = s.client("reader")
    reader.subscribe(lambda m: None, "trades")  # not ^orders
    publisher = s.client("publisher")
    publisher.publish("orders", '{"qty":1}')  # nobody subscribes
    publisher.publish("trades", '{"qty":2}')
    marked(box, watcher, "delivered", 0)


def test_queue_and_replay_deliveries_fire_too(delivering):
    s = delivering
    watcher = s.client("watcher")
    box = watch(watcher, "delivered")
    publisher = s.client("publisher")
    publisher.publish("jobs-in", '{"job":1}')
    publisher.publish("orders", '{"qty":7}')
    publisher.flush(5000)
    worker = s.client("worker")
    got = Collector()
    worker.subscribe(got, "jobs")  # a queue subscription: the message leased to it
    replayer = s.client("replayer")
    replayer.bookmark_subscribe(got, "orders", AMPS.Client.Bookmarks.EPOCH)
    assert box.wait_for(2)
    seen = sorted((b["to"], b["topic"], json.dumps(b["data"])) for b in box.bodies())
    assert seen == [("replayer", "orders", '{"qty": 7}'), ("worker", "jobs", '{"job": 1}')]


def test_conflated_and_paginated_subscriptions_fire_when_their_message_goes_out(started, tmp_path):
    s = started(action(module("On", "on-deliver-message", Topic="^orders", MessageType="json"),
                       publish_to("delivered", REPORT)), sow=keyed("orders", tmp_path))
    watcher = s.client("watcher")
    box = watch(watcher, "delivered")
    publisher = s.client("publisher")
    publisher.publish("orders", '{"id":1,"v":1}')
    publisher.flush(5000)
    slow = s.client("slow")
    slow.execute_async(AMPS.Command("subscribe").set_topic("orders")
                       .set_options("conflation=100ms"), lambda m: None)
    paged = s.client("paged")
    paged.execute_async(AMPS.Command("sow_and_subscribe").set_topic("orders").set_top_n(5)
                        .set_options("skip_n=0"), lambda m: None)
    paged.flush(5000)
    for v in (2, 3):
        publisher.publish("orders", f'{{"id":1,"v":{v}}}')
    publisher.flush(5000)
    s.advance(0.2)  # (the test clock) the conflation interval ends
    # the paginated window gets each update; the conflated subscription the last one only
    assert box.wait_until(lambda items: sum(1 for b in box.bodies() if b["to"] == "slow") == 1
                          and sum(1 for b in box.bodies() if b["to"] == "paged") == 2)
    assert [b["data"]["v"] for b in box.bodies() if b["to"] == "slow"] == [3]
    assert [b["data"]["v"] for b in box.bodies() if b["to"] == "paged"] == [2, 3]


def test_the_source_must_be_local_replicated_or_all(tmp_path):
    bad = action(module("On", "on-publish-message", Topic="x", MessageType="json",
                        MessageSource="elsewhere"), publish_to("y", "{}"))
    with pytest.raises(ConfigError, match="MessageSource"):
        loads_config(config(tmp_path, bad), "bad.xml")
    for ok in ("local", "Replicated", "all"):
        loads_config(config(tmp_path, bad.replace("elsewhere", ok)), "ok.xml")


def _by_source() -> str:
    """On each instance, one on-publish-message action per MessageSource, each telling
    ``seen/<instance>/<source>`` of a publish to ``orders``."""
    return "".join(
        action(module("On", "on-publish-message", Topic="orders", MessageType="json",
                      **({"MessageSource": src} if src else {})),
               publish_to(f"seen/{{{{AMPS_INSTANCE_NAME}}}}/{src or 'default'}",
                          '{"from":"{{AMPS_CLIENT_NAME}}","ts":"{{AMPS_TIMESTAMP}}"}'))
        for src in ("local", "replicated", "all", None))


def test_message_source_tells_local_publishes_from_replicated_ones(tmp_path):
    with EmbeddedPair(tmp_path, actions=_by_source()) as pair:
        seen = {}
        clients = []
        for srv, name in ((pair.a, "A"), (pair.b, "B")):
            c = AMPS.Client(f"watch-{name}")
            c.connect(srv.uri)
            c.logon(5000)
            clients.append(c)
            seen[name] = Collector(lambda m: m.get_topic())
            c.subscribe(seen[name], f"^seen/{name}/")
        publisher = AMPS.Client("publisher")
        publisher.connect(pair.a.uri)
        publisher.logon(5000)
        clients.append(publisher)
        publisher.publish("orders", '{"id":1}')
        assert seen["A"].wait_for(3) and seen["B"].wait_for(3)
        # markers, published on each instance after the orders: nothing else arrives before
        for c, name in zip(clients, "AB", strict=False):
            c.publish(f"seen/{name}/marker", "{}")
        assert seen["A"].wait_until(lambda items: "seen/A/marker" in items)
        assert seen["B"].wait_until(lambda items: "seen/B/marker" in items)
        assert sorted(seen["A"].items) == ["seen/A/all", "seen/A/default", "seen/A/local",
                                           "seen/A/marker"]
        assert sorted(seen["B"].items) == ["seen/B/all", "seen/B/default", "seen/B/marker",
                                           "seen/B/replicated"]
        for c in clients:
            c.close()
