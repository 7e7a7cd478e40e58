"""The official JavaScript client (npm ``amps``, under Node) over the WebSocket transport.

Each test starts a server whose config has a ``Protocol websocket`` transport on port 0 and
runs one scenario of ``tests/js/scenarios.js`` against it; the scenario prints what the
client observed as JSON. The client is installed, pinned, in ``tests/js`` (``npm ci`` there);
without it these tests skip, except in CI (``CI=true``) where they fail.
"""

from __future__ import annotations

import pytest

from tests.support.js_client import require_js_client, run_js
from tests.support.servers import start_server
from tests.support.tls import self_signed

WS_CONFIG = """<AMPSConfig>
  <Name>ws-test</Name>
  <Transports>
    <Transport><Name>websocket</Name><Type>{type}</Type><InetAddr>127.0.0.1:0</InetAddr>
      <MessageType>json</MessageType><Protocol>websocket</Protocol>{tls}</Transport>
  </Transports>
  <TransactionLog><JournalDirectory>{d}/journal</JournalDirectory>
    <Topic><Name>ws-log</Name><MessageType>json</MessageType></Topic>
    <Topic><Name>ws-work</Name><MessageType>json</MessageType></Topic>
  </TransactionLog>
  <SOW>
    <Topic><Name>ws-sow</Name><MessageType>json</MessageType><Key>/id</Key>
      <Durability>transient</Durability></Topic>
    <Queue><Name>ws-work</Name><MessageType>json</MessageType><LeasePeriod>30s</LeasePeriod>
      <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog></Queue>
  </SOW>
</AMPSConfig>"""


@pytest.fixture
def ws_server(tmp_path):
    require_js_client()
    srv = start_server(WS_CONFIG.format(d=tmp_path, type="tcp", tls=""), "ws.xml")
    assert srv.uri.startswith("ws://") and srv.uri.endswith("/amps/json")
    yield srv
    srv.stop()


def test_logon_and_heartbeat(ws_server):
    r = run_js("logon_heartbeat", ws_server)
    assert r == {"version": "5.3.4.0", "heartbeats": r["heartbeats"], "connected": True}
    assert r["heartbeats"] >= 1


def test_publish_subscribe_with_filter(ws_server):
    r = run_js("pubsub_filter", ws_server)
    assert r["got"] == [{"topic": "ws-orders", "data": {"qty": 20}},
                        {"topic": "ws-orders", "data": {"qty": 11}}]


def test_flush_then_sow_in_batches(ws_server):
    r = run_js("flush_then_sow", ws_server)
    assert r == {"groups": 1, "count": 20, "ids": list(range(5, 25)), "keyed": True}


def test_sow_and_subscribe_with_oof(ws_server):
    r = run_js("sow_and_subscribe_oof", ws_server)
    seen = [(s["c"], s.get("data")) for s in r["seen"]]
    assert seen[0] == ("group_begin", None)
    assert sorted(d["id"] for c, d in seen[1:3]) == [1, 2] and {c for c, _ in seen[1:3]} == {"sow"}
    assert seen[3] == ("group_end", None)
    assert seen[4:] == [("oof", {"id": 2, "qty": 5}), ("p", {"id": 3, "qty": 30})]
    assert r["seen"][4]["reason"] == "match"


def test_sow_delete_stats(ws_server):
    r = run_js("sow_delete_stats", ws_server)
    assert r == {"ack": "stats", "status": "success", "deleted": 4, "matches": 4,
                 "topicMatches": 6}


def test_delta_subscribe(ws_server):
    assert run_js("delta_subscribe", ws_server)["got"] == [{"id": 7, "b": 3}]


def test_bookmark_replay_with_bookmark_store(ws_server):
    r = run_js("bookmark_replay", ws_server)
    assert r["first"] == [0, 1, 2]
    assert r["second"] == [3, 4]


def test_queue_consumer_with_ack_batching(ws_server):
    r = run_js("queue_ack_batch", ws_server)
    assert r == {"count": 30, "distinct": 30, "leases": ["string"], "redelivered": 0}


def test_queue_ack_batch_larger_than_backlog(ws_server):
    r = run_js("queue_max_backlog", ws_server, timeout_ms=3000)
    assert r == {"count": 30, "distinct": 30, "leases": ["string"], "redelivered": 0}


def test_publish_store_all_persisted(ws_server):
    assert run_js("publish_store", ws_server) == {"unpersisted": 0}


def test_disconnect_and_reconnect(ws_server):
    r = run_js("reconnect", ws_server)
    assert r["logons"] >= 2 and r["got"] == [1]


def test_wss(tmp_path):
    require_js_client()
    cert, key = self_signed(tmp_path / "tls")
    tls = f"<Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>"
    srv = start_server(WS_CONFIG.format(d=tmp_path, type="tcps", tls=tls), "wss.xml")
    try:
        assert srv.uri.startswith("wss://")
        # with credentials in the URI the client also sends an Authorization: Basic header
        uri = srv.uri.replace("wss://", "wss://someone:secret@")
        r = run_js("secure_pubsub", srv, env={"NODE_EXTRA_CA_CERTS": str(cert)}, uri=uri)
        assert r == {"got": [{"secure": True}], "version": "5.3.4.0"}
    finally:
        srv.stop()


TYPED_CONFIG = """<AMPSConfig>
  <Name>ws-typed</Name>
  <Transports>
    <Transport><Name>websocket</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <Protocol>websocket</Protocol></Transport>
  </Transports>
  <SOW>
    <Topic><Name>ws-typed</Name><MessageType>nvfix</MessageType><Key>/id</Key>
      <Durability>transient</Durability></Topic>
    <Topic><Name>ws-typed</Name><MessageType>xml</MessageType><Key>/Order/id</Key>
      <Durability>transient</Durability></Topic>
  </SOW>
</AMPSConfig>"""


@pytest.fixture
def typed_ws_server(tmp_path):
    require_js_client()
    srv = start_server(TYPED_CONFIG, "ws-typed.xml")
    yield srv
    srv.stop()


def test_nvfix_through_the_js_type_helper(typed_ws_server):
    uri = typed_ws_server.uri.rsplit("/", 1)[0] + "/nvfix"
    r = run_js("nvfix_pubsub_sow", typed_ws_server, uri=uri)
    # the helper reads NVFIX into objects of strings
    assert r["got"] == [{"id": "2", "qty": "20"}, {"id": "2", "qty": "30"},
                        {"id": "3", "qty": "11"}]
    assert r["records"] == [{"id": "2", "qty": "30"}, {"id": "3", "qty": "11"}]


def test_xml_through_a_registered_js_helper(typed_ws_server):
    uri = typed_ws_server.uri.rsplit("/", 1)[0] + "/xml"
    r = run_js("xml_pubsub_sow", typed_ws_server, uri=uri)
    assert r == {"got": ['<Order update="full"><id>2</id></Order>'],
                 "records": ['<Order update="full"><id>2</id></Order>']}
