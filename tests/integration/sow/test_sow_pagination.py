"""sow_and_subscribe through the official client: paginated subscriptions (``top_n`` and
``skip_n`` deliver only what happens inside the window) and replacement (``replace`` sends
only the difference)."""

from __future__ import annotations

import json
import queue

import AMPS
import pytest

SOW_XML = """<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{d}/sow/%n.sow</FileName></Topic>
  <Topic><Name>cache</Name><MessageType>json</MessageType><Key>/id</Key>
    <Durability>transient</Durability></Topic>
</SOW>"""


@pytest.fixture
def paging_clients(clients_with):
    return clients_with(SOW_XML)


class Inbox:
    def __init__(self) -> None:
        self.q: queue.Queue = queue.Queue()

    def __call__(self, m) -> None:
        data = m.get_data()
        self.q.put((m.get_command(), json.loads(data)["id"] if data else None))

    def until_group_end(self) -> list[int]:
        ids = []
        while True:
            cmd, i = self.q.get(timeout=5)
            if cmd == "sow":
                ids.append(i)
            elif cmd == "group_end":
                return ids

    def after(self, c, publish=(), delete=None) -> list[tuple[str, int]]:
        """What arrives for these changes (a flush, then a marker publish outside the
        window that the subscription must not see, so nothing is left in flight)."""
        for doc in publish:
            c.publish(self.topic, json.dumps(doc))
        if delete is not None:
            c.execute(AMPS.Command("sow_delete").set_topic(self.topic).set_filter(delete)
                      .add_ack_type("completed"))
        c.flush(5000)
        out = []
        while not self.q.empty():
            cmd, i = self.q.get_nowait()
            out.append(("p" if cmd in ("p", "publish") else cmd, i))
        return out


def paginated(c, topic, options, order="/id"):
    inbox = Inbox()
    inbox.topic = topic
    cmd = (AMPS.Command("sow_and_subscribe").set_topic(topic).set_order_by(order)
           .set_top_n(2).set_options(options).set_sub_id("page").set_batch_size(10))
    c.execute_async(cmd, inbox)
    return inbox


@pytest.mark.parametrize("topic", ["orders", "cache"])
def test_only_changes_inside_the_window_are_delivered(paging_clients, topic):
    c = paging_clients()
    for i in (1, 2, 5, 7):
        c.publish(topic, json.dumps({"id": i, "v": 0}))
    c.flush(5000)
    inbox = paginated(c, topic, "skip_n=1,oof")
    assert inbox.until_group_end() == [2, 5]
    # 4 sorts into the window and pushes 5 out
    assert inbox.after(c, [{"id": 4, "v": 0}]) == [("oof", 5), ("p", 4)]
    # 9 sorts after the window: nothing
    assert inbox.after(c, [{"id": 9, "v": 0}]) == []
    # an update inside the window is delivered
    assert inbox.after(c, [{"id": 2, "v": 1}]) == [("p", 2)]
    # deleting 1 (outside the window) shifts it: 2 leaves, 5 comes back
    assert inbox.after(c, delete="/id = 1") == [("oof", 2), ("p", 5)]
    # a record in the window that stops matching... there is no filter here; delete 4
    assert inbox.after(c, delete="/id = 4") == [("oof", 4), ("p", 7)]


def test_a_filter_and_descending_order_shape_the_window(paging_clients):
    c = paging_clients()
    for i in range(1, 9):
        c.publish("orders", json.dumps({"id": i, "grp": "a" if i % 2 else "b"}))
    c.flush(5000)
    inbox = Inbox()
    inbox.topic = "orders"
    cmd = (AMPS.Command("sow_and_subscribe").set_topic("orders").set_filter("/grp = 'b'")
           .set_order_by("/id DESC").set_top_n(2).set_options("skip_n=1,oof").set_sub_id("p2"))
    c.execute_async(cmd, inbox)
    assert inbox.until_group_end() == [6, 4]        # b: 8 6 4 2; skip 1, take 2
    # 6 leaves the filter: out of focus, 2 enters
    assert inbox.after(c, [{"id": 6, "grp": "a"}]) == [("oof", 6), ("p", 2)]
    # 10 sorts first: 8 is pushed into the window, 2 out
    assert inbox.after(c, [{"id": 10, "grp": "b"}]) == [("oof", 2), ("p", 8)]


