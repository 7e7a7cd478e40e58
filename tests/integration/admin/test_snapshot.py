"""Snapshot and restore of the whole state through ``/emulator/snapshot``, observed through
the official client: SOW, queue contents and a bookmark replay show exactly the snapshot's
state after a restore."""

from __future__ import annotations

import io
import json
import tarfile
import threading
import urllib.error
import urllib.request

import AMPS
import pytest

from amps_emulator.config import loads_config
from tests.integration.admin.test_admin import EXTRA, make_server
from tests.support.clients import Collector, clients_for
from tests.support.servers import ServerThread, config_xml


def request(srv, path: str, method: str = "GET", data: bytes | None = None
            ) -> tuple[int, str, bytes]:
    req = urllib.request.Request(srv.admin_uri + path, method=method, data=data)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers.get("content-type", ""), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("content-type", ""), exc.read()


@pytest.fixture
def srv(tmp_path):
    s = make_server(tmp_path)
    yield s
    s.stop()


def replay(client, topic: str) -> list[dict]:
    """Every message of ``topic`` in the journal, in order: a bookmark replay from EPOCH up to
    a marker this call publishes (everything before it has arrived when it does)."""
    got = Collector(lambda m: json.loads(m.get_data()))
    client.bookmark_subscribe(got, topic, AMPS.Client.Bookmarks.EPOCH)
    client.publish(topic, json.dumps({"marker": True}))
    assert got.wait_until(lambda items: any("marker" in i for i in items))
    return [i for i in got.items if "marker" not in i]


def sow(client, topic: str) -> dict[int, dict]:
    out = {}
    for m in client.sow(topic):
        if m.get_command() == "sow":
            doc = json.loads(m.get_data())
            out[doc["id"]] = doc
    return out


@pytest.mark.parametrize("gzip", [False, True])
def test_snapshot_round_trip(srv, gzip):
    make = clients_for(srv.uri)
    connect = next(make)
    pub = connect("pub")
    for i in range(5):
        pub.publish("orders", json.dumps({"id": i, "sym": "A", "qty": i}))
    pub.publish("work", json.dumps({"job": 1}))
    pub.publish("work", json.dumps({"job": 2}))
    pub.publish("events", json.dumps({"e": 1}))
    pub.publish("events", json.dumps({"e": 2}))
    pub.flush(5000)
    before = sow(pub, "orders")

    status, ctype, archive = request(srv, "/emulator/snapshot" + ("?gzip=1" if gzip else ""))
    assert status == 200 and ctype == ("application/gzip" if gzip else "application/x-tar")
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
        names = tar.getnames()
    assert "manifest.json" in names and any(n.startswith("journal/") for n in names)
    assert any(n.startswith("sow/") for n in names)

    # more state after the snapshot: new and changed records, a delete, a queue message, an event
    for i in range(5, 8):
        pub.publish("orders", json.dumps({"id": i, "sym": "B", "qty": i}))
    pub.publish("orders", json.dumps({"id": 0, "sym": "A", "qty": 100}))
    pub.sow_delete("orders", "/id = 1")
    pub.publish("work", json.dumps({"job": 3}))
    pub.publish("events", json.dumps({"e": 3}))
    pub.flush(5000)
    assert len(sow(pub, "orders")) == 7

    lost = threading.Event()
    pub.set_disconnect_handler(lambda client: lost.set())
    status, _, body = request(srv, "/emulator/snapshot", "POST", archive)
    assert status == 200, body
    out = json.loads(body)
    assert out["restored"] and out["clients_disconnected"] == 1
    assert out["sow"]["orders"] == 5 and out["queues"]["work"] == 2
    assert lost.wait(10)

    c = connect("after")
    assert sow(c, "orders") == before
    assert [m["data"] for m in srv.http("/emulator/queues/work")["messages"]] \
        == [{"job": 1}, {"job": 2}]
    worker = Collector(lambda m: json.loads(m.get_data()))
    c.subscribe(worker, "work", options="max_backlog=2")
    assert worker.wait_for(2) == [{"job": 1}, {"job": 2}]
    assert replay(c, "events") == [{"e": 1}, {"e": 2}]
    # the restored state goes on: publishes get bookmarks after the snapshot's
    c.publish("orders", json.dumps({"id": 9, "sym": "C", "qty": 9}))
    c.flush(5000)
    assert sorted(sow(c, "orders")) == [0, 1, 2, 3, 4, 9]
    assert srv.http("/emulator/sow/totals")["count"] >= 1  # the view was rebuilt over it


