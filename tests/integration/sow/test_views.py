"""Views and conflated topics through the official client."""

from __future__ import annotations

import json

import AMPS
import pytest

from tests.support.clients import Inbox, clients_for
from tests.support.servers import config_xml, start_server

SOW_XML = """<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{d}/sow/%n.sow</FileName></Topic>
  <View><Name>totals</Name><MessageType>json</MessageType><UnderlyingTopic>orders</UnderlyingTopic>
    <Projection><Field>[orders].[/sym]</Field><Field>SUM(/qty) AS /qty</Field>
      <Field>COUNT(/id) AS /n</Field></Projection>
    <Grouping><Field>/sym</Field></Grouping>
    <Filter>/status IS NULL OR /status != 'cancelled'</Filter></View>
  <View><Name>big</Name><MessageType>json</MessageType><UnderlyingTopic>totals</UnderlyingTopic>
    <Projection><Field>/sym</Field><Field>/qty * 2 AS /double</Field></Projection>
    <Grouping><Field>/sym</Field></Grouping><Filter>/qty >= 100</Filter></View>
  <ConflatedTopic><Name>orders-slow</Name><MessageType>json</MessageType>
    <UnderlyingTopic>orders</UnderlyingTopic><Interval>1s</Interval></ConflatedTopic>
  <Topic><Name>customers</Name><MessageType>json</MessageType><Key>/cid</Key>
    <Durability>transient</Durability></Topic>
  <View><Name>by_customer</Name><MessageType>json</MessageType>
    <UnderlyingTopic><Join>[orders].[/cust]=[customers].[/cid]</Join></UnderlyingTopic>
    <Projection><Field>[orders].[/cust] AS /cust</Field>
      <Field>[customers].[/name] AS /name</Field>
      <Field>SUM([orders].[/qty]) AS /qty</Field></Projection>
    <Grouping><Field>[orders].[/cust]</Field></Grouping></View>
</SOW>"""


@pytest.fixture
def view_clients(clients_with):
    return clients_with(SOW_XML)


def rows(c, topic, flt=None):
    return sorted((json.loads(m.get_data()) for m in c.sow(topic, flt, timeout=5000)
                   if m.get_command() == "sow"), key=lambda d: (d.get("sym", ""), d.get("id", 0)))


def collect(c, command, topic, options=""):
    return Inbox.of(c, AMPS.Command(command).set_topic(topic).set_options(options)
                    .set_batch_size(10))


def take(c, got: Inbox):
    return got.take()


def pub(c, **doc):
    c.publish("orders", json.dumps(doc))


def test_a_view_aggregates_its_topic_and_follows_every_change(view_clients):
    c = view_clients()
    pub(c, id=1, sym="IBM", qty=60)
    pub(c, id=2, sym="IBM", qty=50)
    pub(c, id=3, sym="MSFT", qty=5)
    pub(c, id=4, sym="MSFT", qty=500, status="cancelled")  # filtered out of the view
    c.flush(5000)
    assert rows(c, "totals") == [{"sym": "IBM", "qty": 110, "n": 2},
                                 {"sym": "MSFT", "qty": 5, "n": 1}]
    assert rows(c, "totals", "/qty > 100") == [{"sym": "IBM", "qty": 110, "n": 2}]
    got = collect(c, "sow_and_subscribe", "totals", "oof")
    assert len(take(c, got)) == 2
    pub(c, id=3, sym="MSFT", qty=7)
    assert take(c, got) == [("p", {"sym": "MSFT", "qty": 7, "n": 1})]
    pub(c, id=4, sym="MSFT", qty=500)  # no longer cancelled: it counts
    assert take(c, got) == [("p", {"sym": "MSFT", "qty": 507, "n": 2})]
    c.sow_delete("orders", "/sym = 'MSFT'", 5000)  # the group is gone
    assert take(c, got) == [("oof", {"sym": "MSFT", "qty": 507, "n": 2})]
    assert rows(c, "totals") == [{"sym": "IBM", "qty": 110, "n": 2}]


def test_a_view_over_a_view_and_delta_subscriptions(view_clients):
    c = view_clients()
    pub(c, id=1, sym="IBM", qty=60)
    pub(c, id=2, sym="AAPL", qty=500)
    c.flush(5000)
    assert rows(c, "big") == [{"sym": "AAPL", "double": 1000}]
    got = collect(c, "sow_and_delta_subscribe", "big", "oof")
    assert take(c, got) == [("sow", {"sym": "AAPL", "double": 1000})]
    pub(c, id=3, sym="IBM", qty=40)  # IBM reaches 100: it enters the second view
    assert take(c, got) == [("p", {"sym": "IBM", "double": 200})]
    pub(c, id=2, sym="AAPL", qty=501)
    assert take(c, got) == [("p", {"sym": "AAPL", "double": 1002})]
    pub(c, id=3, sym="IBM", qty=1)  # IBM drops below 100: out of focus
    assert take(c, got) == [("oof", {"sym": "IBM", "double": 200})]


