"""``GET /metrics``: the Prometheus text exposition, read with the ``prometheus_client`` parser
(what a Prometheus server reads), whose figures are those of the Admin JSON at the same
instant (a quiet server: nothing moves between the two reads); the persisted-ack latency
histogram; replication; the same authentication and entitlements as every Admin request;
and ``/emulator/stats``, the console's history."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import pytest

from tests.integration.admin.test_admin import by_id, make_server
from tests.support.clients import clients_for, store_client
from tests.support.entitlements import ALL, serve, web_config, with_user
from tests.support.servers import until

parser = pytest.importorskip("prometheus_client.parser")


@pytest.fixture
def srv(tmp_path):
    s = make_server(tmp_path)
    yield s
    s.stop()


def families(srv, user: str | None = None) -> list:
    """``/metrics`` as the ``prometheus_client`` parser reads it."""
    req = urllib.request.Request(srv.admin_uri + "/metrics")
    if user is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:pw".encode()).decode())
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        text = r.read().decode()
    return list(parser.text_string_to_metric_families(text))


def scrape(srv, user: str | None = None) -> dict[str, dict[tuple, float]]:
    """``/metrics`` parsed: {sample name: {sorted label items: value}}."""
    out: dict[str, dict[tuple, float]] = {}
    for family in families(srv, user):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_every_family_has_its_type_and_help(srv):
    kinds = {f.name: f.type for f in families(srv)}
    assert "unknown" not in kinds.values() and all(f.documentation for f in families(srv))
    assert kinds["amps_clients"] == "gauge"
    assert kinds["amps_topic_messages_in"] == kinds["amps_messages_received"] == "counter"
    assert kinds["amps_persisted_ack_latency_seconds"] == "histogram"
    assert kinds["amps_replication_lag_seconds"] == "gauge"


def one(metrics: dict, name: str, **labels: str) -> float:
    return metrics[name][tuple(sorted(labels.items()))]


def test_the_figures_are_the_admin_json_s_at_the_same_instant(srv):
    make = clients_for(srv.uri)
    connect = next(make)
    try:
        pub = store_client(srv.uri, "publisher")
        sub = connect("subscriber")
        sub.subscribe(lambda m: None, "orders", "/qty > 3")
        for i in range(10):
            pub.publish("orders", json.dumps({"id": i, "sym": "AB"[i % 2], "qty": i}))
        for i in range(3):
            pub.publish("work", json.dumps({"job": i}))
        pub.publish("somewhere/else", "{}")
        pub.publish_flush(5000)
        assert until(lambda: int(by_id(srv.http("/amps/instance/clients.json")["amps"]["instance"]
                                       ["clients"], "subscriber")["messages_out"]) >= 7)
        # quiet from here on: both reads see the same state
        metrics = scrape(srv)
        inst = srv.http("/amps.json")["amps"]["instance"]
        again = scrape(srv)
        del metrics["amps_uptime_seconds"], again["amps_uptime_seconds"]
        assert metrics == again  # (nothing moves: the figures are the state's)

        assert one(metrics, "amps_clients") == len(inst["clients"]) == 2
        for c in inst["clients"]:
            labels = {"client": c["id"], "connection": c["connection_name"]}
            for field in ("messages_in", "messages_out", "bytes_in", "bytes_out"):
                assert one(metrics, f"amps_client_{field}_total", **labels) == int(c[field])
            assert one(metrics, "amps_client_queued_bytes_out", **labels) \
                == int(c["queued_bytes_out"])
            assert one(metrics, "amps_client_subscriptions", **labels) \
                == int(c["subscription_count"])
        proc = by_id(inst["processors"], "all")
        assert one(metrics, "amps_messages_received_total") == int(proc["messages_received"])
        assert one(metrics, "amps_matches_found_total") == int(proc["matches_found"])
        # per topic: every publish and every live delivery counted once (the external
        # processor's; "all" adds the replay, queue and SOW processors)
        ins, outs = metrics["amps_topic_messages_in_total"], metrics["amps_topic_messages_out_total"]
        external = by_id(inst["processors"], "external")
        assert sum(ins.values()) == int(external["messages_received"])
        assert sum(outs.values()) == int(external["matches_found"])
        assert one(metrics, "amps_topic_messages_in_total", topic="orders", message_type="json") == 10
        assert one(metrics, "amps_topic_messages_out_total", topic="orders", message_type="json") == 6
        assert one(metrics, "amps_topic_messages_in_total", topic="somewhere/else",
                   message_type="json") == 1
        for t in inst["sow"]:
            labels = {"topic": t["topic"], "message_type": t["message_type"]}
            assert one(metrics, "amps_sow_records", **labels) == int(t["valid_keys"])
            for field, name in (("insert_count", "inserts"), ("update_count", "updates"),
                                ("delete_count", "deletes"), ("query_count", "queries")):
                assert one(metrics, f"amps_sow_{name}_total", **labels) == int(t[field])
        work = by_id(inst["queues"], "work!json")
        assert one(metrics, "amps_queue_depth", queue="work", message_type="json") \
            == int(work["queue_depth"]) == 3
        assert one(metrics, "amps_queue_leased", queue="work", message_type="json") \
            == int(work["backlog"])
        assert "amps_replication_connected" not in metrics  # (no destination: no samples)
        # the persisted acks of the 14 publishes
        acks = metrics["amps_persisted_ack_latency_seconds_bucket"]
        counts = [v for _, v in sorted(acks.items(), key=lambda kv: float(dict(kv[0])["le"]))]
        assert counts == sorted(counts) and counts[-1] == one(
            metrics, "amps_persisted_ack_latency_seconds_count") >= 14
        assert one(metrics, "amps_instance_info", instance="test", version=srv.server.broker
                   .server_version) == 1
        pub.close()
    finally:
        make.close()


def test_the_persisted_ack_latency_counts_how_long_each_ack_waited(srv):
    """Acks held back 0.6 s (a ``hold_acks`` fault) fall past the 0.5 s bucket; the sum
    grows by at least their wait."""
    pub = store_client(srv.uri, "held-pub")
    try:
        pub.publish("orders", json.dumps({"id": 0}))
        pub.publish_flush(5000)
        before = scrape(srv)
        req = urllib.request.Request(srv.admin_uri + "/emulator/faults", method="POST",
                                     data=json.dumps({"kind": "hold_acks", "seconds": 0.6}).encode())
        urllib.request.urlopen(req, timeout=10).close()
        for i in range(1, 6):
            pub.publish("orders", json.dumps({"id": i}))
        pub.publish_flush(10000)  # released when the fault ends
        after = scrape(srv)

        def slow(m: dict) -> float:
            return one(m, "amps_persisted_ack_latency_seconds_count") - one(
                m, "amps_persisted_ack_latency_seconds_bucket", le="0.5")

        assert slow(after) - slow(before) >= 5  # the five publishes (and the flush)
        waited = one(after, "amps_persisted_ack_latency_seconds_sum") - one(
            before, "amps_persisted_ack_latency_seconds_sum")
        assert waited >= 5 * 0.5
    finally:
        pub.close()


def test_replication_figures_follow_the_link(pair):
    a, _b = pair

    def node() -> dict:
        return a.http("/amps/instance/replication.json")["amps"]["instance"]["replication"][0]

    m = scrape(a)
    assert one(m, "amps_replication_connected", destination="B") == 1
    assert one(m, "amps_replication_sync", destination="B") == 1
    a.http("/amps/administrator/replication/B/downgrade")
    assert one(scrape(a), "amps_replication_sync", destination="B") == 0
    assert node()["replication_type"] == "async"
    a.http("/emulator/replication/B/cut", "POST")
    assert until(lambda: one(scrape(a), "amps_replication_connected", destination="B") == 0)
    pub = store_client(a.uri, "repl-pub")
    try:
        for i in range(3):
            pub.publish("orders", json.dumps({"id": i}))
        pub.publish_flush(5000)  # (async now: the acks do not wait for B)
        assert until(lambda: one(scrape(a), "amps_replication_lag_seconds", destination="B") >= 1)
        lag, n = one(scrape(a), "amps_replication_lag_seconds", destination="B"), node()
        assert int(n["seconds_behind"]) in (int(lag), int(lag) + 1)  # (read a moment later)
        assert one(scrape(a), "amps_replication_messages_out_total", destination="B") \
            == int(n["messages_out"])
        a.http("/emulator/replication/B/restore", "POST")
        assert until(lambda: one(scrape(a), "amps_replication_lag_seconds", destination="B") == 0)
        assert one(scrape(a), "amps_replication_connected", destination="B") == 1
    finally:
        pub.close()


# -- security -----------------------------------------------------------------------------
USERS = {
    "viewer": {"password": "pw", "topic": [ALL],
               "admin": [{"topic": ".*", "read": True, "write": False}]},
    "scraper": {"password": "pw", "topic": [ALL],
                "admin": [{"topic": "^/metrics$", "read": True, "write": False}]},
    "no-metrics": {"password": "pw", "topic": [ALL],
                   "admin": [{"topic": "^/amps", "read": True, "write": False}]},
}


@pytest.fixture
def secured(tmp_path):
    xml = web_config(tmp_path, USERS).replace(
        "<Transports>", "<Admin><InetAddr>127.0.0.1:0</InetAddr></Admin><Transports>")
    srv = serve(tmp_path, xml)
    yield srv
    srv.stop()


def status_of(srv, path: str, user: str | None) -> int:
    req = urllib.request.Request(srv.admin_uri + path)
    if user is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:pw".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.parametrize("user, path, status", [
    (None, "/metrics", 401),
    ("nobody", "/metrics", 401),
    ("viewer", "/metrics", 200),
    ("scraper", "/metrics", 200),
    ("scraper", "/amps.json", 403),  # what it is entitled to is /metrics alone
    ("no-metrics", "/metrics", 403),
    ("no-metrics", "/amps.json", 200),
    ("viewer", "/metrics/x", 404),
])
def test_metrics_are_secured_as_every_admin_request(secured, user, path, status):
    assert status_of(secured, path, user) == status


def test_a_scraper_reads_the_figures_with_its_credentials(secured):
    c = store_client(with_user(secured.uri, "viewer", "pw"), "app")
    try:
        m = scrape(secured, "scraper")
        assert one(m, "amps_clients") == 1
        assert ("client", "app") in next(iter(m["amps_client_messages_in_total"]))
    finally:
        c.close()


# -- the console's history ----------------------------------------------------------------
def test_the_history_has_a_sample_from_the_start_and_rates_per_topic(srv):
    first = srv.http("/emulator/stats")
    assert len(first["t"]) >= 1 and first["started"] == first["t"][0]
    assert first["messages_in"][0] == 0 and first["interval"] == 1.0
    pub = store_client(srv.uri, "history-pub")
    try:
        for i in range(20):
            pub.publish("orders", json.dumps({"id": i}))
        pub.publish("work", json.dumps({"job": 1}))
        pub.publish_flush(5000)
        stats = until(lambda: (s := srv.http("/emulator/stats?top=1"))["topics_in"] and s)
        assert list(stats["topics_in"]) == ["orders"]  # the busiest one
        assert sum(stats["topics_in"]["orders"]) > 0
        assert len(stats["topics_in"]["orders"]) == len(stats["t"])
        assert until(lambda: 1 in srv.http("/emulator/stats")["queue_depth"]["work"])
        assert until(lambda: any(v is not None for v in srv.http("/emulator/stats")["ack_mean_ms"]))
        assert srv.http("/emulator/stats?seconds=x", expect=400)["error"]
    finally:
        pub.close()
