"""HA failover with the official Python HAClient (issue 20, docs/design/replication.md 3): two emulator
processes replicating ``sync`` both ways; the primary is killed with SIGKILL while clients run.

* a publisher (publish store) loses nothing and duplicates nothing: every message is on both
  instances exactly once, with the same bookmarks, once the killed one is back;
* a bookmark subscriber (bookmark store) fails over with no gap and no duplicate;
* the logon ack's ``s`` on the survivor makes the store resend only what it lacks;
* while the peer is down the survivor's persisted acks are held (sync), and go out when it
  returns or when the survivor's destination is downgraded.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path

import AMPS
import pytest

from amps_emulator.pair import free_port, pair_config
from tests.support.clients import Collector
from tests.support.paths import ROOT
from tests.support.procserver import ProcServer


class ProcPair:
    """Instances A and B as child processes (file journals), each with an Admin port."""

    def __init__(self, tmp_path: Path, sync_type: str = "sync") -> None:
        self.names = ("A", "B")
        repl = free_port(), free_port()
        self.admin_ports = free_port(), free_port()
        self.procs: list[ProcServer] = []
        for i, name in enumerate(self.names):
            d = tmp_path / name.lower()
            d.mkdir()
            cfg = d / "amps.xml"
            cfg.write_text(pair_config(name, self.names[1 - i], repl_port=repl[i], peer_repl_port=repl[1 - i],
                                       data_dir=d / "data", sync_type=sync_type,
                                       admin_addr=f"127.0.0.1:{self.admin_ports[i]}"))
            self.procs.append(ProcServer(d / "data", cfg))

    @property
    def a(self) -> ProcServer:
        return self.procs[0]

    @property
    def b(self) -> ProcServer:
        return self.procs[1]

    def admin(self, name: str, path: str) -> dict:
        port = self.admin_ports[self.names.index(name)]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return json.loads(r.read())

    def link(self, name: str) -> dict:
        peer = self.names[1 - self.names.index(name)]
        return self.admin(name, f"/emulator/replication/{peer}")

    def wait_link(self, name: str, pred, timeout: float = 20.0) -> dict:
        """``name``'s destination once ``pred`` holds (each look is one Admin request)."""
        deadline = time.monotonic() + timeout
        while not pred(st := self.link(name)):
            assert time.monotonic() < deadline, st
            self.admin(name, "/emulator/health")
        return st

    def start(self) -> ProcPair:
        for p in self.procs:
            p.start()
        for n in self.names:
            self.wait_link(n, lambda s: s["is_connected"])
        return self

    def stop(self) -> None:
        for p in self.procs:
            p.kill()


@pytest.fixture
def procs(tmp_path):
    pair = ProcPair(tmp_path).start()
    yield pair
    pair.stop()


def ha_client(name: str, uris: list[str]) -> AMPS.HAClient:
    c = AMPS.HAClient(name)
    chooser = AMPS.DefaultServerChooser()
    for u in uris:
        chooser.add(u)
    c.set_server_chooser(chooser)
    c.set_reconnect_delay_strategy(AMPS.FixedDelayStrategy(50, 30000))
    return c


def journal(uri: str, topic: str, count: int, name: str) -> list[tuple[str, int]]:
    """(bookmark, id) of everything in ``topic``'s journal on ``uri`` (at least ``count``)."""
    c = AMPS.Client(name)
    c.connect(uri)
    c.logon(5000)
    try:
        got = Collector(lambda m: (m.get_bookmark(), json.loads(m.get_data())["id"]))
        c.bookmark_subscribe(got, topic, AMPS.Client.Bookmarks.EPOCH)
        items = got.wait_for(count, timeout=20)
        c.publish_flush(1000)  # one round trip: nothing more was on its way
        return list(got.items) if len(got.items) >= len(items) else items
    finally:
        c.close()


