"""What arrives late by replication (issue 20, replication.md 2.1 and 2.5), driven by the
official Python client: a SOW record's expiration counts from its origin, not from its arrival;
a reconnect sends only what the destination lacks; journals a destination has not acknowledged
stay; a passive destination replicates over the connection its peer makes; ``Bootstrap`` fills
an empty instance."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import AMPS
import pytest

from amps_emulator.config import loads_config
from amps_emulator.server.clock import TestClock
from tests.harness import ServerThread
from tests.integration.conftest import Collector
from tests.integration.replication_nodes import Dest, connect, node_xml
from tests.procserver import free_port


class Nodes:
    def __init__(self) -> None:
        self.servers: dict[str, ServerThread] = {}
        self.clients: list[AMPS.Client] = []

    def start(self, name: str, xml: str, **kwargs) -> ServerThread:
        srv = self.servers[name] = ServerThread(loads_config(xml, f"{name}.xml"), **kwargs).start()
        return srv

    def stop(self, name: str) -> None:
        self.servers.pop(name).stop()

    def client(self, name: str, client_name: str) -> AMPS.Client:
        c = connect(self.servers[name].uri, client_name)
        self.clients.append(c)
        return c

    def close(self) -> None:
        for c in self.clients:
            try:
                c.close()
            except AMPS.AMPSException:
                pass
        for s in self.servers.values():
            s.stop()


@pytest.fixture
def nodes() -> Iterator[Nodes]:
    n = Nodes()
    yield n
    n.close()


def sow_ids(client: AMPS.Client, topic: str = "orders") -> list:
    return sorted(json.loads(m.get_data())["id"] for m in client.sow(topic) if m.get_command() == "sow")


def test_a_replicated_record_expires_when_it_would_have_at_its_origin(tmp_path, nodes):
    """Published on A with a 10 s expiration while B is down; B receives it 8 s later (by A's
    and B's clocks) and drops it 10 s after the publish, not 10 s after its arrival."""
    t0 = time.time()
    clock_a, clock_b = TestClock(start=t0), TestClock(start=t0 + 8)
    b_port = free_port()
    sow = ("<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>"
           "<Durability>transient</Durability><Expiration>enabled</Expiration></Topic>")
    a = nodes.start("A", node_xml("A", tmp_path / "a", listen=None, sow=sow,
                                  dests=[Dest(group="B", port=b_port, exclude="replicate")]),
                    timebase=clock_a)
    pub = nodes.client("A", "pub")
    pub.publish("orders", json.dumps({"id": 1}), expiration=10)
    pub.publish("orders", json.dumps({"id": 2}), expiration=100)
    assert sow_ids(pub) == [1, 2]
    a.call(lambda: clock_a.advance(8))
    assert sow_ids(pub) == [1, 2]
    b = nodes.start("B", node_xml("B", tmp_path / "b", listen=b_port, sow=sow), timebase=clock_b)
    sub = nodes.client("B", "sub")
    got = Collector(lambda m: json.loads(m.get_data())["id"])
    sub.subscribe(got, "orders")
    a.call(lambda: clock_a.advance(1))  # A's connector retries now (on A's clock)
    assert got.wait_for(2) == [1, 2]
    assert sow_ids(sub) == [1, 2]
    b.call(lambda: clock_b.advance(1.5))  # 9.5 s after the publish: still there
    assert sow_ids(sub) == [1, 2]
    b.call(lambda: clock_b.advance(1))  # 10.5 s after the publish (2.5 s after arrival)
    assert sow_ids(sub) == [2]
    a.call(lambda: clock_a.advance(1.5))
    assert sow_ids(pub) == [2]


def until(srv: ServerThread, fn, timeout: float = 10.0):
    """Poll ``fn`` on the server's loop until it returns something true (or time is up)."""
    deadline = time.monotonic() + timeout
    while True:
        got = srv.call(fn)
        if got or time.monotonic() > deadline:
            return got
        srv.call(lambda: None)  # one more loop pass between polls


def bookmarked(client: AMPS.Client, topic: str, count: int) -> list[tuple[str, dict]]:
    got = Collector(lambda m: (m.get_bookmark(), json.loads(m.get_data())))
    cid = client.bookmark_subscribe(got, topic, AMPS.Client.Bookmarks.EPOCH)
    got.wait_for(count)
    client.unsubscribe(cid)
    return list(got.items)


def pair(tmp_path: Path, nodes: Nodes, *, journal: str = "", start_b: bool = True) -> tuple[int, str]:
    b_port = free_port()
    b_xml = node_xml("B", tmp_path / "b", listen=b_port)
    if start_b:
        nodes.start("B", b_xml)
    nodes.start("A", node_xml("A", tmp_path / "a", listen=None, journal=journal,
                              dests=[Dest(group="B", port=b_port, exclude="replicate")]))
    return b_port, b_xml


def test_resync_after_an_outage_sends_only_what_b_lacks(tmp_path, nodes):
    _, b_xml = pair(tmp_path, nodes)
    pub = nodes.client("A", "pub")
    for i in range(5):
        pub.publish("orders", json.dumps({"id": i}))
    assert len(bookmarked(nodes.client("B", "sub"), "orders", 5)) == 5
    a = nodes.servers["A"]
    assert a.call(lambda: a.server.replication.senders["B"].messages_out) == 5
    nodes.stop("B")
    for i in range(5, 8):
        pub.publish("orders", json.dumps({"id": i}))
    nodes.start("B", b_xml)
    on_b = bookmarked(nodes.client("B", "sub2"), "orders", 8)
    assert [m["id"] for _, m in on_b] == list(range(8))
    assert on_b == bookmarked(pub, "orders", 8)
    # the new link sent the 3 records B lacked, nothing B already held
    assert until(a, lambda: a.server.replication.senders["B"].messages_out) == 3
    b = nodes.servers["B"]
    assert b.call(lambda: (b.server.replication.receivers["A"].applied,
                           b.server.replication.receivers["A"].duplicates)) == (3, 0)


def segments(srv: ServerThread) -> list[str]:
    return sorted(p.name for p in Path(srv.server.config.transaction_log.journal_directory).iterdir()
                  if p.name.endswith(".journal"))


def test_journals_stay_until_the_destination_acknowledged_them(tmp_path, nodes):
    """Small journal files and a RetentionSize far below what A writes while B is down: A
    keeps every file B has not acknowledged, B gets everything when it comes, then the
    acknowledged files go."""
    _, b_xml = pair(tmp_path, nodes, start_b=False,
                    journal="<JournalSize>64KB</JournalSize><RetentionSize>128KB</RetentionSize>")
    a = nodes.servers["A"]
    pub = nodes.client("A", "pub")
    pad = "x" * 4000
    for i in range(100):
        pub.publish("orders", json.dumps({"id": i, "pad": pad}))
    pub.publish_flush(10000)
    files = a.call(lambda: segments(a))
    assert len(files) >= 5, files
    result = a.call(lambda: a.server.broker.txlog.enforce_retention())
    assert result.removed == () and result.blocked_by_pin is not None
    assert a.call(lambda: segments(a)) == files
    nodes.start("B", b_xml)
    on_b = bookmarked(nodes.client("B", "sub"), "orders", 100)
    assert [m["id"] for _, m in on_b] == list(range(100))
    last = a.call(lambda: a.server.broker.txlog.journal.last_position)
    assert until(a, lambda: a.server.replication.senders["B"].acked_through >= last)
    result = a.call(lambda: a.server.broker.txlog.enforce_retention())
    assert result.removed, result
    assert len(a.call(lambda: segments(a))) < len(files)


def test_a_passive_destination_replicates_over_the_connection_its_peer_makes(tmp_path, nodes):
    """A's Destination B has no InetAddr: A waits for B to connect (B's Destination A names
    A's replication port) and sends its records back over that connection, including what
    was published on A before B came."""
    a_port = free_port()
    nodes.start("A", node_xml("A", tmp_path / "a", listen=a_port, dests=[Dest(group="B", port=None)]))
    pub_a = nodes.client("A", "pub-a")
    pub_a.publish("orders", json.dumps({"id": 1, "on": "A"}))
    nodes.start("B", node_xml("B", tmp_path / "b", listen=None, dests=[Dest(group="A", port=a_port)]))
    pub_b = nodes.client("B", "pub-b")
    pub_b.publish("orders", json.dumps({"id": 2, "on": "B"}))
    pub_a.publish("orders", json.dumps({"id": 3, "on": "A"}))
    on_b = bookmarked(pub_b, "orders", 3)
    on_a = bookmarked(pub_a, "orders", 3)
    assert sorted(m["id"] for _, m in on_b) == sorted(m["id"] for _, m in on_a) == [1, 2, 3]
    assert dict(on_a) == dict(on_b)  # the same bookmark for each message on both
    a, b = nodes.servers["A"], nodes.servers["B"]
    assert a.call(lambda: dict(a.server.replication.connected)) == {"B": "B"}
    assert b.call(lambda: dict(b.server.replication.connected)) == {"A": "A"}
    assert a.call(lambda: a.server.replication.senders["B"].messages_out) == 2
