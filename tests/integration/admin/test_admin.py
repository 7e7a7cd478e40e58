"""The Admin interface through HTTP, with the official client making the traffic: the /amps
monitoring tree (as 60East's Prometheus exporter reads it), administrator actions, the
/emulator reset and inspection resources, and the test clock."""

from __future__ import annotations

import json
import threading

import AMPS
import pytest

from amps_emulator.config import loads_config
from amps_emulator.server.core.clock import TestClock
from tests.support.clients import Collector, clients_for
from tests.support.servers import ServerThread, config_xml, until

EXTRA = """<Admin><InetAddr>127.0.0.1:0</InetAddr><Interval>1s</Interval></Admin>
<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{d}/sow/%n.sow</FileName></Topic>
  <Topic><Name>quotes</Name><MessageType>json</MessageType><Key>/id</Key>
    <Durability>transient</Durability><Expiration>10s</Expiration></Topic>
  <View><Name>totals</Name><UnderlyingTopic>orders</UnderlyingTopic><MessageType>json</MessageType>
    <Projection><Field>/sym</Field><Field>SUM(/qty) AS /total</Field></Projection>
    <Grouping><Field>/sym</Field></Grouping></View>
  <Queue><Name>work</Name><MessageType>json</MessageType><LeasePeriod>30s</LeasePeriod>
    <Expiration>60s</Expiration><MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog></Queue>
</SOW>"""


def make_server(tmp_path, **kwargs) -> ServerThread:
    xml = config_xml(tmp_path, extra=EXTRA.format(d=tmp_path))
    return ServerThread(loads_config(xml, "admin.xml"), **kwargs).start()


@pytest.fixture
def srv(tmp_path):
    s = make_server(tmp_path)
    yield s
    s.stop()


@pytest.fixture
def connect(srv):
    yield from clients_for(srv.uri)


def by_id(entries: list[dict], ident: str) -> dict:
    return next(e for e in entries if e["id"] == ident)


def traffic(connect) -> tuple:
    pub, sub = connect("publisher"), connect("subscriber")
    got = Collector()
    sub.subscribe(got, "orders", options="oof")
    for i in range(10):
        pub.publish("orders", json.dumps({"id": i, "sym": "AB"[i % 2], "qty": i}))
    pub.publish("work", json.dumps({"job": 1}))
    pub.flush(5000)
    assert len([m for m in sub.sow("orders", "/qty >= 5") if m.get_command() == "sow"]) == 5
    got.wait_for(10)
    return pub, sub, got


CLIENT_FIELDS = {"authenticated_id", "bytes_in", "bytes_in_per_sec", "bytes_out",
                 "bytes_out_per_sec", "client_name", "client_version", "connect_time",
                 "connection_name", "correlation_id", "denied_reads", "denied_writes",
                 "messages_in", "messages_in_per_sec", "messages_out", "messages_out_per_sec",
                 "queue_depth_out", "queue_max_latency", "queued_bytes_out", "remote_address",
                 "subscription_count", "transport_rx_queue", "transport_tx_queue"}
SOW_FIELDS = {"delete_count", "deletes_per_sec", "insert_count", "inserts_per_sec",
              "message_type", "queries_per_sec", "query_count", "topic", "update_count",
              "updates_per_sec", "valid_keys"}
PROCESSOR_FIELDS = {"denied_reads", "denied_writes", "description", "last_active",
                    "matches_found", "matches_found_per_sec", "messages_received",
                    "messages_received_per_sec", "throttle_count"}
QUEUE_FIELDS = {"queue_depth", "seconds_behind", "backlog", "owned", "transferred_in",
                "transferred_out", "message_type", "topic"}


