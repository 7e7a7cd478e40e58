"""Replicated queues across two emulators (issue 20, docs/design/replication.md section 4), driven by the
official Python client: A and B replicate to each other (PassThrough ``.*``).

* a distributed ``Queue``: the instance a message is published to owns it; a consumer on the
  other instance gets it only by an ownership transfer the owner grants and journals; acks
  replicate, so every message is delivered once across the pair;
* proxied transfer while the owner is down (Admin action and the action port);
* ``LocalQueue``: each instance delivers its own copy; ``GroupLocalQueue``: owned by its
  ``InitialOwner`` wherever published;
* 60East's Flink pair shape: a replicated at-most-once queue ``work-to-do`` over ``work``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import AMPS
import pytest

from amps_emulator.config import loads_config
from tests.integration.queues.test_queues import Worker
from tests.support.clients import Collector
from tests.support.procserver import free_port
from tests.support.servers import ServerThread

QUEUES = """
  <Queue><Name>jobs</Name><MessageType>json</MessageType><UnderlyingTopic>work</UnderlyingTopic>
    <MaxPerSubscriptionBacklog>5</MaxPerSubscriptionBacklog></Queue>
  <LocalQueue><Name>local-jobs</Name><MessageType>json</MessageType>
    <UnderlyingTopic>local-work</UnderlyingTopic><MaxPerSubscriptionBacklog>5</MaxPerSubscriptionBacklog></LocalQueue>
  <Queue><Name>short-jobs</Name><MessageType>json</MessageType><UnderlyingTopic>short-work</UnderlyingTopic>
    <Expiration>300ms</Expiration></Queue>
  <GroupLocalQueue><Name>group-jobs</Name><MessageType>json</MessageType>
    <UnderlyingTopic>group-work</UnderlyingTopic><InitialOwner>B</InitialOwner>
    <MaxPerSubscriptionBacklog>5</MaxPerSubscriptionBacklog></GroupLocalQueue>
"""


def node_xml(name: str, peer: str, data: Path, listen: int, peer_port: int, sync: str = "async") -> str:
    return f"""<AMPSConfig>
  <Name>{name}</Name><Group>pair</Group>
  <Admin><InetAddr>127.0.0.1:0</InetAddr></Admin>
  <Transports>
    <Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <MessageType>json</MessageType><Protocol>amps</Protocol></Transport>
    <Transport><Name>amps-replication</Name><Type>amps-replication</Type>
      <InetAddr>127.0.0.1:{listen}</InetAddr></Transport>
  </Transports>
  <TransactionLog><JournalDirectory>{data}/journal</JournalDirectory>
    <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
  <SOW>{QUEUES}</SOW>
  <Actions><Action>
    <On><Module>amps-action-on-sow-expire-message</Module>
      <Options><Topic>short-jobs</Topic><MessageType>json</MessageType></Options></On>
    <Do><Module>amps-action-do-publish-message</Module>
      <Options><Topic>dead</Topic><MessageType>json</MessageType>
        <Data>{{ "message": {{{{AMPS_DATA}}}}, "reason": "{{{{AMPS_REASON}}}}" }}</Data></Options></Do>
  </Action>
  <Action><On><Module>amps-action-on-admin</Module><Options><Path>proxy-on</Path></Options></On>
    <Do><Module>amps-action-do-enable-proxied-transfer</Module>
      <Options><Topic>jobs</Topic><MessageType>json</MessageType></Options></Do></Action>
  <Action><On><Module>amps-action-on-admin</Module><Options><Path>proxy-off</Path></Options></On>
    <Do><Module>amps-action-do-disable-proxied-transfer</Module>
      <Options><Topic>jobs</Topic><MessageType>json</MessageType></Options></Do></Action>
  <Action><On><Module>amps-action-on-admin</Module><Options><Path>proxy-local</Path></Options></On>
    <Do><Module>amps-action-do-enable-proxied-transfer</Module>
      <Options><Topic>local-jobs</Topic><MessageType>json</MessageType></Options></Do>
    <Do><Module>amps-action-do-publish-message</Module>
      <Options><Topic>after-proxy-local</Topic><MessageType>json</MessageType><Data>{{}}</Data></Options></Do>
  </Action></Actions>
  <Replication><Destination>
    <Name>{peer}</Name><Group>pair</Group><SyncType>{sync}</SyncType><PassThrough>.*</PassThrough>
    <Topic><Name>^(work|jobs|group-work|group-jobs|local-work|short-work|short-jobs|dead)$</Name>
      <MessageType>json</MessageType></Topic>
    <Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:{peer_port}</InetAddr>
      <ReconnectTimeout>0.05</ReconnectTimeout></Transport>
  </Destination></Replication>
