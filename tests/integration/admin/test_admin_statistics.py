"""The Admin statistics of the Monitoring Reference that carry figures beyond the live
counters, through HTTP with the official Python client making the traffic: the ``sow``,
``queue`` and ``bookmark`` processors, the history of the statistics (``t0``/``t1`` time
ranges, CSV), and the figures that once read 0 (``queue_max_latency``, ``throttle_count``, a
queue subscription's ``backlog``)."""

from __future__ import annotations

import json
import socket

import AMPS
import pytest

from amps_emulator.config import loads_config
from tests.support.clients import Collector, clients_for
from tests.support.raw import RawClient
from tests.support.servers import ServerThread, config_xml, until

EXTRA = """<Admin><InetAddr>127.0.0.1:0</InetAddr><Interval>1s</Interval></Admin>
<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
    <Durability>transient</Durability></Topic>
  <Queue><Name>work</Name><MessageType>json</MessageType><LeasePeriod>30s</LeasePeriod>
    <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog></Queue>
</SOW>"""


@pytest.fixture
def srv(tmp_path):
    s = ServerThread(loads_config(config_xml(tmp_path, extra=EXTRA), "stats.xml")).start()
    yield s
    s.stop()


@pytest.fixture
def connect(srv):
    yield from clients_for(srv.uri)


def sample(srv) -> None:
    """A sample now (as the Interval timer takes one): rates and the history move on."""
    sampler = srv.server.admin.sampler

    def take() -> None:
        sampler.sample()
        sampler.record()

    srv.call(take)


def processors(srv) -> dict[str, dict]:
    got = srv.http("/amps/instance/processors.json")["amps"]["instance"]["processors"]
    return {p["id"]: p for p in got}


def test_sow_queue_and_bookmark_processors_count_their_work(srv, connect):
    pub = connect("publisher")
    for i in range(10):
        pub.publish("orders", json.dumps({"id": i, "qty": i}))
    for i in range(3):
        pub.publish("work", json.dumps({"job": i}))
    pub.flush(5000)
    reader = connect("reader")
    # one query returning 5 records
    assert len([m for m in reader.sow("orders", "/qty >= 5") if m.get_command() == "sow"]) == 5
    # three queue messages delivered (and acknowledged)
    jobs = Collector()
    reader.subscribe(lambda m: (jobs(m), m.ack()), "work")
    jobs.wait_for(3)
    # a replay of the transaction log: the 10 orders
    replayed = Collector()
    reader.bookmark_subscribe(replayed, "orders", AMPS.Client.Bookmarks.EPOCH)
    replayed.wait_for(10)
    sample(srv)
    p = processors(srv)
    assert {"all", "bookmark", "external", "queue", "sow"} <= set(p)
    sow, queue, bookmark, external = p["sow"], p["queue"], p["bookmark"], p["external"]
    assert (sow["messages_received"], sow["matches_found"]) == ("1", "5")
    assert int(sow["matches_found_bytes"]) > 5 * len('{"id":5,"qty":5}')
    assert (queue["messages_received"], queue["matches_found"]) == ("3", "3")
    assert int(queue["messages_received_bytes"]) == 3 * len(json.dumps({"job": 0}))
    assert int(queue["matches_found_bytes"]) > int(queue["messages_received_bytes"])
    assert bookmark["matches_found"] == "10"
    assert int(bookmark["messages_received"]) >= 10  # the records the replay read
    assert int(external["messages_received_bytes"]) >= 10 * len('{"id": 0, "qty": 0}')
    for field in ("messages_received", "matches_found", "messages_received_bytes",
                  "matches_found_bytes"):
        assert int(p["all"][field]) == sum(int(p[x][field])
                                           for x in ("bookmark", "external", "queue", "sow"))
    # rates are interval averages over the sample just taken, last_active moved with it
    assert float(sow["matches_found_per_sec"]) > 0 and float(queue["matches_found_per_sec"]) > 0
    assert float(bookmark["matches_found_bytes_per_sec"]) > 0
    assert int(sow["last_active"]) < 10_000
    # a leaf of a new processor, as CSV
    assert srv.http("/amps/instance/processors/sow/matches_found.csv").split(",")[1] == "5\n"


def _timestamps(srv) -> list[str]:
    text = srv.http("/amps/instance/timestamp.csv?t0=19700101T0")
    return [line.split(",")[0] for line in text.splitlines()]


