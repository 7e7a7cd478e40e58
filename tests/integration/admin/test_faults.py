"""Fault injection through ``/emulator/faults``, each kind observed through the official client;
time-dependent kinds on the test clock (no sleeps)."""

from __future__ import annotations

import json
import threading

import AMPS
import pytest

from amps_emulator.config import loads_config
from amps_emulator.server.core.clock import TestClock
from tests.integration.admin.test_admin import EXTRA, make_server
from tests.integration.admin.test_snapshot import request
from tests.support.clients import Collector, clients_for, ha_client, store_client
from tests.support.servers import ServerThread, config_xml, until


def fault(srv, doc, expect: int = 200):
    status, _, body = request(srv, "/emulator/faults", "POST", json.dumps(doc).encode())
    assert status == expect, body
    return json.loads(body)


def faults(srv) -> list[dict]:
    return srv.http("/emulator/faults")["faults"]


def clear(srv) -> dict:
    status, _, body = request(srv, "/emulator/faults", "DELETE")
    assert status == 200, body
    return json.loads(body)


@pytest.fixture
def srv(tmp_path):
    s = make_server(tmp_path)
    yield s
    clear(s)
    s.stop()


@pytest.fixture
def clocked(tmp_path):
    s = make_server(tmp_path, timebase=TestClock())
    yield s
    clear(s)
    s.stop()


def advance(srv, seconds: float) -> None:
    srv.http(f"/emulator/clock/advance?seconds={seconds}", "POST")


def waiting_output(srv, name: str) -> int:
    """Bytes of output the server holds for the connection of client ``name``."""
    def read() -> int:
        conn = srv.server.broker.by_name.get(name)
        return 0 if conn is None or conn.closed else conn.transport.get_write_buffer_size()
    return srv.call(read)


@pytest.mark.parametrize("doc, words", [
    ([1, 2], "JSON object"),
    ({"kind": "explode"}, "unknown fault kind"),
    ({"kind": "delay", "client": "x"}, "'ms' is required"),
    ({"kind": "delay", "client": "x", "ms": "10"}, "must be a number"),
    ({"kind": "delay", "client": "x", "ms": -1}, ">= 0"),
    ({"kind": "drop", "client": "x", "every": 0}, "> 0"),
    ({"kind": "drop", "client": ""}, "must not be empty"),
    ({"kind": "hold_acks", "seconds": True}, "must be a number"),
    ({"kind": "refuse", "transport": "json-tcp", "port": 1}, "unknown field(s) port"),
    ({"kind": "disk_full", "bytes": 0}, "unknown field(s) bytes"),
])
def test_bad_fault_documents_are_400_with_the_reason(srv, doc, words):
    status, _, body = request(srv, "/emulator/faults", "POST", json.dumps(doc).encode())
    assert status == 400 and words in json.loads(body)["error"]
    assert faults(srv) == []


def test_faults_api_edges(srv):
    status, _, body = request(srv, "/emulator/faults", "POST", b"{nope")
    assert status == 400 and "not JSON" in json.loads(body)["error"]
    assert "no client" in fault(srv, {"kind": "drop", "client": "ghost"}, 404)["error"]
    assert "no transport" in fault(srv, {"kind": "refuse", "transport": "nope"}, 404)["error"]
    held = fault(srv, {"kind": "hold_acks", "seconds": 30})
    assert fault(srv, {"kind": "hold_acks", "seconds": 5}, 409)["error"]
    assert [f["id"] for f in faults(srv)] == [held["id"]]
    assert request(srv, f"/emulator/faults/{held['id']}", "DELETE")[0] == 200
    assert request(srv, f"/emulator/faults/{held['id']}", "DELETE")[0] == 404
    assert faults(srv) == []
    assert request(srv, "/emulator/faults", "PUT", b"{}")[0] == 405