def test_bad_snapshots_are_400_and_change_nothing(srv):
    pub = next(clients_for(srv.uri))("pub")
    pub.publish("orders", json.dumps({"id": 1, "sym": "A", "qty": 1}))
    pub.flush(5000)
    status, _, body = request(srv, "/emulator/snapshot", "POST", b"not a tar")
    assert status == 400 and "tar" in json.loads(body)["error"]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("journal/x")
        tar.addfile(info, io.BytesIO(b""))
    status, _, body = request(srv, "/emulator/snapshot", "POST", buf.getvalue())
    assert status == 400 and "manifest" in json.loads(body)["error"]
    status, _, body = request(srv, "/emulator/snapshot", "POST", b"")
    assert status == 400
    assert request(srv, "/emulator/snapshot", "DELETE")[0] == 405
    assert srv.http("/emulator/sow/orders")["count"] == 1
    assert pub.get_name() == "pub"  # not disconnected


def test_memory_mode_snapshot_is_409(tmp_path):
    xml = config_xml(tmp_path, extra=EXTRA.format(d=tmp_path))
    s = ServerThread(loads_config(xml, "admin.xml"), memory=True).start()
    try:
        status, _, body = request(s, "/emulator/snapshot")
        assert status == 409 and "--memory" in json.loads(body)["error"]
        status, _, body = request(s, "/emulator/snapshot", "POST", b"x")
        assert status == 409 and "--memory" in json.loads(body)["error"]
    finally:
        s.stop()


def test_a_snapshot_restores_into_another_server_of_the_same_config(srv, tmp_path_factory):
    pub = next(clients_for(srv.uri))("pub")
    for i in range(3):
        pub.publish("orders", json.dumps({"id": i, "sym": "A", "qty": i}))
    pub.publish("work", json.dumps({"job": 7}))
    pub.publish("events", json.dumps({"e": 7}))
    pub.flush(5000)
    status, _, archive = request(srv, "/emulator/snapshot?gzip=1")
    assert status == 200
    other = make_server(tmp_path_factory.mktemp("other"))
    try:
        status, _, body = request(other, "/emulator/snapshot", "POST", archive)
        assert status == 200, body
        c = next(clients_for(other.uri))("reader")
        assert sow(c, "orders") == sow(pub, "orders")
        assert [m["data"] for m in other.http("/emulator/queues/work")["messages"]] \
            == [{"job": 7}]
        assert replay(c, "events") == [{"e": 7}]
    finally:
        other.stop()


QUEUE_VIEW = EXTRA.replace("</SOW>", """
  <View><Name>jobs</Name><UnderlyingTopic>work</UnderlyingTopic><MessageType>json</MessageType>
    <Projection><Field>/kind</Field><Field>COUNT(/job) AS /n</Field></Projection>
    <Grouping><Field>/kind</Field></Grouping></View>
</SOW>""")


def test_a_view_over_a_queue_is_rebuilt_by_a_restore(tmp_path):
    """The restored server's views read the restored queues too: the view over ``work``
    holds what the snapshot's queue holds, and follows it after."""
    xml = config_xml(tmp_path, extra=QUEUE_VIEW.format(d=tmp_path))
    s = ServerThread(loads_config(xml, "admin.xml")).start()
    try:
        make = clients_for(s.uri)
        connect = next(make)
        pub = connect("pub")
        for job in (1, 2):
            pub.publish("work", json.dumps({"job": job, "kind": "k"}))
        pub.flush(5000)
        status, _, archive = request(s, "/emulator/snapshot")
        assert status == 200
        pub.publish("work", json.dumps({"job": 3, "kind": "k"}))
        pub.flush(5000)
        status, _, body = request(s, "/emulator/snapshot", "POST", archive)
        assert status == 200, body
        c = connect("after")
        assert [json.loads(m.get_data()) for m in c.sow("jobs") if m.get_command() == "sow"] \
            == [{"kind": "k", "n": 2}]
        c.publish("work", json.dumps({"job": 4, "kind": "k"}))
        c.flush(5000)
        assert [json.loads(m.get_data()) for m in c.sow("jobs") if m.get_command() == "sow"] \
            == [{"kind": "k", "n": 3}]
    finally:
        s.stop()
