"""Slow client offlining through the official Python client: ``MessageMemoryLimit``,
``MessageDiskLimit``, ``MessageDiskPath`` and ``ClientMaxCapacity``, and the
``on-offline-start`` / ``on-offline-stop`` actions.

A subscriber whose message handler blocks stops reading its socket; once the socket buffers
are full, what the server holds for it grows past its share of the memory limit and it is
offlined (its messages wait in a file), which runs ``on-offline-start``. When the handler
lets go, it reads everything, in order, and is back online (``on-offline-stop``). Past its
share of memory and disk together it is disconnected instead."""

from __future__ import annotations

import json
import threading

import AMPS
import pytest

from amps_emulator.config import loads_config
from amps_emulator.config.errors import ConfigError
from tests.support.clients import Collector, logged_on
from tests.support.servers import ServerThread, until

BODY = "x" * (64 << 10)
COUNT = 400  # 25 MiB: more than the socket buffers of both ends take


def report(event: str) -> str:
    data = json.dumps({"event": event, "client": "{{AMPS_CLIENT_NAME}}",
                       "connection": "{{AMPS_CONNECTION_NAME}}"})
    return (f"<Action><On><Module>amps-action-on-offline-{event}</Module></On>"
            f"<Do><Module>amps-action-do-publish-message</Module><Options><Topic>offline</Topic>"
            f"<MessageType>json</MessageType><Data>{data}</Data></Options></Do></Action>")


def config(d, disk_limit: str = "1GB", transport_extra: str = "") -> str:
    return f"""<AMPSConfig><Name>offlining</Name>
  <MessageMemoryLimit>2MB</MessageMemoryLimit>
  <MessageDiskLimit>{disk_limit}</MessageDiskLimit>
  <MessageDiskPath>{d}/offline</MessageDiskPath>
  <ClientMaxCapacity>50%</ClientMaxCapacity>
  <Transports><Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <MessageType>json</MessageType><Protocol>amps</Protocol>{transport_extra}</Transport></Transports>
  <Actions>{report("start")}{report("stop")}</Actions>
</AMPSConfig>"""


class Blocked:
    """A message handler that stops at the first message until released, then counts."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.seqs: list[int] = []
        self.done = threading.Event()

    def __call__(self, m) -> None:
        self.release.wait(60)
        self.seqs.append(int(m.get_data().split(":", 1)[0]))
        if len(self.seqs) == COUNT:
            self.done.set()


def of(events: list, client: str) -> list:
    """The events of ``client``: another client may fall behind for a moment too."""
    return [e for e in events if e["client"] == client]


def flood(publisher) -> None:
    for i in range(COUNT):
        publisher.publish("firehose", f"{i}:{BODY}")
    publisher.flush(30000)


@pytest.fixture
def srv(tmp_path):
    s = ServerThread(loads_config(config(tmp_path), "offlining.xml")).start()
    yield s
    s.stop()


def test_a_slow_client_is_offlined_then_reads_everything_and_comes_back(srv):
    watcher = logged_on(srv.uri, "watcher")
    events = Collector(lambda m: json.loads(m.get_data()))
    watcher.subscribe(events, "offline")
    slow = logged_on(srv.uri, "slow")
    handler = Blocked()
    slow.subscribe(handler, "firehose")
    fast = logged_on(srv.uri, "fast")
    got = Collector(lambda m: 1)
    fast.subscribe(got, "firehose")
    publisher = logged_on(srv.uri, "publisher")
    flood(publisher)
    assert events.wait_until(lambda items: of(items, "slow"))
    (start,) = of(events.items, "slow")
    assert start["event"] == "start" and start["connection"]
    assert got.wait_for(COUNT, timeout=30)  # the others are not held back
    conn = next(c for c in srv.server.connections if c.client_name == "slow")
    assert srv.call(conn.spool_bytes) > 0  # what it has not read waits on disk
    handler.release.set()
    assert handler.done.wait(60)
    assert handler.seqs == list(range(COUNT))  # everything, once, in order
    assert events.wait_until(lambda items: len(of(items, "slow")) == 2)
    assert of(events.items, "slow")[1] == {"event": "stop", "client": "slow",
                                           "connection": start["connection"]}
    for c in (watcher, slow, fast, publisher):
        c.close()


def test_past_its_share_of_memory_and_disk_a_slow_client_is_disconnected(tmp_path):
    # 50% of 2MB + 4MB: 3MB for one client, memory and disk together
    s = ServerThread(loads_config(config(tmp_path, disk_limit="4MB"), "offlining.xml")).start()
    try:
        watcher = logged_on(s.uri, "watcher")
        events = Collector(lambda m: json.loads(m.get_data()))
        watcher.subscribe(events, "offline")
        slow = logged_on(s.uri, "slow")
        handler = Blocked()
        slow.subscribe(handler, "firehose")
        publisher = logged_on(s.uri, "publisher")
        flood(publisher)
        assert events.wait_until(lambda items: of(items, "slow"))
        assert until(lambda: not any(c.client_name == "slow" for c in s.server.connections))
        handler.release.set()
        publisher.publish("offline", '{"event":"marker","client":"slow"}')
        assert events.wait_until(lambda items: len(of(items, "slow")) == 2)
        # gone, not back online
        assert [e["event"] for e in of(events.items, "slow")] == ["start", "marker"]
        for c in (watcher, publisher):
            c.close()
        try:
            slow.close()
        except AMPS.AMPSException:
            pass
    finally:
        s.stop()


def test_the_limits_are_read_at_the_instance_and_per_transport(tmp_path):
    c = loads_config(config(tmp_path, transport_extra="<ClientMaxCapacity>25%</ClientMaxCapacity>"),
                     "offlining.xml")
    (t,) = c.transports
    policy = t.slow_clients
    assert (policy.memory_limit, policy.disk_limit, policy.capacity) == (2 << 20, 1 << 30, 0.25)
    assert policy.disk_path.endswith("/offline") and not policy.own_pool
    c = loads_config(config(tmp_path, transport_extra="<MessageMemoryLimit>8MB</MessageMemoryLimit>"),
                     "offlining.xml")
    assert c.transports[0].slow_clients.own_pool  # a pool of its own
    assert c.warnings == ()
    with pytest.raises(ConfigError, match="percentage"):
        loads_config(config(tmp_path, transport_extra="<ClientMaxCapacity>150%</ClientMaxCapacity>"),
                     "offlining.xml")