def test_every_resource_has_the_documented_fields_after_traffic(srv, connect):
    traffic(connect)
    amps = srv.http("/amps.json")["amps"]
    host, inst = amps["host"], amps["instance"]
    assert {"free", "in_use", "swap_free", "swap_total", "total"} <= set(host["memory"])
    assert {"idle_percent", "iowait_percent", "system_percent", "user_percent"} <= set(
        by_id(host["cpus"], "all"))
    assert all("file_system_free_percent" in d for d in host["disks"]) and host["disks"]
    assert all({"bytes_in", "bytes_out"} <= set(n) for n in host["network"])

    clients = {c["client_name"]: c for c in inst["clients"]}
    assert CLIENT_FIELDS <= set(clients["publisher"])
    assert int(clients["publisher"]["messages_in"]) >= 12  # logon, 11 publishes, sow
    assert int(clients["subscriber"]["messages_out"]) >= 10 + 5
    assert clients["subscriber"]["subscription_count"] == "1"
    orders = by_id(inst["sow"], "orders!json")
    assert SOW_FIELDS <= set(orders)
    assert (orders["insert_count"], orders["valid_keys"]) == ("10", "10")
    assert int(orders["query_count"]) >= 1
    assert by_id(inst["views"], "totals!json")["underlying_topic"] == "orders"
    work = by_id(inst["queues"], "work!json")
    assert QUEUE_FIELDS <= set(work) and work["queue_depth"] == "1"
    proc = by_id(inst["processors"], "all")
    assert PROCESSOR_FIELDS <= set(proc) and int(proc["messages_received"]) >= 11
    subs = inst["subscriptions"]
    assert any(s["topic"] == "orders" and s["client_id"] == "subscriber" for s in subs)
    assert inst["replication"] == []
    assert int(inst["transaction_log"]["last_position"]) >= 11
    # rates are interval averages: the sample after the traffic shows them
    assert until(lambda: float(by_id(srv.http("/amps/instance/processors.json")["amps"]
                                     ["instance"]["processors"], "all")
                               ["messages_received_per_sec"]) > 0)
    assert float(srv.http("/amps/instance/processors/all/messages_received.csv")
                 .split(",")[1]) >= 11


def test_prometheus_exporter_scrape(srv, connect):
    """What 60East's published exporter does: one GET of /amps.json, then these paths, skip
    the 'all' entries of lists, and make a gauge of every metric (float() of each value)."""
    traffic(connect)
    metrics = {
        "/amps/host/memory": ["free", "in_use", "swap_free", "swap_total"],
        "/amps/host/network": ["bytes_in", "bytes_out"],
        "/amps/host/disks": ["file_system_free_percent"],
        "/amps/host/cpus": ["iowait_percent", "idle_percent"],
        "/amps/instance/processors": ["messages_received_per_sec", "denied_reads",
                                      "denied_writes", "last_active", "throttle_count"],
        "/amps/instance/sow": ["inserts_per_sec", "updates_per_sec", "deletes_per_sec",
                               "queries_per_sec", "insert_count", "delete_count",
                               "update_count"],
        "/amps/instance/views": ["queue_depth"],
        "/amps/instance/queues": ["seconds_behind", "queue_depth", "transferred_in",
                                  "transferred_out", "owned"],
        "/amps/instance/replication": ["is_connected", "seconds_behind",
                                       "messages_out_per_sec"],
        "/amps/instance/clients": ["transport_rx_queue", "transport_tx_queue",
                                   "bytes_in_per_sec", "bytes_out_per_sec", "queue_depth_out",
                                   "queue_max_latency"],
    }
    stats = srv.http("/amps.json")
    gauges = {}
    for path, names in metrics.items():
        node = stats
        for key in path.split("/")[1:]:
            node = node[key]
        for name in names:
            base = path[1:].replace("/", "_") + "_" + name
            if isinstance(node, list):
                for entry in node:
                    if entry["id"] != "all":
                        gauges[(base, entry["id"])] = float(entry[name])
            else:
                gauges[(base, name)] = float(node[name])
        # each resource on its own answers the same shape
        alone = srv.http(path + ".json")
        for key in path.split("/")[1:]:
            alone = alone[key]
        assert type(alone) is type(node)
    assert gauges[("amps_instance_sow_insert_count", "orders!json")] == 10
    assert gauges[("amps_instance_queues_queue_depth", "work!json")] == 1
    assert ("amps_instance_clients_bytes_in_per_sec", "publisher") in gauges
    assert ("amps_instance_processors_messages_received_per_sec", "external") in gauges
    assert gauges[("amps_host_memory_in_use", "in_use")] > 0
    # XML and CSV as documented
    xml = srv.http("/amps/instance/processors/all.xml")
    assert xml.startswith("<amps><instance><processors><processor id='all'>")
    assert "<messages_received>" in xml
    srv.http("/amps/instance/processors.csv", expect=400)  # not a leaf