@pytest.mark.parametrize("store", ["memory", "file"])
def test_haclient_publisher_across_kill_of_primary_loses_and_duplicates_nothing(procs, store, tmp_path):
    pub = ha_client("ha-pub", [procs.a.uri, procs.b.uri])
    pub.set_publish_store(AMPS.MemoryPublishStore() if store == "memory"
                          else AMPS.PublishStore(str(tmp_path / "ha-pub.store")))
    pub.connect_and_logon()
    n = 400
    try:
        for i in range(1, n + 1):
            if i == n // 2:
                procs.a.kill()  # SIGKILL of the primary while publishing
            pub.publish("orders", json.dumps({"id": i}))
        # the survivor (B) holds the acks: its sync destination A is down
        with pytest.raises(AMPS.TimedOutException):
            pub.publish_flush(500)
        assert procs.link("B")["is_connected"] is False
        procs.a.start()  # A returns: B resyncs it, A acknowledges, B's acks go out
        pub.publish_flush(30000)
        assert pub.get_unpersisted_count() == 0
    finally:
        pub.close()
    on_b = journal(procs.b.uri, "orders", n, "check-b")
    on_a = journal(procs.a.uri, "orders", n, "check-a")
    assert sorted(i for _, i in on_b) == list(range(1, n + 1))  # nothing lost, nothing twice
    assert [i for _, i in on_b] == list(range(1, n + 1))  # in the publisher's order
    assert on_a == on_b  # the same bookmarks on both instances


def test_survivor_downgrade_releases_the_held_acks(procs):
    pub = ha_client("ha-pub", [procs.a.uri, procs.b.uri])
    pub.set_publish_store(AMPS.MemoryPublishStore())
    pub.connect_and_logon()
    try:
        pub.publish("orders", json.dumps({"id": 1}))
        pub.publish_flush(10000)
        procs.a.kill()
        pub.publish("orders", json.dumps({"id": 2}))  # fails over to B
        with pytest.raises(AMPS.TimedOutException):
            pub.publish_flush(500)
        out = procs.admin("B", "/amps/administrator/replication/A/downgrade")
        assert out["replication_type"] == "async"
        pub.publish_flush(10000)
    finally:
        pub.close()


def test_logon_ack_s_makes_the_store_resend_only_what_is_missing(procs):
    """Everything A acked is on B (sync): after A dies, the store resends nothing to B."""
    pub = ha_client("ha-pub", [procs.a.uri, procs.b.uri])
    pub.set_publish_store(AMPS.MemoryPublishStore())
    pub.connect_and_logon()
    try:
        for i in range(1, 51):
            pub.publish("orders", json.dumps({"id": i}))
        pub.publish_flush(10000)
        procs.a.kill()
        pub.publish("orders", json.dumps({"id": 51}))  # fails over: logon ack s = 50 on B
        procs.admin("B", "/amps/administrator/replication/A/downgrade")
        pub.publish_flush(10000)
        clients = procs.admin("B", "/amps/instance/clients.json")["amps"]["instance"]["clients"]
        mine = [c for c in clients if c["client_name"] == "ha-pub"]
        assert len(mine) == 1
        # logon, publish 51, the flush: none of the 50 that B already held was sent again
        assert int(mine[0]["messages_in"]) < 10, mine[0]
    finally:
        pub.close()
    on_b = journal(procs.b.uri, "orders", 51, "check-b")
    assert [i for _, i in on_b] == list(range(1, 52))