def test_drop_an_ha_client_reconnects_and_resubscribes(clocked):
    lost = threading.Semaphore(0)

    def on_state(connected: bool) -> None:  # the client passes True/False
        if not connected:
            lost.release()

    def conn_id():
        """The server's connection of ``ha-app`` (None between connections)."""
        def read():
            conn = clocked.server.broker.by_name.get("ha-app")
            return None if conn is None or conn.closed else conn.conn_id
        return clocked.call(read)

    app = ha_client("ha-app", clocked.uri)
    app.add_connection_state_listener(on_state)
    app.connect_and_logon()
    got = Collector(lambda m: json.loads(m.get_data()))
    app.subscribe(got, "events")
    pub = next(clients_for(clocked.uri))("pub")
    first = conn_id()

    out = fault(clocked, {"kind": "drop", "client": "ha-app", "every": 10})
    assert out["drops"] == 1
    assert lost.acquire(timeout=10)  # the client saw the disconnect
    assert until(lambda: conn_id() not in (None, first))  # and came back by itself
    second = conn_id()
    assert until(lambda: "ha-app" in clocked.http("/emulator/subscriptions")["clients"])
    pub.publish("events", json.dumps({"n": 1}))
    assert got.wait_for(1) == [{"n": 1}]  # resubscribed

    advance(clocked, 10)  # dropped again on the server clock
    assert lost.acquire(timeout=10)
    assert until(lambda: conn_id() not in (None, second))
    assert faults(clocked)[0]["drops"] == 2
    assert clear(clocked) == {"cleared": 1}
    third = conn_id()
    advance(clocked, 30)  # no more drops
    assert faults(clocked) == [] and conn_id() == third
    assert until(lambda: "ha-app" in clocked.http("/emulator/subscriptions")["clients"])
    pub.publish("events", json.dumps({"n": 2}))
    assert got.wait_for(2)[-1] == {"n": 2}
    app.disconnect()


def test_delay_holds_output_to_one_client_on_the_server_clock(clocked):
    connect = next(clients_for(clocked.uri))
    slow, fast, pub = connect("slow"), connect("fast"), connect("pub")
    slow_got = Collector(lambda m: json.loads(m.get_data()))
    fast_got = Collector(lambda m: json.loads(m.get_data()))
    slow.subscribe(slow_got, "ticks")
    fast.subscribe(fast_got, "ticks")
    assert fault(clocked, {"kind": "delay", "client": "slow", "ms": 500})["connections"] == 1
    for i in range(3):
        pub.publish("ticks", json.dumps({"i": i}))
    assert len(fast_got.wait_for(3)) == 3
    assert waiting_output(clocked, "slow") > 0 and slow_got.items == []
    advance(clocked, 0.4)
    assert waiting_output(clocked, "slow") > 0 and slow_got.items == []
    advance(clocked, 0.1)
    assert slow_got.wait_for(3) == [{"i": 0}, {"i": 1}, {"i": 2}]  # in order
    pub.publish("ticks", json.dumps({"i": 3}))
    assert len(fast_got.wait_for(4)) == 4
    clear(clocked)  # what waits goes out now, and nothing is delayed after
    assert slow_got.wait_for(4)[-1] == {"i": 3}
    pub.publish("ticks", json.dumps({"i": 4}))
    assert slow_got.wait_for(5)[-1] == {"i": 4}


def test_delay_follows_the_client_name_across_a_reconnect(clocked):
    connect = next(clients_for(clocked.uri))
    first = connect("slow")
    fault(clocked, {"kind": "delay", "client": "slow", "ms": 500})
    first.disconnect()
    again = AMPS.Client("slow")
    again.connect(clocked.uri)
    done = threading.Event()
    logon = threading.Thread(target=lambda: (again.logon(10000), done.set()), daemon=True)
    logon.start()
    # the new connection's logon ack waits on the server clock
    assert until(lambda: waiting_output(clocked, "slow") > 0)
    assert not done.is_set()
    advance(clocked, 0.5)
    assert done.wait(10)
    assert faults(clocked)[0]["connections"] == 2
    clear(clocked)
    got = Collector(lambda m: json.loads(m.get_data()))
    again.subscribe(got, "ticks")
    connect("pub").publish("ticks", json.dumps({"i": 1}))
    assert got.wait_for(1) == [{"i": 1}]
    again.disconnect()


def test_refuse_new_connections_on_a_transport(srv):
    connect = next(clients_for(srv.uri))
    old = connect("old")
    fault(srv, {"kind": "refuse", "transport": "json-tcp"})
    with pytest.raises(AMPS.AMPSException):
        connect("refused")
    old.publish("orders", json.dumps({"id": 1, "sym": "A", "qty": 1}))
    old.flush(5000)  # open connections go on
    assert faults(srv)[0]["kind"] == "refuse"
    clear(srv)
    assert until(lambda: srv.http("/emulator/health")["transports"][0]["enabled"])
    assert connect("welcome").get_name() == "welcome"


def round_trip(client) -> None:
    """A query answered on ``client``'s connection: output the server wrote for it before
    the answer (a persisted ack) has arrived once this returns (``flush`` would wait for the
    publish store instead)."""
    list(client.sow("orders"))


