"""AMPS's auxiliary function and key generator modules, through the official Python client:
the legacy date functions in filters and enrichment (and their absence without the module),
``VALUE_LOOKUP`` enriching a topic from another one as it changes, and the chaining key
generator combining a chain of documents into one record, across a restart."""

from __future__ import annotations

import calendar
import json
import threading
from pathlib import Path

import pytest

from tests.support.clients import Collector, client_for, store_client
from tests.support.servers import start_server

AMPS = pytest.importorskip("AMPS")

LEGACY = ("<Module><Name>compatibility-functions-module</Name>"
          "<Library>libamps_udf_legacy_compatibility.so</Library></Module>")
EXPERIMENTAL = """<Module><Name>experimental-udf</Name><Library>libamps_udf_experimental.so</Library>
  <Options>
    <Lookup>name-by-id;1;json;customers;/name;/id</Lookup>
    <Lookup>desk-of;2;nvfix;books;/desk;/region;/book</Lookup>
  </Options></Module>"""
CHAINING = ("<Module><Name>key-chaining</Name>"
            "<Library>libamps_id_chaining_key_generator.so</Library></Module>")


def config(d: Path, modules: str, sow: str) -> str:
    return f"""<AMPSConfig><Name>aux</Name>
<Modules>{modules}</Modules>
<Transports>
  <Transport><Name>any</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol></Transport>
</Transports>
<TransactionLog><JournalDirectory>{d}/journal</JournalDirectory>
  <Topic><Name>.*</Name><MessageType>json</MessageType></Topic>
</TransactionLog>
<SOW>{sow}</SOW>
</AMPSConfig>"""


TRADES = """<Topic><Name>trades</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>{d}/sow/%n.sow</FileName>
  <Enrichment><Field>YEAR(/t) * 10000 + MONTH(/t) * 100 + DAY(/t) AS /day</Field></Enrichment>
</Topic>"""
#: January 25, 2010 at 10:04 AM UTC
T = calendar.timegm((2010, 1, 25, 10, 4, 0))


def _sow(c, topic: str, filt: str | None = None) -> list[dict]:
    return [json.loads(m.get_data()) for m in c.sow(topic, filt) if m.get_command() == "sow"]


def test_the_legacy_date_functions_in_enrichment_and_filters(tmp_path):
    srv = start_server(config(tmp_path, LEGACY, TRADES.format(d=tmp_path)), "legacy.xml")
    c = client_for(srv, "legacy", "json")
    try:
        live = Collector(lambda m: json.loads(m.get_data()))
        c.subscribe(live, "trades", "YEAR(/t) = 2010 AND DATE_UTC(/t) < TODAY_UTC()")
        c.publish("trades", json.dumps({"id": 1, "t": T}))
        c.publish("trades", json.dumps({"id": 2, "t": T + 366 * 86400}))
        assert live.wait_for(1) == [{"id": 1, "t": T, "day": 20100125}]
        assert [r["id"] for r in _sow(c, "trades", "MONTH(/t) = 1 AND DAY(/t) = 26")] == [2]
    finally:
        c.close()
        srv.stop()


def test_without_the_module_the_functions_are_unknown(tmp_path):
    plain = TRADES.format(d=tmp_path).replace(
        "<Enrichment><Field>YEAR(/t) * 10000 + MONTH(/t) * 100 + DAY(/t) AS /day</Field></Enrichment>", "")
    srv = start_server(config(tmp_path, "", plain), "plain.xml")
    c = client_for(srv, "plain", "json")
    try:
        with pytest.raises(AMPS.BadFilterException):
            c.subscribe(Collector(), "trades", "YEAR(/t) = 2010")
        with pytest.raises(AMPS.BadFilterException):
            _sow(c, "trades", "TODAY() > 0")
    finally:
        c.close()
        srv.stop()


LOOKUPS = """
<Topic><Name>customers</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>{d}/sow/%n.sow</FileName></Topic>
<Topic><Name>books</Name><MessageType>nvfix</MessageType><Key>/region</Key><Key>/book</Key>
  <FileName>{d}/sow/%n.sow</FileName></Topic>
<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/order</Key>
  <FileName>{d}/sow/%n.sow</FileName>
  <Preprocessing><Field>VALUE_LOOKUP('desk-of', /region, /book) AS /desk HINT OPTIONAL</Field></Preprocessing>
  <Enrichment>
    <Field>VALUE_LOOKUP('name-by-id', /customer) AS /customerName HINT OPTIONAL</Field>
  </Enrichment>
</Topic>
<ConflatedTopic><Name>orders-slow</Name><MessageType>json</MessageType>
  <UnderlyingTopic>orders</UnderlyingTopic><Interval>100ms</Interval>
  <Enrichment><Field>UPPER(VALUE_LOOKUP('name-by-id', /customer)) AS /shout</Field></Enrichment>
</ConflatedTopic>"""


