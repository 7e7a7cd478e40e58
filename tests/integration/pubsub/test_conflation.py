"""Conflated subscriptions through the official client (``conflation=``, ``conflation_key=``).

Each test waits for deliveries (with a timeout), never sleeps: a last "marker" message, whose
interval starts after everything else, tells that nothing else is on its way."""

from __future__ import annotations

import json
import queue

import AMPS
import pytest

EXTRA = """<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
    <Durability>transient</Durability></Topic>
</SOW>"""


@pytest.fixture
def conflation_clients(clients_with):
    return clients_with(EXTRA)


def subscribe(c, command, topic, options, flt=None):
    got: queue.Queue = queue.Queue()
    cmd = AMPS.Command(command).set_topic(topic).set_options(options)
    if flt:
        cmd.set_filter(flt)
    c.execute_async(cmd, lambda m: got.put((m.get_command(), m.get_data())))
    return got


def until_marker(got, key="id", marker=99) -> list[tuple[str, dict]]:
    out = []
    while True:
        cmd, data = got.get(timeout=10)
        if not data:
            continue
        doc = json.loads(data)
        if doc.get(key) == marker:
            return out
        out.append(("p" if cmd == "publish" else cmd, doc))


def test_only_the_latest_update_per_record_is_delivered(conflation_clients):
    c = conflation_clients()
    got = subscribe(c, "subscribe", "orders", "conflation=1s")
    for v in range(5):
        c.publish("orders", json.dumps({"id": 1, "v": v}))
    for v in range(3):
        c.publish("orders", json.dumps({"id": 2, "v": v}))
    c.flush(5000)
    c.publish("orders", json.dumps({"id": 99}))
    assert sorted((d["id"], d["v"]) for _, d in until_marker(got)) == [(1, 4), (2, 2)]


def test_a_conflation_key_groups_messages_of_a_topic_outside_the_sow(conflation_clients):
    c = conflation_clients()
    got = subscribe(c, "subscribe", "ticks", "conflation=1s,conflation_key=[/sym]")
    for px, sym in [(1, "A"), (2, "B"), (3, "A"), (4, "A")]:
        c.publish("ticks", json.dumps({"sym": sym, "px": px}))
    c.flush(5000)
    c.publish("ticks", json.dumps({"sym": 99}))
    assert sorted((d["sym"], d["px"]) for _, d in until_marker(got, "sym")) == [
        ("A", 4), ("B", 2)]


def test_delta_conflation_merges_the_deltas_of_the_interval(conflation_clients):
    c = conflation_clients()
    c.publish("orders", json.dumps({"id": 7, "status": "open", "notes": "none", "xref": 82}))
    c.flush(5000)
    got = subscribe(c, "delta_subscribe", "orders", "conflation=1s")
    for status, notes in [("questioned", "none"), ("questioned", "hold"), ("cleared", "none"),
                          ("open", "none")]:
        c.publish("orders", json.dumps({"id": 7, "status": status, "notes": notes, "xref": 82}))
    c.flush(5000)
    c.publish("orders", json.dumps({"id": 99}))
    assert until_marker(got) == [("p", {"id": 7, "status": "open", "notes": "none"})]


def test_sow_and_subscribe_results_are_not_conflated(conflation_clients):
    c = conflation_clients()
    for i in range(3):
        c.publish("orders", json.dumps({"id": i, "v": 0}))
    c.flush(5000)
    got = subscribe(c, "sow_and_subscribe", "orders", "conflation=1s")
    for v in range(1, 4):
        c.publish("orders", json.dumps({"id": 0, "v": v}))
    c.flush(5000)
    c.publish("orders", json.dumps({"id": 99}))
    out = until_marker(got)
    assert sorted((k, d["id"], d["v"]) for k, d in out) == [
        ("p", 0, 3), ("sow", 0, 0), ("sow", 1, 0), ("sow", 2, 0)]


@pytest.mark.parametrize("options", [
    "conflation=1s",                               # not a SOW topic: a key is needed
    "conflation=soon,conflation_key=[/sym]",       # not an interval
    "conflation=1s,conflation_key=[sym]",          # not a path
])
def test_bad_conflation_options_fail_the_subscription(conflation_clients, options):
    c = conflation_clients()
    with pytest.raises(AMPS.AMPSException):
        c.execute(AMPS.Command("subscribe").set_topic("ticks").set_options(options))


def test_oof_needs_the_topics_own_key(conflation_clients):
    c = conflation_clients()
    with pytest.raises(AMPS.AMPSException):
        c.execute(AMPS.Command("subscribe").set_topic("orders")
                  .set_options("oof,conflation=1s,conflation_key=[/v]"))
    c.execute(AMPS.Command("subscribe").set_topic("orders")
              .set_options("oof,conflation=1s,conflation_key=[/id]"))  # the topic's key: fine