def test_hold_acks_withholds_persisted_acks_then_releases_them(clocked):
    pub = store_client(clocked.uri, "held-pub")
    journal = clocked.server.txlog.journal

    def durable() -> bool:
        return clocked.call(lambda: journal.durable_position >= journal.last_position)

    fault(clocked, {"kind": "hold_acks", "seconds": 5})
    for i in range(3):
        pub.publish("orders", json.dumps({"id": i, "sym": "A", "qty": i}))
    round_trip(pub)
    assert until(durable)
    round_trip(pub)  # a turn after the sync: an ack released then would be here by now
    assert pub.get_unpersisted_count() == 3
    advance(clocked, 4.9)
    round_trip(pub)
    assert pub.get_unpersisted_count() == 3
    advance(clocked, 0.1)
    assert until(lambda: pub.get_unpersisted_count() == 0)
    assert faults(clocked) == []  # over by itself

    fault(clocked, {"kind": "hold_acks", "seconds": 60})
    pub.publish("orders", json.dumps({"id": 9, "sym": "A", "qty": 9}))
    round_trip(pub)
    assert until(durable)
    round_trip(pub)
    assert pub.get_unpersisted_count() == 1
    clear(clocked)  # released at once
    assert until(lambda: pub.get_unpersisted_count() == 0)


def test_disk_full_fails_publishes_to_the_failed_write_handler(srv):
    failed: list[tuple[int, str]] = []
    lock = threading.Condition()

    def on_failed(message, reason):
        with lock:
            failed.append((json.loads(message.get_data())["id"], str(reason)))
            lock.notify_all()

    pub = store_client(srv.uri, "disk-pub", on_failed)
    pub.publish("orders", json.dumps({"id": 0, "sym": "A", "qty": 0}))
    pub.publish_flush(5000)
    fault(srv, {"kind": "disk_full"})
    for i in range(1, 4):
        pub.publish("orders", json.dumps({"id": i, "sym": "A", "qty": i}))
    pub.publish_flush(10000)  # every publish acked: as stored or as failed
    with lock:
        assert sorted(i for i, _ in failed) == [1, 2, 3]
        assert all("tx store failure" in r for _, r in failed)
    assert pub.get_unpersisted_count() == 0
    clear(srv)  # the disk has room again: writes are taken at once
    pub.publish("orders", json.dumps({"id": 4, "sym": "A", "qty": 4}))
    pub.publish_flush(5000)
    assert len(failed) == 3
    ids = [r["data"]["id"] for r in srv.http("/emulator/journal?topic=orders")["records"]]
    assert ids == [0, 4]

    # a reset opens a new journal: the full disk is still full
    fault(srv, {"kind": "disk_full"})
    srv.http("/emulator/reset", "POST")
    pub = store_client(srv.uri, "disk-pub-2", on_failed)
    pub.publish("orders", json.dumps({"id": 5, "sym": "A", "qty": 5}))
    pub.publish_flush(10000)
    assert failed[-1][0] == 5 and len(failed) == 4
    clear(srv)
    pub.publish("orders", json.dumps({"id": 6, "sym": "A", "qty": 6}))
    pub.publish_flush(5000)
    assert len(failed) == 4
    assert [r["data"]["id"] for r in srv.http("/emulator/journal?topic=orders")["records"]] == [6]


def test_faults_that_need_files_are_409_in_memory_mode(tmp_path):
    xml = config_xml(tmp_path, extra=EXTRA.format(d=tmp_path))
    s = ServerThread(loads_config(xml, "admin.xml"), memory=True).start()
    try:
        assert "memory" in fault(s, {"kind": "disk_full"}, 409)["error"]
    finally:
        s.stop()


def test_the_console_shows_active_faults(srv):
    assert "no faults injected" in srv.http("/")
    fault(srv, {"kind": "hold_acks", "seconds": 30})
    fault(srv, {"kind": "refuse", "transport": "json-tcp"})
    page = srv.http("/")
    assert "Active faults" in page and "hold_acks" in page and "seconds=30" in page
    assert "transport=json-tcp" in page and "no faults injected" not in page
    clear(srv)
    assert "no faults injected" in srv.http("/")


def test_the_console_shows_every_fault_kind(clocked):
    # each kind the console lists while active, with what identifies it
    factory = clients_for(clocked.uri)
    connect = next(factory)
    connect("console-app")
    try:
        fault(clocked, {"kind": "delay", "client": "console-app", "ms": 250})
        fault(clocked, {"kind": "drop", "client": "console-app", "every": 60})
        fault(clocked, {"kind": "hold_acks", "seconds": 30})
        fault(clocked, {"kind": "refuse", "transport": "json-tcp"})
        fault(clocked, {"kind": "disk_full"})
        page = clocked.http("/")
        for kind in ("delay", "drop", "hold_acks", "refuse", "disk_full"):
            assert kind in page, kind
        assert "client=console-app" in page and "transport=json-tcp" in page
        assert "no faults injected" not in page
        assert clear(clocked) == {"cleared": 5}
        assert "no faults injected" in clocked.http("/")
    finally:
        factory.close()
