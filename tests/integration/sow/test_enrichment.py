"""SOW ``Preprocessing`` and ``Enrichment`` through the official Python client.

The topics are written after the User Guide's examples ("SOW Preprocessing and Enrichment
Examples", "Constructing Enrichment Fields"), in other words: a key computed from two fields,
a default kept from the previous record, audit fields, ``HINT OPTIONAL`` and
``HINT SET_CURRENT``, on json and nvfix. Every reader sees the enriched message: a live
subscriber, a content filter on an enriched field, a ``sow`` query, a delta subscriber, a
restart on the same files, a SOW rebuilt from the transaction log, a conflated topic.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from amps_emulator.config import loads_config
from tests.support.clients import Collector, client_for
from tests.support.servers import ServerThread, start_server

AMPS = pytest.importorskip("AMPS")

SOH = "\x01"

CONFIG = """<AMPSConfig><Name>enricher</Name>
<Transports>
  <Transport><Name>any</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol></Transport>
</Transports>
<TransactionLog><JournalDirectory>{d}/journal</JournalDirectory>
  <Topic><Name>.*</Name><MessageType>json</MessageType></Topic>
  <Topic><Name>.*</Name><MessageType>nvfix</MessageType></Topic>
</TransactionLog>
<SOW>
  <!-- eight trade buckets: the Key is a field preprocessing computes -->
  <Topic><Name>trade-buckets</Name><MessageType>json</MessageType><Key>/bucket</Key>
    <FileName>{d}/sow/%n.sow</FileName>
    <Preprocessing>
      <Field>CRC32(CONCAT(/desk, /tradeId)) % 8 AS /bucket</Field>
      <Field>IF(/channel IN ('fix', 'web'), /channel, NULL)
             AS /channel HINT OPTIONAL</Field>
    </Preprocessing>
  </Topic>
  <!-- a tier that defaults, and who last changed the record -->
  <Topic><Name>accounts</Name><MessageType>json</MessageType><Key>/acct</Key>
    <FileName>{d}/sow/%n.sow</FileName>
    <Enrichment>
      <Field>COALESCE(/tier OF CURRENT, /tier OF PREVIOUS, 'standard') as /tier</Field>
      <Field>CLIENT_NAME() AS /changedBy</Field>
      <Field>AMPS_INSTANCE_NAME() AS /changedOn</Field>
      <Field>COALESCE(/revision OF PREVIOUS, 0) + 1 AS /revision</Field>
    </Enrichment>
  </Topic>
  <!-- value from the current or the stored quantity and price; notes with and without HINT -->
  <Topic><Name>positions</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{d}/sow/%n.sow</FileName>
    <Enrichment>
      <Field>COALESCE(/qty OF CURRENT, /qty OF PREVIOUS) * COALESCE(/px OF CURRENT, /px OF PREVIOUS)
             AS /value HINT SET_CURRENT</Field>
      <Field>IF(/value > 1000, 'large', 'small') AS /size</Field>
      <Field>/note AS /lastNote</Field>
      <Field>/note AS /keptNote HINT OPTIONAL</Field>
    </Enrichment>
  </Topic>
  <Topic><Name>quotes</Name><MessageType>nvfix</MessageType><Key>/sym</Key>
    <FileName>{d}/sow/%n.sow</FileName>
    <Preprocessing><Field>UPPER(/sym) AS /sym</Field></Preprocessing>
    <Enrichment>
      <Field>(/bid + /ask) / 2 AS /mid</Field>
      <Field>COALESCE(/venue OF CURRENT, /venue OF PREVIOUS, 'XNAS') AS /venue</Field>
    </Enrichment>
  </Topic>
  <!-- one logical topic per name under /books/, each record filed on its own shelf -->
  <Topic><Name>books</Name><Pattern>^/books/</Pattern><MessageType>json</MessageType><Key>/isbn</Key>
    <FileName>{d}/sow/%n.sow</FileName>
    <Enrichment><Field>TOPIC_NAME() AS /shelf</Field></Enrichment>
  </Topic>
  <ConflatedTopic><Name>accounts-slow</Name><MessageType>json</MessageType>
    <UnderlyingTopic>accounts</UnderlyingTopic><Interval>100ms</Interval>
    <Enrichment><Field>UPPER(/tier) AS /tier</Field></Enrichment>
  </ConflatedTopic>
