"""Two emulators connected over the replication link (issue 20), driven by the official
Python client: A replicates asynchronously to B. A message published to A reaches B's
subscribers and B's SOW, with the same bookmark on both; a publish made while B is down
arrives once B is back (resync)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import AMPS
import pytest

from amps_emulator.config import loads_config
from tests.support.clients import Collector
from tests.support.procserver import free_port
from tests.support.servers import ServerThread


def node_xml(name: str, data: Path, *, listen: int | None = None, dest: tuple[str, int] | None = None) -> str:
    repl_transport = "" if listen is None else (
        f"<Transport><Name>amps-replication</Name><Type>amps-replication</Type>"
        f"<InetAddr>127.0.0.1:{listen}</InetAddr></Transport>")
    replication = "" if dest is None else f"""<Replication><Destination>
        <Name>{dest[0]}</Name><Group>{dest[0]}</Group><SyncType>async</SyncType>
        <Topic><Name>.*</Name><MessageType>json</MessageType>
          <ExcludeValidation>replicate</ExcludeValidation></Topic>
        <Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:{dest[1]}</InetAddr>
          <ReconnectTimeout>0.05</ReconnectTimeout></Transport>
      </Destination></Replication>"""
    return f"""<AMPSConfig>
  <Name>{name}</Name>
  <Transports>
    <Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <MessageType>json</MessageType><Protocol>amps</Protocol></Transport>
    {repl_transport}
  </Transports>
  <TransactionLog><JournalDirectory>{data}/journal</JournalDirectory>
    <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
  <SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{data}/sow/%n.sow</FileName></Topic></SOW>
  {replication}
</AMPSConfig>"""


class Pair:
    def __init__(self, tmp_path: Path) -> None:
        self.b_port = free_port()
        self.b_xml = node_xml("B", tmp_path / "b", listen=self.b_port)
        self.a = ServerThread(loads_config(node_xml("A", tmp_path / "a", dest=("B", self.b_port)), "a.xml"))
        self.b: ServerThread | None = None
        self.clients: list[AMPS.Client] = []

    def start_b(self) -> ServerThread:
        self.b = ServerThread(loads_config(self.b_xml, "b.xml")).start()
        return self.b

    def client(self, srv: ServerThread, name: str) -> AMPS.Client:
        c = AMPS.Client(name)
        c.connect(srv.uri)
        c.logon(5000)
        self.clients.append(c)
        return c

    def close(self) -> None:
        for c in self.clients:
            c.close()
        if self.b is not None:
            self.b.stop()
        self.a.stop()


@pytest.fixture
def pair(tmp_path):
    p = Pair(tmp_path)
    p.start_b()
    p.a.start()
    yield p
    p.close()


def bookmarks(client: AMPS.Client, topic: str, count: int) -> list[tuple[str, dict]]:
    """(bookmark, message) of the first ``count`` messages of ``topic`` in the journal."""
    got = Collector(lambda m: (m.get_bookmark(), json.loads(m.get_data())))
    client.bookmark_subscribe(got, topic, AMPS.Client.Bookmarks.EPOCH)
    items = got.wait_for(count)
    assert len(items) >= count, items
    return items[:count]


def sow(client: AMPS.Client, topic: str) -> dict[int, dict]:
    out = {}
    for m in client.sow(topic):
        if m.get_command() == "sow":
            doc = json.loads(m.get_data())
            out[doc["id"]] = doc
    return out


def test_publish_to_a_reaches_b_with_the_same_bookmark(pair):
    assert pair.b is not None
    sub = pair.client(pair.b, "sub-b")
    live = Collector(lambda m: json.loads(m.get_data()))
    sub.subscribe(live, "orders")
    pub = pair.client(pair.a, "pub-a")
    pub.publish("orders", json.dumps({"id": 1, "qty": 10}))
    pub.publish("orders", json.dumps({"id": 2, "qty": 20}))
    pub.publish("orders", json.dumps({"id": 1, "qty": 11}))
    assert live.wait_for(3) == [{"id": 1, "qty": 10}, {"id": 2, "qty": 20}, {"id": 1, "qty": 11}]
    assert sow(sub, "orders") == {1: {"id": 1, "qty": 11}, 2: {"id": 2, "qty": 20}}
    on_a = bookmarks(pub, "orders", 3)
    on_b = bookmarks(sub, "orders", 3)
    assert on_a == on_b
    assert len({bm for bm, _ in on_a}) == 3


def test_publish_while_b_is_down_arrives_after_restart(pair):
    assert pair.b is not None
    sub = pair.client(pair.b, "sub-b")
    got = Collector(lambda m: json.loads(m.get_data()))
    sub.subscribe(got, "orders")
    pub = pair.client(pair.a, "pub-a")
    pub.publish("orders", json.dumps({"id": 1, "qty": 1}))
    assert got.wait_for(1) == [{"id": 1, "qty": 1}]
    sub.close()
    pair.clients.remove(sub)
    pair.b.stop()
    pair.b = None
    pub.publish("orders", json.dumps({"id": 2, "qty": 2}))
    pub.publish("orders", json.dumps({"id": 1, "qty": 3}))
    b = pair.start_b()
    sub = pair.client(b, "sub-b2")
    on_b = bookmarks(sub, "orders", 3)
    assert [m for _, m in on_b] == [{"id": 1, "qty": 1}, {"id": 2, "qty": 2}, {"id": 1, "qty": 3}]
    assert on_b == bookmarks(pub, "orders", 3)
    assert sow(sub, "orders") == {1: {"id": 1, "qty": 3}, 2: {"id": 2, "qty": 2}}


def logon_ack(port: int, name: str) -> dict:
    """The header of the logon ack a client named ``name`` gets (a plain socket)."""
    from amps_emulator.protocol.codec import split_frame

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        h = json.dumps({"c": "logon", "cid": "l", "client_name": name, "a": "processed"}).encode()
        sock.sendall(len(h).to_bytes(4, "big") + h)
        buf = b""
        while True:
            while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
                n = int.from_bytes(buf[:4], "big")
                header, _ = split_frame(buf[4:4 + n])
                buf = buf[4 + n:]
                if header.get("cid") == "l":
                    return header
            chunk = sock.recv(65536)
            assert chunk, "closed before the logon ack"
            buf += chunk


def test_logon_ack_on_b_counts_what_came_by_replication(pair):
    """A publish store failing over to B resends only what B does not hold: B's logon ack
    ``s`` for the publisher's name is the last sequence that arrived by replication."""
    assert pair.b is not None
    pub = AMPS.Client("store-pub")
    pub.set_publish_store(AMPS.MemoryPublishStore())
    pub.connect(pair.a.uri)
    pub.logon(5000)
    pair.clients.append(pub)
    for i in range(1, 4):
        pub.publish("orders", json.dumps({"id": i}))
    pub.publish_flush(5000)
    sub = pair.client(pair.b, "sub-b")
    on_b = bookmarks(sub, "orders", 3)
    assert [m for _, m in on_b] == [{"id": 1}, {"id": 2}, {"id": 3}]
    pub.close()
    pair.clients.remove(pub)
    on_a = logon_ack(pair.a.port, "store-pub")
    on_b_ack = logon_ack(pair.b.port, "store-pub")
    assert on_a.get("status") == on_b_ack.get("status") == "success", (on_a, on_b_ack)
    assert int(on_a["s"]) > 0 and on_b_ack["s"] == on_a["s"]
    assert on_b_ack["bookmark"] == on_a["bookmark"] == on_b[-1][0]