def test_administrator_disconnects_a_client_and_toggles_a_transport(srv, connect):
    victim = connect("victim")
    lost = threading.Event()
    victim.set_disconnect_handler(lambda client: lost.set())
    assert srv.http("/amps/administrator/clients/victim/disconnect.json")["disconnected"]
    assert lost.wait(10)
    srv.http("/amps/administrator/clients/nobody/disconnect", expect=404)

    srv.http("/amps/administrator/transports/json-tcp/disable")
    assert by_id(srv.http("/amps/instance/transports.json")["amps"]["instance"]["transports"],
                 "json-tcp")["is_enabled"] == "false"
    with pytest.raises(AMPS.AMPSException):
        connect("refused")
    srv.http("/amps/administrator/transports/json-tcp/enable")
    assert until(lambda: srv.http("/emulator/health")["transports"][0]["enabled"])
    assert connect("welcome back").get_name() == "welcome back"


def test_health_and_inspection(srv, connect):
    health = srv.http("/emulator/health")
    assert health["ready"] and health["transports"][0]["uri"] == srv.uri
    pub, sub, _ = traffic(connect)
    got = srv.http("/emulator/sow/orders?filter=/qty%20%3E%3D%208&orderby=/qty%20DESC")
    assert [r["data"]["qty"] for r in got["records"]] == [9, 8]
    worker = connect("worker")
    leased = Collector()
    worker.subscribe(leased, "work")
    leased.wait_for(1)
    q = srv.http("/emulator/queues/work")
    assert q["depth"] == 1 and q["leased"] == 1
    msg = q["messages"][0]
    assert (msg["leased_to"], msg["delivery_count"], msg["cancel_count"]) == ("worker", 1, 0)
    assert msg["data"] == {"job": 1}
    subs = srv.http("/emulator/subscriptions")["clients"]
    assert [s["topic"] for s in subs["subscriber"]] == ["orders"]
    assert subs["worker"][0]["kind"] == "queue"
    journal = srv.http("/emulator/journal?topic=orders")["records"]
    assert [r["data"]["id"] for r in journal] == list(range(10))
    after = srv.http(f"/emulator/journal?topic=orders&from={journal[7]['bookmark']}")["records"]
    assert [r["data"]["id"] for r in after] == [8, 9]
    upto = srv.http(f"/emulator/journal?topic=orders&to={journal[2]['bookmark']}")["records"]
    assert [r["data"]["id"] for r in upto] == [0, 1, 2]
    since = journal[5]["timestamp"]
    timed = srv.http(f"/emulator/journal?topic=orders&since={since}&until={since}")["records"]
    # (the publishes of one read share the instant the server took them)
    assert 5 in [r["data"]["id"] for r in timed] and {r["timestamp"] for r in timed} == {since}
    srv.http("/emulator/sow/nope", expect=404)
    assert "filter" in srv.http("/emulator/sow/orders?filter=%2Fqty%20%3E%3E", expect=400)["error"]