</AMPSConfig>"""


class Pair:
    def __init__(self, tmp_path: Path) -> None:
        self.ports = {"A": free_port(), "B": free_port()}
        self.xml = {
            "A": node_xml("A", "B", tmp_path / "a", self.ports["A"], self.ports["B"]),
            "B": node_xml("B", "A", tmp_path / "b", self.ports["B"], self.ports["A"]),
        }
        self.servers: dict[str, ServerThread] = {}
        self.clients: list[AMPS.Client] = []
        self._n = 0

    def start(self, name: str) -> ServerThread:
        srv = self.servers[name] = ServerThread(loads_config(self.xml[name], f"{name}.xml")).start()
        return srv

    def stop(self, name: str) -> None:
        self.servers.pop(name).stop()

    def client(self, name: str) -> AMPS.Client:
        self._n += 1
        c = AMPS.Client(f"{name}-client-{self._n}")
        c.connect(self.servers[name].uri)
        c.logon(5000)
        self.clients.append(c)
        return c

    def linked(self, timeout: float = 10.0) -> None:
        """Both links are up (each side's destination connected to the other)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(s.call(lambda s=s: bool(s.server.replication and s.server.replication.connected))
                   for s in self.servers.values()):
                return
            time.sleep(0.02)
        raise AssertionError("the replication links did not connect")

    def queue(self, name: str, queue: str) -> dict:
        """The Admin node of ``queue`` on instance ``name``."""
        out = self.servers[name].http("/amps/instance/queues.json")
        nodes = out["amps"]["instance"]["queues"] if "amps" in out else out["queues"]
        return next(n for n in nodes if n["topic"] == queue)

    def close(self) -> None:
        for c in self.clients:
            c.close()
        for name in list(self.servers):
            self.stop(name)


@pytest.fixture
def pair(tmp_path):
    p = Pair(tmp_path)
    p.start("A")
    p.start("B")
    p.linked()
    yield p
    p.close()


def publish(c: AMPS.Client, topic: str, ids) -> None:
    for i in ids:
        c.publish(topic, json.dumps({"i": i}))
    c.publish_flush(5000)