def test_views_and_conflated_topics_cannot_be_written(view_clients):
    c = view_clients()
    for topic in ("totals", "orders-slow"):
        with pytest.raises(AMPS.AMPSException):
            c.execute(AMPS.Command("publish").set_topic(topic).set_data('{"sym":"X"}')
                      .add_ack_type("processed"))
        with pytest.raises(AMPS.AMPSException):
            c.sow_delete(topic, "1=1", 5000)


def test_a_conflated_topic_changes_once_per_interval(view_clients):
    c = view_clients()
    got = collect(c, "subscribe", "orders-slow")
    for q in range(5):
        pub(c, id=1, sym="IBM", qty=q)
    pub(c, id=2, sym="MSFT", qty=1)
    c.flush(5000)
    assert rows(c, "orders-slow") == []  # not yet
    c.sow_delete("orders", "/id = 2", 5000)  # within the interval: never shows up
    cmd, data = got.q.get(timeout=10)  # at the end of the interval
    assert (cmd, json.loads(data)) in (("p", {"id": 1, "sym": "IBM", "qty": 4}),
                                       ("publish", {"id": 1, "sym": "IBM", "qty": 4}))
    assert rows(c, "orders-slow") == [{"id": 1, "sym": "IBM", "qty": 4}]
    assert got.take() == []


def test_views_are_rebuilt_at_start_up(tmp_path):
    xml = config_xml(tmp_path, extra=SOW_XML.format(d=tmp_path))
    srv = start_server(xml, "views.xml")
    made = clients_for(srv.uri)
    c = next(made)()
    pub(c, id=1, sym="IBM", qty=60)
    pub(c, id=2, sym="IBM", qty=70)
    c.flush(5000)
    made.close()
    srv.stop()
    srv = start_server(xml, "views.xml")
    try:
        made = clients_for(srv.uri)
        c = next(made)()
        assert rows(c, "totals") == [{"sym": "IBM", "qty": 130, "n": 2}]
        assert rows(c, "big") == [{"sym": "IBM", "double": 260}]
        assert rows(c, "orders-slow") == [{"id": 1, "sym": "IBM", "qty": 60},
                                          {"id": 2, "sym": "IBM", "qty": 70}]
        made.close()
    finally:
        srv.stop()


def by_cust(c):
    return sorted((json.loads(m.get_data()) for m in c.sow("by_customer", timeout=5000)
                   if m.get_command() == "sow"), key=lambda d: d["cust"])


def test_a_join_view_is_a_left_outer_join_kept_current_from_both_sides(view_clients):
    c = view_clients()
    c.publish("customers", json.dumps({"cid": 1, "name": "Ann"}))
    pub(c, id=1, cust=1, qty=10)
    pub(c, id=2, cust=1, qty=5)
    pub(c, id=3, cust=2, qty=7)  # no customer 2 yet: NULL name
    c.flush(5000)
    assert by_cust(c) == [{"cust": 1, "name": "Ann", "qty": 15},
                          {"cust": 2, "name": None, "qty": 7}]
    got = collect(c, "sow_and_subscribe", "by_customer", "oof")
    assert len(take(c, got)) == 2
    c.publish("customers", json.dumps({"cid": 2, "name": "Bob"}))  # the right side arrives
    assert take(c, got) == [("p", {"cust": 2, "name": "Bob", "qty": 7})]
    c.publish("customers", json.dumps({"cid": 1, "name": "Anne"}))
    assert take(c, got) == [("p", {"cust": 1, "name": "Anne", "qty": 15})]
    pub(c, id=2, cust=2, qty=5)  # an order moves from customer 1 to 2: both groups change
    assert sorted(d["cust"] for _, d in take(c, got)) == [1, 2]
    c.sow_delete("customers", "/cid = 1", 5000)  # the right side goes: NULLs again
    assert take(c, got) == [("p", {"cust": 1, "name": None, "qty": 10})]
    # the left side goes, one record after the other: the group shrinks, then is gone
    c.sow_delete("orders", "/cust = 2", 5000)
    (k1, shrunk), (k2, gone) = take(c, got)
    assert (k1, k2) == ("p", "oof") and shrunk == gone
    assert shrunk in ({"cust": 2, "name": "Bob", "qty": 5}, {"cust": 2, "name": "Bob", "qty": 7})
    assert by_cust(c) == [{"cust": 1, "name": None, "qty": 10}]