def test_a_client_on_the_replication_port_is_logged_and_closed(pair, caplog):
    """Only emulators replicate with emulators: an AMPS logon on the replication port gets one
    log line and a close, and the link from A keeps working."""
    assert pair.b is not None
    with socket.create_connection(("127.0.0.1", pair.b_port), timeout=10) as sock:
        h = json.dumps({"c": "logon", "cid": "l", "client_name": "intruder"}).encode()
        sock.sendall(len(h).to_bytes(4, "big") + h)
        assert sock.recv(65536) == b""  # closed without an answer
    assert any("not an emulator replication peer" in r.getMessage() for r in caplog.records)
    sub = pair.client(pair.b, "sub-b")
    got = Collector(lambda m: json.loads(m.get_data()))
    sub.subscribe(got, "orders")
    pair.client(pair.a, "pub-a").publish("orders", json.dumps({"id": 7}))
    assert got.wait_for(1) == [{"id": 7}]


def test_sow_delete_on_a_removes_the_record_on_b(pair):
    assert pair.b is not None
    sub = pair.client(pair.b, "sub-b")
    live = Collector(lambda m: json.loads(m.get_data()))
    sub.subscribe(live, "orders")
    pub = pair.client(pair.a, "pub-a")
    pub.publish("orders", json.dumps({"id": 1}))
    pub.publish("orders", json.dumps({"id": 2}))
    assert live.wait_for(2) == [{"id": 1}, {"id": 2}]
    pub.sow_delete("orders", "/id = 2", 5000)
    pub.publish("orders", json.dumps({"id": 3}))  # records arrive in log order: after the delete
    assert live.wait_for(3)[2] == {"id": 3}
    assert sow(sub, "orders") == {1: {"id": 1}, 3: {"id": 3}}