def test_reset_one_topic_sends_oof_to_subscribers(srv, connect):
    _, sub, got = traffic(connect)
    out = srv.http("/emulator/reset?topic=orders", "POST")
    assert out["records_deleted"] == 10
    assert got.wait_for(20)[10:] and all(i[0] == "oof" for i in got.wait_for(20)[10:])
    assert srv.http("/emulator/sow/orders")["count"] == 0
    assert srv.http("/emulator/queues/work")["depth"] == 1  # other state untouched


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    s = make_server(tmp_path_factory.mktemp("shared"))
    yield s
    s.stop()


@pytest.fixture
def fresh(shared):
    """What a user's conftest does: reset the one server between tests."""
    out = shared.http("/emulator/reset", "POST")
    assert out["ms"] < 1000
    yield from clients_for(shared.uri)


@pytest.mark.parametrize("round_", [1, 2])
def test_reset_returns_the_server_to_empty_between_tests(shared, fresh, round_):
    c = fresh(f"app-{round_}")
    assert [m for m in c.sow("orders") if m.get_command() == "sow"] == []
    replay = Collector()
    c.bookmark_subscribe(replay, "orders", AMPS.Client.Bookmarks.EPOCH)
    c.flush(5000)
    assert [i for i in replay.items if i[0] == "p"] == []
    assert shared.http("/emulator/queues/work")["depth"] == 0
    for i in range(3):
        c.publish("orders", json.dumps({"id": i, "sym": "A", "qty": round_}))
    c.publish("work", json.dumps({"job": round_}))
    c.flush(5000)
    assert shared.http("/emulator/sow/orders")["count"] == 3
    assert [r["data"]["qty"] for r in shared.http("/emulator/journal?topic=orders")["records"]] \
        == [round_] * 3


def test_full_reset_disconnects_clients_holding_state(shared, fresh):
    holder = fresh("holder")
    lost = threading.Event()
    holder.set_disconnect_handler(lambda client: lost.set())
    holder.subscribe(Collector(), "orders")
    out = shared.http("/emulator/reset", "POST")
    assert out["clients_disconnected"] >= 1
    assert lost.wait(10)


# -- the test clock ----------------------------------------------------------------------------
@pytest.fixture
def clocked(tmp_path):
    s = make_server(tmp_path, timebase=TestClock())
    yield s
    s.stop()


def test_lease_expiry_and_message_expiration_follow_the_test_clock(clocked):
    make = clients_for(clocked.uri)
    connect = next(make)
    pub, worker = connect("pub"), connect("slow-worker")
    first = Collector()
    worker.subscribe(first, "work")
    pub.publish("work", json.dumps({"job": "a"}))
    first.wait_for(1)
    assert clocked.http("/emulator/queues/work")["messages"][0]["delivery_count"] == 1
    clocked.http("/emulator/clock/advance?seconds=29", "POST")
    assert clocked.http("/emulator/queues/work")["leased"] == 1  # lease not over yet
    out = clocked.http("/emulator/clock/advance?seconds=2", "POST")
    assert out["timers_run"] >= 1
    # the lease expired: the message is delivered again (to the one subscriber there is)
    assert len(first.wait_for(2)) == 2
    assert clocked.http("/emulator/queues/work")["messages"][0]["delivery_count"] == 2
    # the queue's Expiration (60 s after publish) removes it without any ack
    clocked.http("/emulator/clock/advance?seconds=30", "POST")
    assert clocked.http("/emulator/queues/work")["depth"] == 0
    make.close()


def test_sow_expiration_follows_the_test_clock(clocked):
    make = clients_for(clocked.uri)
    c = next(make)("watcher")
    got = Collector()
    c.subscribe(got, "quotes", options="oof")
    c.publish("quotes", json.dumps({"id": 1, "px": 10}))
    got.wait_for(1)
    clocked.http("/emulator/clock/advance?seconds=9", "POST")
    assert clocked.http("/emulator/sow/quotes")["count"] == 1
    clocked.http("/emulator/clock/advance?seconds=2", "POST")
    assert got.wait_until(lambda items: any(i[0] == "oof" for i in items))
    assert clocked.http("/emulator/sow/quotes")["count"] == 0
    make.close()