def test_time_ranges_answer_from_the_history_of_each_statistic(srv, connect):
    pub = connect("publisher")
    counts = []
    for batch in range(3):  # a sample after each batch of 2 new records
        for i in range(2):
            pub.publish("orders", json.dumps({"id": batch * 2 + i}))
        pub.flush(5000)
        sample(srv)
        counts.append(str((batch + 1) * 2))
    stamps = _timestamps(srv)
    assert len(stamps) >= 3 and stamps == sorted(stamps)
    assert all(t.endswith("Z") and t[8] == "T" for t in stamps)
    leaf = "/amps/instance/sow/orders!json/insert_count"
    series = [line.split(",") for line in srv.http(f"{leaf}.csv?t0={stamps[0]}").splitlines()]
    assert [t for t, _ in series] == stamps
    ours = [v for t, v in series if t in stamps[-3:]]
    assert ours[-3:] == counts  # the value at each sample
    # both ends included; t1 alone from the first sample; t0 == t1: that sample alone
    a, b = stamps[-3], stamps[-2]
    assert [v for _, v in (ln.split(",") for ln in
                           srv.http(f"{leaf}.csv?t0={a}&t1={b}").splitlines())] == counts[:2]
    assert srv.http(f"{leaf}.csv?t1={a}").splitlines()[-1] == f"{a},{counts[0]}"
    assert srv.http(f"{leaf}.csv?t0={b}&t1={b}") == f"{b},{counts[1]}\n"
    # without an extension, plain text lines; in JSON, the samples under the leaf's name
    assert srv.http(f"{leaf}?t0={b}&t1={b}") == f"{b},{counts[1]}\n"
    doc = srv.http(f"{leaf}.json?t0={a}&t1={b}")
    (topic,) = doc["amps"]["instance"]["sow"]
    assert topic["id"] == "orders!json"
    assert topic["insert_count"] == [{"timestamp": a, "value": counts[0]},
                                     {"timestamp": b, "value": counts[1]}]
    xml = srv.http(f"{leaf}.xml?t0={a}&t1={b}")
    assert xml.startswith("<amps><instance><sow><topic id='orders!json'><insert_count><item>"
                          f"<timestamp>{a}</timestamp><value>{counts[0]}</value></item>")
    # a node at one sample: as it was then
    node = srv.http(f"/amps/instance/sow/orders!json.json?t0={a}&t1={a}")
    assert node["amps"]["instance"]["sow"][0]["insert_count"] == counts[0]
    whole = srv.http(f"/amps/instance.json?t0={b}&t1={b}")["amps"]["instance"]
    assert whole["timestamp"] == b and any(c["client_name"] == "publisher"
                                           for c in whole["clients"])
    # what a time range refuses
    srv.http(f"/amps/instance/sow.json?t0={a}&t1={b}", expect=400)  # a range on a node
    srv.http(f"{leaf}.csv?t0=yesterday", expect=400)
    srv.http(f"/amps/instance/sow.json?t0=20000101T0&t1=20000101T0", expect=404)
    srv.http("/amps/instance/nothing.csv?t0=20000101T0", expect=404)
    # short forms of the time: 20000101T0 is midnight, and every sample is after it
    assert len(srv.http(f"{leaf}.csv?t0=20000101T0").splitlines()) == len(series)
    stats = srv.http("/amps/instance/statistics.json")["amps"]["instance"]["statistics"]
    assert int(stats["queries"]) >= 10 and int(stats["total_samples"]) >= 3


def _send_buffer_max() -> int:
    try:
        return int(open("/proc/sys/net/ipv4/tcp_wmem").read().split()[2])
    except (OSError, IndexError, ValueError):
        return 4 << 20


def test_queue_max_latency_is_the_age_of_what_a_slow_client_has_not_taken(srv):
    slow = RawClient(srv.port)
    slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    pub = RawClient(srv.port)
    try:
        slow.logon("slow-reader")
        slow.send({"c": "subscribe", "t": "flood", "cid": "s", "sub_id": "s", "a": "processed"})
        assert slow.recv_frame(5)[0]["status"] == "success"
        pub.logon("flooder")
        body = b'{"pad":"' + b"x" * 10_000 + b'"}'
        # more than the kernel's send buffer takes (what it holds is transport_tx_queue):
        # 4 MB past it, far below any limit of the server
        for _ in range((_send_buffer_max() + (4 << 20)) // len(body)):
            pub.send({"c": "p", "t": "flood"}, body)
        pub.send({"c": "flush", "cid": "f", "a": "completed"})

        def slow_client() -> dict:
            clients = srv.http("/amps/instance/clients.json")["amps"]["instance"]["clients"]
            return next(c for c in clients if c["client_name"] == "slow-reader")

        def waited() -> dict | None:
            c = slow_client()
            return c if float(c["queue_max_latency"]) > 0.05 else None

        seen = until(waited)
        assert seen, slow_client()
        assert int(seen["queued_bytes_out"]) > 100_000
        # the Prometheus exporter reads it as a number, in seconds
        assert float(seen["queue_max_latency"]) < 60
    finally:
        slow.close()
        pub.close()


def test_throttle_count_counts_connections_paused_for_the_next_pass(srv):
    pub = RawClient(srv.port)
    try:
        pub.logon("burst")
        frame = json.dumps({"c": "p", "t": "burst"}, separators=(",", ":")).encode()
        body = b'{"n":1}'
        one = (len(frame) + len(body)).to_bytes(4, "big") + frame + body
        pub.send_raw(one * 5000)  # more frames in one read than a pass takes
        pub.send({"c": "flush", "cid": "f", "a": "completed"})
        while (got := pub.recv_frame(10)) is not None and got[0].get("cid") != "f":
            pass
        p = processors(srv)
        assert int(p["all"]["throttle_count"]) >= 1
        assert p["external"]["throttle_count"] == p["all"]["throttle_count"]
        assert int(p["external"]["messages_received"]) >= 5000
    finally:
        pub.close()


def test_a_queue_subscriptions_backlog_is_what_it_holds_leased(srv, connect):
    pub = connect("publisher")
    for i in range(5):
        pub.publish("work", json.dumps({"job": i}))
    pub.flush(5000)
    worker = connect("worker")
    held = Collector()
    worker.execute_async(AMPS.Command("subscribe").set_topic("work").set_sub_id("w")
                         .set_options("max_backlog=3"),
                         lambda m: held(m) if m.get_command() == "p" else None)
    held.wait_for(3)  # and never acknowledged

    def backlog() -> str:
        subs = srv.http("/amps/instance/subscriptions.json")["amps"]["instance"]["subscriptions"]
        return next(s["backlog"] for s in subs if s["client_id"] == "worker")

    assert until(lambda: backlog() == "3"), backlog()
