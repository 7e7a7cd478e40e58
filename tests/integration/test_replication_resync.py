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