def test_value_lookup_enriches_from_the_lookup_topic_as_it_changes(tmp_path):
    srv = start_server(config(tmp_path, EXPERIMENTAL, LOOKUPS.format(d=tmp_path)), "lookup.xml")
    c = client_for(srv, "lookup", "json")
    nv = client_for(srv, "lookup-nv", "nvfix")
    try:
        c.publish("customers", json.dumps({"id": 7, "name": "Acme"}))
        c.publish("customers", json.dumps({"id": "8", "name": "Globex"}))
        nv.publish("books", "region=EU\x01book=rates\x01desk=D1\x01")
        nv.publish_flush()
        c.publish("orders", json.dumps({"order": 1, "customer": 7, "region": "EU", "book": "rates"}))
        c.publish("orders", json.dumps({"order": 2, "customer": "7"}))  # "7" matches 7 exactly as =
        c.publish("orders", json.dumps({"order": 3, "customer": 9}))  # no such customer: NULL
        c.publish("orders", json.dumps({"order": 4, "customer": 8, "region": "EU", "book": "fx"}))
        c.flush()
        got = {r["order"]: r for r in _sow(c, "orders")}
        assert got[1] == {"order": 1, "customer": 7, "region": "EU", "book": "rates", "desk": "D1",
                          "customerName": "Acme"}
        assert got[2]["customerName"] == "Acme"
        assert "customerName" not in got[3]
        assert got[4]["customerName"] == "Globex" and "desk" not in got[4]
        # the lookup topic changes: later publishes see it (a renamed and a deleted customer)
        c.publish("customers", json.dumps({"id": 7, "name": "Acme Corp"}))
        c.sow_delete("customers", "/id = '8'")
        c.publish("orders", json.dumps({"order": 1, "customer": 7}))
        c.publish("orders", json.dumps({"order": 4, "customer": 8}))
        c.flush()
        got = {r["order"]: r for r in _sow(c, "orders")}
        assert got[1]["customerName"] == "Acme Corp"
        assert "customerName" not in got[4]
        slow = Collector(lambda m: json.loads(m.get_data()))
        c.subscribe(slow, "orders-slow", "/order = 1")
        c.publish("orders", json.dumps({"order": 1, "customer": 7}))
        assert slow.wait_for(1)[0]["shout"] == "ACME CORP"  # a conflated topic's Enrichment too
    finally:
        nv.close()
        c.close()
        srv.stop()


CHAINED = """<Topic><Name>Orders</Name><MessageType>json</MessageType>
  <FileName>{d}/sow/%n.sow</FileName>
  <KeyGenerator><Module>key-chaining</Module><Options>
    <Primary>/DocumentNumber</Primary><Key>/ParentDocument</Key><Key>/RelatedDocument</Key>
    <FileName>{d}/sow/Orders.chain</FileName></Options></KeyGenerator>
</Topic>"""


def test_the_chaining_key_generator_keeps_one_record_per_chain_across_a_restart(tmp_path):
    xml = config(tmp_path, CHAINING, CHAINED.format(d=tmp_path))
    srv = start_server(xml, "chain.xml")
    c = client_for(srv, "chain", "json")
    try:  # the User Guide's example
        for doc in ({"DocumentNumber": 1, "Status": "Started"},
                    {"DocumentNumber": 2, "ParentDocument": 1, "Order": "Antivenom"},
                    {"DocumentNumber": 3, "ParentDocument": 2, "Order": "Sandwich"},
                    {"DocumentNumber": 4, "ParentDocument": 1, "Status": "Pending"}):
            c.delta_publish("Orders", json.dumps(doc))
        c.publish("Orders", json.dumps({"DocumentNumber": 10, "Status": "Other"}))
        c.flush()
        got = sorted(_sow(c, "Orders"), key=lambda r: r["DocumentNumber"])
        assert got == [{"DocumentNumber": 4, "ParentDocument": 1, "Order": "Sandwich", "Status": "Pending"},
                       {"DocumentNumber": 10, "Status": "Other"}]
    finally:
        c.close()
        srv.stop()
    srv = start_server(xml, "chain.xml")  # the chains were kept in the FileName
    c = client_for(srv, "chain-2", "json")
    try:
        c.delta_publish("Orders", json.dumps({"DocumentNumber": 5, "RelatedDocument": 3, "Status": "Done"}))
        c.flush()
        got = sorted(_sow(c, "Orders"), key=lambda r: r["DocumentNumber"])
        assert [(r["DocumentNumber"], r["Status"]) for r in got] == [(5, "Done"), (10, "Other")]
        assert got[0]["Order"] == "Sandwich"
    finally:
        c.close()
        srv.stop()


def test_a_message_of_two_chains_is_refused(tmp_path):
    srv = start_server(config(tmp_path, CHAINING, CHAINED.format(d=tmp_path)), "chain.xml")
    failed: list[str] = []
    done = threading.Event()

    def on_failed(*args):
        failed.append(" ".join(str(a) for a in args))
        done.set()

    c = store_client(srv.uri, "two-chains", on_failed)
    try:
        c.publish("Orders", json.dumps({"DocumentNumber": 1}))
        c.publish("Orders", json.dumps({"DocumentNumber": 2}))
        c.publish("Orders", json.dumps({"DocumentNumber": 3, "ParentDocument": 1, "RelatedDocument": 2}))
        c.publish("Orders", json.dumps({"Status": "no chaining field"}))
        assert done.wait(10)
        c.publish_flush(5000)
        assert "sow key" in failed[0].lower() and len(failed) == 2
        assert sorted(r["DocumentNumber"] for r in _sow(c, "Orders")) == [1, 2]
    finally:
        c.close()
        srv.stop()
