"""A passive ``sync`` Destination (issue 20): it replicates over the connection its peer makes,
and that connection carries the sync gate too. A's Destination B has no InetAddr; until B
connects, A's persisted acks wait; once B's link (its Destination A) is up, A sends over it,
B's acks come back on it and release A's publisher, and A's Admin fields for B count it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import AMPS
import pytest

from amps_emulator.config import loads_config
from tests.support.clients import Collector
from tests.support.procserver import free_port
from tests.support.replication_nodes import Dest, node_xml
from tests.support.servers import ServerThread


def publisher(uri: str, name: str) -> AMPS.Client:
    c = AMPS.Client(name)
    c.set_publish_store(AMPS.MemoryPublishStore())
    c.connect(uri)
    c.logon(5000)
    return c


def held(client: AMPS.Client, ms: int = 600) -> bool:
    """True when the client's publish store still waits for persisted acks after ``ms``."""
    try:
        client.publish_flush(ms)
    except AMPS.TimedOutException:
        return True
    return False


def until(srv: ServerThread, what, timeout: float = 10.0):
    """``what()`` on the server's loop once it is truthy (looked at after each loop pass)."""
    deadline = time.monotonic() + timeout
    while not (got := srv.call(what)):
        assert time.monotonic() < deadline, got
    return got


@pytest.fixture
def servers() -> Iterator[dict[str, ServerThread]]:
    running: dict[str, ServerThread] = {}
    yield running
    for srv in running.values():
        srv.stop()


def test_a_passive_sync_destination_gates_acks_over_the_connection_its_peer_makes(tmp_path, servers):
    a_port = free_port()
    servers["A"] = a = ServerThread(loads_config(node_xml(
        "A", tmp_path / "a", listen=a_port, dests=[Dest(group="B", port=None, sync=True)]), "A.xml")).start()
    pub = publisher(a.uri, "pub-a")
    try:
        pub.publish("orders", json.dumps({"id": 1}))
        assert held(pub)  # B never connected: A's sync destination holds the ack
        assert a.call(lambda: a.server.replication.describe("B")["is_connected"]) is False

        servers["B"] = b = ServerThread(loads_config(node_xml(
            "B", tmp_path / "b", listen=None, dests=[Dest(group="A", port=a_port)]), "B.xml")).start()
        pub.publish_flush(10000)  # sent over B's connection, acknowledged on it: released
        assert pub.get_unpersisted_count() == 0
        state = a.call(lambda: a.server.replication.describe("B"))
        assert (state["is_connected"], state["replication_type"], state["destination_name"]) == (True, "sync", "B")
        assert state["messages_out"] == 1 and state["bytes_out"] > 0
        assert a.call(lambda: sorted(a.server.replication.incoming)) == ["B"]

        sub = AMPS.Client("sub-b")
        sub.connect(b.uri)
        sub.logon(5000)
        got = Collector(lambda m: json.loads(m.get_data()))
        sub.subscribe(got, "orders")
        pub.publish("orders", json.dumps({"id": 2}))
        pub.publish_flush(10000)
        assert got.wait_for(1) == [{"id": 2}]
        sub.close()

        servers.pop("B").stop()  # the link goes: A's state says so and its acks wait again
        until(a, lambda: a.server.replication.describe("B")["disconnect_count"] == 1)
        assert a.call(lambda: a.server.replication.describe("B")["is_connected"]) is False
        assert a.call(lambda: sorted(a.server.replication.incoming)) == []
        pub.publish("orders", json.dumps({"id": 3}))
        assert held(pub)
    finally:
        pub.close()