def test_without_oof_records_leave_the_window_silently(paging_clients):
    c = paging_clients()
    for i in (1, 2, 5, 7):
        c.publish("orders", json.dumps({"id": i}))
    c.flush(5000)
    inbox = paginated(c, "orders", "skip_n=1")
    assert inbox.until_group_end() == [2, 5]
    assert inbox.after(c, [{"id": 4}]) == [("p", 4)]
    assert inbox.after(c, delete="/id = 4") == [("p", 5)]


def test_top_n_alone_limits_only_the_query(paging_clients):
    c = paging_clients()
    for i in (1, 2, 5):
        c.publish("orders", json.dumps({"id": i}))
    c.flush(5000)
    inbox = paginated(c, "orders", "")
    assert inbox.until_group_end() == [1, 2]
    assert inbox.after(c, [{"id": 9}, {"id": 5}]) == [("p", 9), ("p", 5)]


def test_replacing_a_sow_and_subscribe_sends_only_the_difference(paging_clients):
    """A replacement re-runs the query for the records the old filter did not match; with
    oof, the records only the old filter matched go out of focus."""
    c = paging_clients()
    regions = {1: "us", 2: "eu", 3: "us", 4: "ap", 5: "eu", 6: "us"}
    for i, r in regions.items():
        c.publish("orders", json.dumps({"id": i, "region": r}))
    c.flush(5000)
    got: queue.Queue = queue.Queue()

    def on(m):
        data = m.get_data()
        got.put((m.get_command(), json.loads(data)["id"] if data else None))

    def run(flt, options="oof"):
        c.execute_async(AMPS.Command("sow_and_subscribe").set_topic("orders").set_filter(flt)
                        .set_sub_id("r").set_options(options).set_batch_size(10), on)
        c.flush(5000)
        out = []
        while not got.empty():
            cmd, i = got.get_nowait()
            if cmd in ("sow", "oof", "p", "publish"):
                out.append(("p" if cmd == "publish" else cmd, i))
        return sorted(out)

    assert run("/region = 'us'") == [("sow", 1), ("sow", 3), ("sow", 6)]
    # widening: only what the old filter did not match comes back
    assert run("/region IN ('us', 'eu')", "oof,replace") == [("sow", 2), ("sow", 5)]
    # narrowing: nothing new, the us records go out of focus
    assert run("/region = 'eu'", "oof,replace") == [("oof", 1), ("oof", 3), ("oof", 6)]
    # the live part follows the new filter
    c.publish("orders", json.dumps({"id": 7, "region": "us"}))
    c.publish("orders", json.dumps({"id": 8, "region": "eu"}))
    assert run("/region = 'eu'", "oof,replace") == [("p", 8)]
    # without oof, leaving records are dropped silently
    assert run("/region = 'ap'", "replace") == [("sow", 4)]


def test_a_sow_and_subscribe_replacing_a_plain_subscription_returns_the_whole_query(paging_clients):
    c = paging_clients()
    for i in (1, 2):
        c.publish("orders", json.dumps({"id": i}))
    c.flush(5000)
    c.execute(AMPS.Command("subscribe").set_topic("orders").set_sub_id("r2"))
    got: queue.Queue = queue.Queue()
    c.execute_async(AMPS.Command("sow_and_subscribe").set_topic("orders").set_sub_id("r2")
                    .set_options("replace"),
                    lambda m: got.put((m.get_command(), m.get_data())))
    c.flush(5000)
    rows = []
    while not got.empty():
        cmd, data = got.get_nowait()
        if cmd == "sow":
            rows.append(json.loads(data)["id"])
    assert sorted(rows) == [1, 2]  # the plain subscription was sent no query results