</SOW>
</AMPSConfig>"""


def _config(d: Path) -> str:
    return CONFIG.format(d=d)


@pytest.fixture
def enricher(tmp_path):
    srv = start_server(_config(tmp_path), "enrichment.xml")
    yield srv
    srv.stop()


@pytest.fixture
def client(enricher):
    c = client_for(enricher, "desk-1", "json")
    yield c
    c.close()


def _sow(c, topic: str, filt: str | None = None) -> list[dict]:
    return [json.loads(m.get_data()) for m in c.sow(topic, filt) if m.get_command() == "sow"]


def _nv(body: str) -> dict[str, str]:
    return dict(f.split("=", 1) for f in body.split(SOH) if f)


def test_preprocessing_computes_the_sow_key(client):
    trades = [("rates", t) for t in range(40)]
    for desk, trade in trades:
        client.publish("trade-buckets", json.dumps({"desk": desk, "tradeId": trade, "channel": "web"}))
    client.publish("trade-buckets", json.dumps({"desk": "fx", "tradeId": 7, "channel": "phone"}))
    client.flush()
    records = _sow(client, "trade-buckets")
    # one record per bucket: at most 8, each the last trade that fell into it
    assert 1 < len(records) <= 8
    assert len({r["bucket"] for r in records}) == len(records)
    assert all(0 <= r["bucket"] < 8 for r in records)
    phone = [r for r in records if r["desk"] == "fx"]
    assert phone and "channel" not in phone[0]  # HINT OPTIONAL: a NULL removes the field
    assert all(r["channel"] == "web" for r in records if r["desk"] == "rates")


def test_enrichment_fills_defaults_keeps_previous_values_and_audits(client, enricher):
    live = Collector(lambda m: json.loads(m.get_data()))
    client.subscribe(live, "accounts")
    client.publish("accounts", json.dumps({"acct": "A1"}))
    client.publish("accounts", json.dumps({"acct": "A1", "tier": "gold"}))
    client.publish("accounts", json.dumps({"acct": "A1", "balance": 10}))
    client.flush()
    seen = live.wait_for(3)
    assert [m["tier"] for m in seen] == ["standard", "gold", "gold"]
    assert [m["revision"] for m in seen] == [1, 2, 3]
    assert {(m["changedBy"], m["changedOn"]) for m in seen} == {("desk-1", "enricher")}
    assert _sow(client, "accounts") == [seen[-1]]
    # content filters read the enriched message
    assert [r["acct"] for r in _sow(client, "accounts", "/tier = 'gold' AND /revision = 3")] == ["A1"]


def test_delta_publish_is_enriched_before_the_merge(client):
    deltas = Collector(lambda m: json.loads(m.get_data()))
    client.delta_subscribe(deltas, "positions")
    client.publish("positions", json.dumps({"id": 1, "qty": 10, "px": 200, "note": "opened"}))
    client.delta_publish("positions", json.dumps({"id": 1, "qty": 2}))
    client.flush()
    first, second = deltas.wait_for(2)
    assert (first["value"], first["size"], first["lastNote"], first["keptNote"]) == (
        2000, "large", "opened", "opened")
    # the delta has no px: OF PREVIOUS supplies it; no note: lastNote becomes NULL, keptNote
    # (HINT OPTIONAL) is not in the delta and keeps the stored value
    assert second == {"id": 1, "qty": 2, "value": 400, "size": "small", "lastNote": None}
    [stored] = _sow(client, "positions")
    assert stored == {"id": 1, "qty": 2, "px": 200, "note": "opened", "value": 400, "size": "small",
                      "lastNote": None, "keptNote": "opened"}


def test_nvfix_topic_is_preprocessed_and_enriched(enricher):
    c = client_for(enricher, "nv", "nvfix")
    try:
        live = Collector(lambda m: m.get_data())
        c.subscribe(live, "quotes")
        c.publish("quotes", f"sym=ibm{SOH}bid=1.50{SOH}ask=2.50{SOH}")
        c.publish("quotes", f"sym=IBM{SOH}bid=2.00{SOH}ask=3.00{SOH}venue=ARCX{SOH}")
        c.publish("quotes", f"sym=Ibm{SOH}bid=4{SOH}ask=5{SOH}")
        c.flush()
        a, b, last = live.wait_for(3)
        assert a == f"sym=IBM{SOH}bid=1.50{SOH}ask=2.50{SOH}mid=2.0{SOH}venue=XNAS{SOH}"
        assert _nv(b)["venue"] == "ARCX" and _nv(b)["mid"] == "2.5"
        # (4 + 5) / 2 is an integer division
        assert _nv(last) == {"sym": "IBM", "bid": "4", "ask": "5", "mid": "4", "venue": "ARCX"}
        assert [m.get_data() for m in c.sow("quotes") if m.get_command() == "sow"] == [last]
    finally:
        c.close()


def test_the_logical_topics_of_a_pattern_share_its_enrichment(client):
    client.publish("/books/poetry", json.dumps({"isbn": "1"}))
    client.publish("/books/travel", json.dumps({"isbn": "1"}))
    client.flush()
    assert _sow(client, "/books/poetry") == [{"isbn": "1", "shelf": "/books/poetry"}]
    assert _sow(client, "/books/travel") == [{"isbn": "1", "shelf": "/books/travel"}]


def test_a_run_of_publishes_is_enriched_one_by_one(client):
    for i in range(500):
        client.publish("accounts", json.dumps({"acct": f"R{i}"}))
    client.flush()
    records = _sow(client, "accounts", "/acct LIKE '^R'")
    assert len(records) == 500
    assert {(r["tier"], r["revision"]) for r in records} == {("standard", 1)}


def test_a_conflated_topic_applies_its_own_enrichment(client):
    out = Collector(lambda m: json.loads(m.get_data()))
    client.subscribe(out, "accounts-slow")
    client.publish("accounts", json.dumps({"acct": "C1", "tier": "silver"}))
    assert out.wait_until(lambda items: any(m["acct"] == "C1" for m in items))
    [m] = [m for m in out.items if m["acct"] == "C1"]
    assert (m["tier"], m["revision"]) == ("SILVER", 1)


def test_enriched_records_survive_a_restart_and_a_rebuild_from_the_log(tmp_path):
    def revisions(srv: ServerThread) -> list[tuple[str, int, str]]:
        c = client_for(srv, "reader", "json")
        try:
            return sorted((r["acct"], r["revision"], r["tier"]) for r in _sow(c, "accounts"))
        finally:
            c.close()

    srv = start_server(_config(tmp_path), "enrichment.xml")
    c = client_for(srv, "w", "json")
    for tier in ("gold", None, None):
        c.publish("accounts", json.dumps({"acct": "P1"} if tier is None else {"acct": "P1", "tier": tier}))
    c.publish("accounts", json.dumps({"acct": "P2"}))
    c.flush()
    c.close()
    before = revisions(srv)
    srv.stop()
    assert before == [("P1", 3, "gold"), ("P2", 1, "standard")]

    srv = start_server(_config(tmp_path), "enrichment.xml")  # the same LMDB files
    try:
        assert revisions(srv) == before
        c = client_for(srv, "w", "json")
        c.publish("accounts", json.dumps({"acct": "P1"}))  # OF PREVIOUS reads the stored record
        c.flush()
        c.close()
        assert revisions(srv)[0] == ("P1", 4, "gold")
    finally:
        srv.stop()

    shutil.rmtree(tmp_path / "sow")  # the SOW is rebuilt from the journal, which holds the enriched messages
    srv = ServerThread(loads_config(_config(tmp_path), "enrichment.xml")).start()
    try:
        assert revisions(srv) == [("P1", 4, "gold"), ("P2", 1, "standard")]
    finally:
        srv.stop()