def until(pred, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def test_a_consumer_on_b_gets_messages_a_owns_by_transfer_and_acks_replicate(pair):
    publish(pair.client("A"), "work", range(20))
    w = Worker(pair.client("B"), "jobs")
    assert w.wait(20)
    assert sorted(d["i"] for d in w.data) == list(range(20))
    # B's acks travel back: the queue is empty on both instances
    assert until(lambda: pair.queue("A", "jobs")["queue_depth"] == "0")
    assert until(lambda: pair.queue("B", "jobs")["queue_depth"] == "0")
    a, b = pair.queue("A", "jobs"), pair.queue("B", "jobs")
    assert a["transferred_out"] == "20" and b["transferred_in"] == "20"
    assert a["transferred_in"] == "0" and b["transferred_out"] == "0"
    assert not w.wait(21, timeout=0.3)  # nothing twice


def test_the_owner_delivers_to_its_own_consumer_and_never_a_transferred_message(pair):
    """A consumer on A takes what A owns; once B holds a message by transfer, A never delivers
    it, even to a consumer that arrives on A later."""
    pub = pair.client("A")
    wb = Worker(pair.client("B"), "jobs", auto=None, options="max_backlog=5")  # holds 5, acks none
    publish(pub, "work", range(8))
    assert wb.wait(5)
    assert not wb.wait(6, timeout=0.3)  # its backlog is full
    wa = Worker(pair.client("A"), "jobs")
    assert wa.wait(3)
    got_b = sorted(d["i"] for d in wb.data)
    assert sorted(got_b + [d["i"] for d in wa.data]) == list(range(8))
    assert not wa.wait(4, timeout=0.3)  # B's five stay B's
    assert pair.queue("B", "jobs")["owned"] == "5" and pair.queue("A", "jobs")["owned"] == "0"
    on_b = pair.servers["B"].http("/emulator/queues/jobs")["messages"]
    assert sorted(m["owner"] for m in on_b) == ["B"] * 5 and all(m["locally_owned"] for m in on_b)
    on_a = pair.servers["A"].http("/emulator/queues/jobs")["messages"]
    assert [m["owner"] for m in on_a] == ["B"] * 5 and not any(m["locally_owned"] for m in on_a)


def test_one_consumer_per_instance_the_union_is_every_message_exactly_once(pair):
    wa = Worker(pair.client("A"), "jobs")
    wb = Worker(pair.client("B"), "jobs")
    pa, pb = pair.client("A"), pair.client("B")
    for k in range(10):
        publish(pa, "work", range(k * 20, k * 20 + 10))
        publish(pb, "work", range(k * 20 + 10, k * 20 + 20))
    assert until(lambda: len(wa.messages) + len(wb.messages) >= 200)
    seen = [d["i"] for d in wa.data] + [d["i"] for d in wb.data]
    assert sorted(seen) == list(range(200))  # each exactly once across the pair
    assert not until(lambda: len(wa.messages) + len(wb.messages) > 200, timeout=0.3)
    assert until(lambda: pair.queue("A", "jobs")["queue_depth"] == "0")
    assert until(lambda: pair.queue("B", "jobs")["queue_depth"] == "0")


def test_messages_of_a_stopped_owner_wait_until_proxied_transfer_is_enabled(pair):
    publish(pair.client("A"), "work", range(6))
    assert until(lambda: pair.queue("B", "jobs")["queue_depth"] == "6")
    assert pair.queue("B", "jobs")["owned"] == "0"
    pair.stop("A")
    w = Worker(pair.client("B"), "jobs")
    assert not w.wait(1, timeout=0.4)  # A owns them and cannot be asked
    b = pair.servers["B"]
    ack = b.http("/amps/administrator/queues/jobs/enable_proxied_transfer")
    assert ack["proxied_transfer"] == "enabled"
    assert pair.queue("B", "jobs")["proxied_transfer"] == "enabled"
    assert w.wait(6)
    assert sorted(d["i"] for d in w.data) == list(range(6))
    assert pair.queue("B", "jobs")["transferred_in"] == "6"
    off = b.http("/amps/administrator/queues/jobs/disable_proxied_transfer")
    assert off["proxied_transfer"] == "disabled"
    # A comes back: it learns of the claims and of the acks, and delivers nothing twice
    pair.start("A")
    pair.linked()
    assert until(lambda: pair.queue("A", "jobs")["queue_depth"] == "0")
    wa = Worker(pair.client("A"), "jobs")
    assert not wa.wait(1, timeout=0.3)


def test_the_proxied_transfer_actions(pair):
    """``amps-action-do-enable-proxied-transfer`` / ``-disable-`` (run here from on-admin
    actions) switch a replicated queue; one naming a LocalQueue fails its step, so the action
    stops there; the port refuses anything but a replicated queue of its type."""
    from amps_emulator.protocol.reasons import CommandError

    b = pair.servers["B"]
    b.http("/amps/administrator/actions/proxy-on")
    assert pair.queue("B", "jobs")["proxied_transfer"] == "enabled"
    assert pair.queue("A", "jobs")["proxied_transfer"] == "disabled"  # per instance
    b.http("/amps/administrator/actions/proxy-off")
    assert pair.queue("B", "jobs")["proxied_transfer"] == "disabled"
    watcher = pair.client("B")
    after = Collector()
    watcher.subscribe(after, "after-proxy-local")
    marker = Collector()
    watcher.subscribe(marker, "marker")
    b.http("/amps/administrator/actions/proxy-local")
    watcher.publish("marker", "{}")  # the action ran before this reaches the watcher
    assert len(marker.wait_for(1)) == 1
    assert after.items == []  # the failed step ended the action
    port = b.call(lambda: b.server.queue_service.replication)
    for topic, mtype in (("local-jobs", "json"), ("work", "json"), ("jobs", "xml")):
        with pytest.raises(CommandError):
            b.call(lambda t=topic, m=mtype: port.set_proxied_transfer(t, m, True))


def test_an_expired_message_is_dead_lettered_once_by_its_owner(pair):
    """Both instances expire their copy; only the owner runs the on-sow-expire action, so the
    dead-letter topic (replicated too) holds each message once on both."""
    publish(pair.client("A"), "short-work", range(3))
    assert until(lambda: pair.queue("A", "short-jobs")["queue_depth"] == "0")
    assert until(lambda: pair.queue("B", "short-jobs")["queue_depth"] == "0")
    for name in ("A", "B"):
        got = Collector(lambda m: json.loads(m.get_data()))
        pair.client(name).bookmark_subscribe(got, "dead", AMPS.Client.Bookmarks.EPOCH)
        assert len(got.wait_for(3)) == 3
        assert not got.wait_until(lambda items: len(items) > 3, timeout=0.3)
        assert sorted(d["message"]["i"] for d in got.items) == [0, 1, 2]
        assert {d["reason"] for d in got.items} == {"time_limit"}


def test_a_local_queue_delivers_its_own_copy_on_each_instance(pair):
    wa = Worker(pair.client("A"), "local-jobs")
    wb = Worker(pair.client("B"), "local-jobs")
    publish(pair.client("A"), "local-work", range(10))
    assert wa.wait(10) and wb.wait(10)
    assert sorted(d["i"] for d in wa.data) == sorted(d["i"] for d in wb.data) == list(range(10))
    assert not wa.wait(11, timeout=0.2) and not wb.wait(11, timeout=0.2)


def test_a_group_local_queue_is_owned_by_its_initial_owner_wherever_published(pair):
    wb = Worker(pair.client("B"), "group-jobs")
    publish(pair.client("A"), "group-work", range(10))
    assert wb.wait(10)  # B owns them all: no transfer needed
    assert sorted(d["i"] for d in wb.data) == list(range(10))
    assert pair.queue("B", "group-jobs")["transferred_in"] == "0"
    assert until(lambda: pair.queue("A", "group-jobs")["queue_depth"] == "0")
    # a consumer on A gets B's messages only by transfer
    pair.clients.remove(wb.client)
    wb.client.close()
    wa = Worker(pair.client("A"), "group-jobs")
    publish(pair.client("A"), "group-work", range(10, 15))
    assert wa.wait(5)
    assert sorted(d["i"] for d in wa.data) == list(range(10, 15))
    assert pair.queue("A", "group-jobs")["transferred_in"] == "5"


def test_ownership_survives_a_restart(pair):
    """B restarted: its copy of the queue is rebuilt from its log, with the messages B was
    granted still B's and the others still A's."""
    wb = Worker(pair.client("B"), "jobs", auto=None, options="max_backlog=5")
    publish(pair.client("A"), "work", range(8))
    assert wb.wait(5)
    pair.clients.remove(wb.client)
    wb.client.close()  # no acks: the five are B's, available again
    assert until(lambda: pair.queue("B", "jobs")["backlog"] == "0")
    pair.stop("B")
    pair.start("B")
    pair.linked()
    b = pair.queue("B", "jobs")
    assert (b["queue_depth"], b["owned"]) == ("8", "5")
    assert pair.queue("A", "jobs")["owned"] == "3"
    w = Worker(pair.client("B"), "jobs", options="max_backlog=5")
    assert w.wait(8)  # its own five, then A's three by transfer
    assert sorted(d["i"] for d in w.data) == list(range(8))
    assert until(lambda: pair.queue("A", "jobs")["queue_depth"] == "0")


def flink_like_xml(name: str, peer: str, data: Path, listen: int, peer_port: int) -> str:
    """A config of the shape of 60East's Flink pair (amps-integration-apache-flink,
    ``amps-configs/amps1config.xml``), in our own words: one Group for both instances, a sync
    Destination naming the peer with PassThrough ``.*`` and the five recorded json topics, and a
    replicated at-most-once queue ``work-to-do`` over ``work``; only the ports differ."""
    topics = ("initial-publish", "with-ts", "work", "work-to-do", "checkpoint-failover")
    repl_topics = "".join(f"<Topic><MessageType>json</MessageType><Name>{t}</Name></Topic>" for t in topics)
    log_topics = "".join(f"<Topic><Name>{t}</Name><MessageType>json</MessageType></Topic>" for t in topics)
    return f"""<AMPSConfig>
  <Name>{name}</Name><Group>ReplicationExample</Group>
  <Admin><InetAddr>127.0.0.1:0</InetAddr></Admin>
  <Transports>
    <Transport><Name>any-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol>
    </Transport>
    <Transport><Name>amps-replication</Name><Type>amps-replication</Type>
      <InetAddr>127.0.0.1:{listen}</InetAddr></Transport>
  </Transports>
  <Replication><Destination>{repl_topics}
    <Name>{peer}</Name><PassThrough>.*</PassThrough><Group>ReplicationExample</Group><SyncType>sync</SyncType>
    <Transport><InetAddr>127.0.0.1:{peer_port}</InetAddr><Type>amps-replication</Type>
      <ReconnectTimeout>0.05</ReconnectTimeout></Transport>
  </Destination></Replication>
  <TransactionLog><JournalDirectory>{data}/journals</JournalDirectory>{log_topics}</TransactionLog>
  <SOW><Queue><Name>work-to-do</Name><MessageType>json</MessageType><Semantics>at-most-once</Semantics>
    <UnderlyingTopic>work</UnderlyingTopic><MaxBacklog>50000</MaxBacklog>
    <MaxPerSubscriptionBacklog>10000</MaxPerSubscriptionBacklog></Queue></SOW>
</AMPSConfig>"""


@pytest.fixture
def flink_pair(tmp_path):
    p = Pair(tmp_path)
    ports = {"AMPS-1": free_port(), "AMPS-2": free_port()}
    p.xml = {"AMPS-1": flink_like_xml("AMPS-1", "AMPS-2", tmp_path / "1", ports["AMPS-1"], ports["AMPS-2"]),
             "AMPS-2": flink_like_xml("AMPS-2", "AMPS-1", tmp_path / "2", ports["AMPS-2"], ports["AMPS-1"])}
    p.start("AMPS-1")
    p.start("AMPS-2")
    p.linked()
    yield p
    p.close()


def test_flink_pair_at_most_once_work_to_do_each_message_once(flink_pair):
    """A consumer of ``work-to-do`` on each instance, publishers on both: every message of
    ``work`` is delivered once across the pair, and leaves both copies of the queue."""
    p = flink_pair
    w1 = Worker(p.client("AMPS-1"), "work-to-do", auto=None, options="max_backlog=10000")
    w2 = Worker(p.client("AMPS-2"), "work-to-do", auto=None, options="max_backlog=10000")
    publish(p.client("AMPS-1"), "work", range(0, 300))
    publish(p.client("AMPS-2"), "work", range(300, 600))
    assert until(lambda: len(w1.messages) + len(w2.messages) >= 600)
    seen = [d["i"] for d in w1.data] + [d["i"] for d in w2.data]
    assert sorted(seen) == list(range(600))
    assert not until(lambda: len(w1.messages) + len(w2.messages) > 600, timeout=0.3)
    assert until(lambda: p.queue("AMPS-1", "work-to-do")["queue_depth"] == "0")
    assert until(lambda: p.queue("AMPS-2", "work-to-do")["queue_depth"] == "0")


def test_flink_pair_a_consumer_on_one_instance_gets_what_the_other_owns(flink_pair):
    p = flink_pair
    publish(p.client("AMPS-1"), "work", range(50))
    w2 = Worker(p.client("AMPS-2"), "work-to-do", auto=None, options="max_backlog=10000")
    assert w2.wait(50)
    assert sorted(d["i"] for d in w2.data) == list(range(50))
    assert until(lambda: p.queue("AMPS-1", "work-to-do")["queue_depth"] == "0")
    assert p.queue("AMPS-1", "work-to-do")["transferred_out"] == "50"


def http_json(port: int, path: str) -> dict:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return json.loads(r.read())


def test_kill_9_of_the_owner_then_proxied_transfer_in_subprocesses(tmp_path):
    """Two emulator processes; A, which owns the messages, is killed with SIGKILL. B's consumer
    gets nothing until B's operator enables proxied transfer; A, restarted, learns of B's claims
    and acks from its peer and delivers nothing twice."""
    from tests.support.procserver import ProcServer

    repl = {"A": free_port(), "B": free_port()}
    admin = {"A": free_port(), "B": free_port()}
    procs: dict[str, ProcServer] = {}
    for name, peer in (("A", "B"), ("B", "A")):
        d = tmp_path / name
        d.mkdir()
        xml = node_xml(name, peer, d / "data", repl[name], repl[peer]).replace(
            "<Admin><InetAddr>127.0.0.1:0</InetAddr></Admin>",
            f"<Admin><InetAddr>127.0.0.1:{admin[name]}</InetAddr></Admin>")
        (d / "amps.xml").write_text(xml)
        procs[name] = ProcServer(d / "data", d / "amps.xml")
    clients: list[AMPS.Client] = []

    def client(name: str) -> AMPS.Client:
        c = AMPS.Client(f"proc-{name}-{len(clients)}")
        c.connect(procs[name].uri)
        c.logon(5000)
        clients.append(c)
        return c

    def queue(name: str) -> dict:
        nodes = http_json(admin[name], "/amps/instance/queues.json")["amps"]["instance"]["queues"]
        return next(n for n in nodes if n["topic"] == "jobs")

    try:
        procs["A"].start()
        procs["B"].start()
        publish(client("A"), "work", range(6))
        assert until(lambda: queue("B")["queue_depth"] == "6")
        assert queue("B")["owned"] == "0"
        procs["A"].kill()
        w = Worker(client("B"), "jobs", options="max_backlog=5")
        assert not w.wait(1, timeout=0.4)
        assert http_json(admin["B"], "/amps/administrator/queues/jobs/enable_proxied_transfer") == {
            "queue": "jobs", "proxied_transfer": "enabled"}
        assert w.wait(6)
        assert sorted(d["i"] for d in w.data) == list(range(6))
        http_json(admin["B"], "/amps/administrator/queues/jobs/disable_proxied_transfer")
        procs["A"].start()
        assert until(lambda: queue("A")["queue_depth"] == "0", timeout=20)
        wa = Worker(client("A"), "jobs")
        assert not wa.wait(1, timeout=0.3)
    finally:
        for c in clients:
            c.close()
        for p in procs.values():
            p.stop()