@pytest.mark.parametrize("after_persisted_ack", [False, True], ids=["at-once", "after-persisted-ack"])
def test_haclient_bookmark_subscriber_fails_over_without_gap_or_duplicate(procs, after_persisted_ack):
    """The subscriber's server is killed right after the 100th message, or once it has also
    sent its persisted ack for the subscription (which the store takes as well); either way the
    HAClient resumes on B after the last message it discarded. (The store is told with
    ``discard``, as 60East's replay sample does: ``Message.ack`` is the queue acknowledgement,
    and after a persisted ack the store then resumed from EPOCH, which delivered 1..100 again,
    about 1 run in 8 on a loaded machine when the ack came before the kill.)"""
    got: list[int] = []
    lock = threading.Condition()
    persisted = threading.Event()
    sub = ha_client("ha-sub", [procs.a.uri, procs.b.uri])
    sub.set_bookmark_store(AMPS.MemoryBookmarkStore())

    def seen_by_client(data, incoming):  # the raw frames: the subscription's persisted ack
        if incoming and b'"a":"persisted"' in bytes(data) and b'"sub_id":"s1"' in bytes(data):
            persisted.set()
        return data

    sub.set_transport_filter(seen_by_client)
    sub.connect_and_logon()

    def on_message(m: AMPS.Message) -> None:
        with lock:
            got.append(json.loads(m.get_data())["id"])
            lock.notify_all()
        sub.discard(m)  # the store's most recent bookmark moves on

    def wait_for(count: int) -> list[int]:
        deadline = time.monotonic() + 30
        with lock:
            while len(got) < count and time.monotonic() < deadline:
                lock.wait(deadline - time.monotonic())
            return list(got)

    pub = AMPS.Client("plain-pub")  # publishes to B throughout
    pub.connect(procs.b.uri)
    pub.logon(5000)
    try:
        sub.bookmark_subscribe(on_message, "orders", AMPS.Client.Bookmarks.EPOCH, sub_id="s1")
        for i in range(1, 101):
            pub.publish("orders", json.dumps({"id": i}))
        assert wait_for(100)[-1] == 100
        if after_persisted_ack:
            assert persisted.wait(30), "A sent no persisted ack for the subscription"
        procs.a.kill()  # the subscriber's server dies: it resumes on B from its store
        for i in range(101, 201):
            pub.publish("orders", json.dumps({"id": i}))
        assert wait_for(200) == list(range(1, 201))  # no gap, no duplicate, in order
    finally:
        pub.close()
        sub.close()


EXAMPLE = ROOT / "examples" / "ha-pair"


def example_pair(tmp_path: Path) -> dict[str, ProcServer]:
    """examples/ha-pair's a.xml and b.xml as two processes on this machine: the container
    addresses (0.0.0.0, the hosts a and b, /data) moved to free local ports and ``tmp_path``."""
    repl = {"a": free_port(), "b": free_port()}
    procs = {}
    for me, peer in (("a", "b"), ("b", "a")):
        d = tmp_path / me
        d.mkdir()
        xml = ((EXAMPLE / f"{me}.xml").read_text()
               .replace("0.0.0.0:8085", f"127.0.0.1:{free_port()}")
               .replace("0.0.0.0:10004", f"127.0.0.1:{repl[me]}")
               .replace(f"{peer}:10004", f"127.0.0.1:{repl[peer]}")
               .replace("/data/", f"{d}/data/"))
        cfg = d / "amps.xml"
        cfg.write_text(xml)
        procs[me.upper()] = ProcServer(d / "data", cfg)  # --listen moves the client transport
    return procs


@pytest.mark.parametrize("victim", ["A", "B"])
def test_the_example_pair_flushes_on_the_survivor_after_a_kill(tmp_path, victim):
    """The README's HAClient snippet against examples/ha-pair: once one instance is killed,
    publish_flush(5000) completes on the other, because the example's schedule downgrades the
    dead peer's sync destination (without it the survivor holds the acks, as AMPS does)."""
    procs = example_pair(tmp_path)
    for p in procs.values():
        p.start()
    client = ha_client("order-entry", [procs["A"].uri, procs["B"].uri])
    client.set_publish_store(AMPS.MemoryPublishStore())
    client.set_bookmark_store(AMPS.MemoryBookmarkStore())
    try:
        client.connect_and_logon()
        client.publish("orders", '{"id": 1}')
        client.publish_flush(10000)
        procs[victim].kill()
        client.publish("orders", '{"id": 2}')
        client.publish_flush(5000)
        assert client.get_unpersisted_count() == 0
        survivor = procs["B" if victim == "A" else "A"]
        check = AMPS.Client("check")
        check.connect(survivor.uri)
        check.logon(5000)
        assert sorted(json.loads(m.get_data())["id"] for m in check.sow("orders")
                      if m.get_command() == "sow") == [1, 2]
        check.close()
    finally:
        client.close()
        for p in procs.values():
            p.kill()
