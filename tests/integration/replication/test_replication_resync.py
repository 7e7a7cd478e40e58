"""What arrives late by replication (issue 20, docs/design/replication.md 2.1 and 2.5), driven by the
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
from amps_emulator.server.core.clock import TestClock
from tests.support.clients import Collector
from tests.support.procserver import free_port
from tests.support.replication_nodes import Dest, connect, node_xml
from tests.support.servers import ServerThread


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


def bootstrap_xml(port: int, data_types: str = "sow,txlog") -> str:
    return (f"<Bootstrap><Topic><Name>.*</Name><MessageType>json</MessageType></Topic>"
            f"<DataType>{data_types}</DataType><Transport><Type>amps-replication</Type>"
            f"<InetAddr>127.0.0.1:{port}</InetAddr><ReconnectTimeout>0.05</ReconnectTimeout>"
            f"</Transport></Bootstrap>")


@pytest.mark.parametrize("bootstrap", [True, False], ids=["bootstrap", "replication-only"])
def test_bootstrap_refills_a_wiped_instance_with_its_own_messages_and_old_sow_records(tmp_path, nodes,
                                                                                      bootstrap):
    """A and B replicate both ways. B loses its disk. Restarted empty, replication alone gives
    it back only what A's log holds and did not get from B (loop prevention); ``Bootstrap``
    from A also brings back B's own messages and the SOW records A keeps whose messages its
    log no longer holds."""
    a_port, b_port = free_port(), free_port()
    journal = "<JournalSize>64KB</JournalSize><RetentionSize>128KB</RetentionSize>"
    a = nodes.start("A", node_xml("A", tmp_path / "a", listen=a_port, journal=journal,
                                  dests=[Dest(group="B", port=b_port)]))

    def b_xml(extra: str = "") -> str:
        return node_xml("B", tmp_path / "b", listen=b_port, dests=[Dest(group="A", port=a_port)], extra=extra)

    nodes.start("B", b_xml())
    pub_a, pub_b = nodes.client("A", "pub-a"), nodes.client("B", "pub-b")
    for i in range(3):
        pub_a.publish("orders", json.dumps({"id": i, "from": "A"}))
        pub_b.publish("orders", json.dumps({"id": 10 + i, "from": "B"}))
    assert len(bookmarked(pub_a, "orders", 6)) == 6  # B's are in A's log before the bulk
    pad = "x" * 4000
    for i in range(100):  # pushes the orders out of A's retained log once B acknowledged them
        pub_a.publish("bulk", json.dumps({"id": i, "pad": pad}))
    assert len(bookmarked(pub_a, "bulk", 100)) == 100
    pub_a.publish("orders", json.dumps({"id": 99, "from": "A"}))
    pub_b.publish("orders", json.dumps({"id": 13, "from": "B"}))  # stays in A's log
    assert len(bookmarked(pub_b, "bulk", 100)) == 100
    before = {m["id"]: bm for bm, m in bookmarked(pub_a, "orders", 8)}
    assert sorted(before) == [0, 1, 2, 10, 11, 12, 13, 99]
    last = a.call(lambda: a.server.broker.txlog.journal.last_position)
    assert until(a, lambda: a.server.replication.senders["B"].acked_through >= last)
    assert a.call(lambda: a.server.broker.txlog.enforce_retention()).removed
    in_log = [m["id"] for _, m in bookmarked(pub_a, "orders", 2)]
    assert 0 not in in_log and 10 not in in_log and 99 in in_log and 13 in in_log
    assert sow_ids(pub_a) == [0, 1, 2, 10, 11, 12, 13, 99]  # A's SOW has what its log lost

    nodes.clients.remove(pub_b)
    pub_b.close()
    nodes.stop("B")
    import shutil

    shutil.rmtree(tmp_path / "b")
    nodes.start("B", b_xml(bootstrap_xml(a_port) if bootstrap else ""))
    sub = nodes.client("B", "sub-b")
    # a marker published on A after B is back arrives after whatever A sends B first
    pub_a.publish("orders", json.dumps({"id": 100, "from": "A"}))
    got = Collector(lambda m: (m.get_bookmark(), json.loads(m.get_data())["id"]))
    sub.bookmark_subscribe(got, "orders", AMPS.Client.Bookmarks.EPOCH)
    assert got.wait_until(lambda items: any(i == 100 for _, i in items))
    ids = sorted(i for _, i in got.items)
    if bootstrap:  # 0-2 and 10-12 from A's SOW, 13 (B's own) and 99 from A's log
        assert ids == [0, 1, 2, 10, 11, 12, 13, 99, 100]
        assert all(before[i] == bm for bm, i in got.items if i in before)  # the same bookmarks
        assert sow_ids(sub) == [0, 1, 2, 10, 11, 12, 13, 99, 100]
    else:  # only what A's log holds and did not come from B
        assert ids == [99, 100]
        assert sow_ids(sub) == [99, 100]
