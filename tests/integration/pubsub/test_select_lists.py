"""Select lists (``select=[...]``) on subscriptions through the official client: live,
sow_and_subscribe (query and updates), delta with no_empties, oof, bookmark replay, queues."""

from __future__ import annotations

import json

import AMPS
import pytest

from tests.support.clients import Inbox

EXTRA = """<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{d}/sow/%n.sow</FileName></Topic>
  <Queue><Name>work</Name><MessageType>json</MessageType><LeasePeriod>10s</LeasePeriod></Queue>
</SOW>"""

SEL = "select=[-/,+/id,+/px,+/detail/a]"
FULL = {"id": 1, "px": 10, "qty": 5, "detail": {"a": 1, "b": 2}}


@pytest.fixture
def select_clients(clients_with):
    return clients_with(EXTRA)


def collect(c, cmd) -> Inbox:
    return Inbox.of(c, cmd)


def drain(c, got: Inbox) -> list[tuple[str, dict]]:
    return got.take()


def test_live_and_sow_and_subscribe_deliveries_follow_the_select_list(select_clients):
    c = select_clients()
    c.publish("orders", json.dumps(FULL))
    c.flush(5000)
    live = collect(c, AMPS.Command("subscribe").set_topic("orders").set_options(SEL))
    sas = collect(c, AMPS.Command("sow_and_subscribe").set_topic("orders").set_options(SEL))
    c.publish("orders", json.dumps(dict(FULL, px=11)))
    c.publish("orders", json.dumps({"id": 2, "qty": 1}))  # no px: nothing is invented
    want = [("p", {"id": 1, "px": 11, "detail": {"a": 1}}), ("p", {"id": 2})]
    assert drain(c, live) == want
    got = drain(c, sas)
    assert got[0] == ("sow", {"id": 1, "px": 10, "detail": {"a": 1}})
    assert [g for g in got if g[0] == "p"] == want


def test_delta_no_empties_counts_only_selected_fields(select_clients):
    c = select_clients()
    c.publish("orders", json.dumps(FULL))
    c.flush(5000)
    got = collect(c, AMPS.Command("delta_subscribe").set_topic("orders")
                  .set_options("no_empties,select=[-/,+/id,+/px]"))
    c.publish("orders", json.dumps(dict(FULL, qty=6)))     # qty is not selected: nothing
    c.publish("orders", json.dumps(dict(FULL, qty=6, px=12)))
    assert drain(c, got) == [("p", {"id": 1, "px": 12})]


def test_oof_carries_the_selected_fields(select_clients):
    c = select_clients()
    c.publish("orders", json.dumps(FULL))
    c.flush(5000)
    got = collect(c, AMPS.Command("sow_and_subscribe").set_topic("orders").set_filter("/px < 50")
                  .set_options("oof," + SEL))
    c.publish("orders", json.dumps(dict(FULL, px=99)))
    out = drain(c, got)
    assert out[-1] == ("oof", {"id": 1, "px": 99, "detail": {"a": 1}})


def test_a_bookmark_replay_follows_the_select_list(select_clients):
    c = select_clients()
    c.publish("orders", json.dumps(FULL))
    c.flush(5000)
    got = collect(c, AMPS.Command("subscribe").set_topic("orders").set_bookmark("0")
                  .set_options("select=[-/detail]"))
    assert drain(c, got) == [("p", {"id": 1, "px": 10, "qty": 5})]


def test_queue_deliveries_follow_the_select_list(select_clients):
    c = select_clients()
    c.publish("work", json.dumps(FULL))
    c.flush(5000)
    got = collect(c, AMPS.Command("subscribe").set_topic("work").set_options("select=[-/,+/qty]"))
    assert drain(c, got) == [("p", {"qty": 5})]


def test_a_bad_select_list_fails_the_subscription(select_clients):
    c = select_clients()
    with pytest.raises(AMPS.AMPSException):
        c.execute(AMPS.Command("subscribe").set_topic("orders").set_options("select=[id]"))