def test_clock_cannot_advance_on_real_time(srv):
    srv.http("/emulator/clock/advance?seconds=1", "POST", expect=409)
    assert srv.http("/emulator/clock")["test_clock"] is False


def test_bad_requests_are_answered_or_dropped_and_the_port_keeps_serving(srv):
    import socket
    from urllib.parse import urlsplit

    u = urlsplit(srv.admin_uri)
    for junk in (b"\x00\x01garbage\r\n\r\n", b"GET /amps.json HTTP/1.1\r\nHost: x\r\n" + b"X: " +
                 b"a" * 100_000 + b"\r\n\r\n", b"POST /emulator/reset HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Length: 5\r\n\r\nab"):
        with socket.create_connection((u.hostname, u.port), timeout=5) as s:
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
    srv.http("/amps/instance/nope.json", expect=404)
    srv.http("/emulator/reset", expect=405)
    srv.http("/emulator/clock/advance?seconds=x", "POST", expect=409)
    assert srv.http("/emulator/health")["ready"]


def test_a_head_request_is_answered_with_headers_alone_and_the_connection_goes_on(srv):
    import http.client
    from urllib.parse import urlsplit

    u = urlsplit(srv.admin_uri)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    try:
        conn.request("HEAD", "/emulator/health")
        r = conn.getresponse()
        assert (r.status, r.read()) == (200, b"")
        assert int(r.headers["content-length"]) > 0
        conn.request("GET", "/emulator/health")  # the same connection
        assert json.loads(conn.getresponse().read())["ready"]
    finally:
        conn.close()


def test_heartbeat_timeout_follows_the_test_clock(clocked):
    c = AMPS.Client("beating")
    c.set_heartbeat(5)  # the client beats every 5 s of real time: none in this test
    lost = threading.Event()
    c.set_disconnect_handler(lambda client: lost.set())
    c.connect(clocked.uri)
    c.logon(5000)
    c.flush(5000)
    clocked.http("/emulator/clock/advance?seconds=9", "POST")
    c.flush(5000)  # still connected: 9 s of silence is under the 2 x 5 s grace
    assert not lost.is_set()
    clocked.http("/emulator/clock/advance?seconds=12", "POST")
    assert lost.wait(10)  # the server dropped the silent client on its own clock
    c.close()


def test_reset_one_queue_or_one_client(srv, connect):
    pub, worker, bystander = connect("pub"), connect("worker"), connect("bystander")
    lost = {n: threading.Event() for n in ("worker", "bystander")}
    worker.set_disconnect_handler(lambda client: lost["worker"].set())
    bystander.set_disconnect_handler(lambda client: lost["bystander"].set())
    leased = Collector()
    worker.subscribe(leased, "work")
    for i in range(3):
        pub.publish("work", json.dumps({"job": i}))
    pub.flush(5000)
    leased.wait_for(1)
    out = srv.http("/emulator/reset?queue=work", "POST")
    assert (out["messages_removed"], out["clients_disconnected"]) == (3, 1)
    assert lost["worker"].wait(10) and not lost["bystander"].is_set()
    assert srv.http("/emulator/queues/work")["depth"] == 0
    pub.publish("work", json.dumps({"job": "after"}))  # the queue goes on from here
    pub.flush(5000)
    assert [m["data"] for m in srv.http("/emulator/queues/work")["messages"]] == [{"job": "after"}]
    assert srv.http("/emulator/reset?client=bystander", "POST")["clients_disconnected"] == 1
    assert lost["bystander"].wait(10)
    srv.http("/emulator/reset?client=bystander", "POST", expect=404)
    srv.http("/emulator/reset?queue=nope", "POST", expect=404)
