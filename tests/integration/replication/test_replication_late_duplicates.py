"""A publisher's stale copies reaching an instance after replication brought the real ones
(a paused or slow instance working off an old connection of a client that failed over): they
are duplicates of what the instance holds, refused per publisher (client name and ``s``)
whichever way the originals arrived, and the publisher's later messages, replicated from
the other instance, are taken, not dropped as duplicates of the stale copies.

The pair is sync, so a persisted ack from B means A holds the message too: with async links
P could fail over to A before B's 2..5 reached it, and those would then arrive below the
s A already holds for P."""

from __future__ import annotations

import json

import pytest

from tests.support.procserver import free_port
from tests.support.raw import RawClient
from tests.support.replication_nodes import Dest, node_xml
from tests.support.servers import ServerThread, until

from .test_replication_resync import Nodes


@pytest.fixture
def pair(tmp_path):
    nodes = Nodes()
    a_port, b_port = free_port(), free_port()
    a = nodes.start("A", node_xml("A", tmp_path / "a", listen=a_port,
                                  dests=[Dest(group="B", port=b_port, sync=True)], group="A"))
    b = nodes.start("B", node_xml("B", tmp_path / "b", listen=b_port,
                                  dests=[Dest(group="A", port=a_port, sync=True)], group="B"))
    yield a, b
    nodes.close()


def publish(raw: RawClient, s: int, tag: str) -> None:
    raw.send({"c": "publish", "t": "events", "s": s, "a": "persisted"},
             json.dumps({"s": s, "via": tag}).encode())


def acked_through(raw: RawClient, s: int) -> None:
    while True:
        frame = raw.recv_frame()
        assert frame is not None, "the server closed the connection"
        h, _ = frame
        if h.get("c") == "ack" and h.get("a") == "persisted" and int(h["s"]) >= s:
            return


def records(srv: ServerThread) -> list[tuple[int, dict]]:
    def read() -> list[tuple[int, dict]]:
        journal = srv.server.broker.txlog.journal
        return [(r.sequence, json.loads(r.body)) for r in journal.read(1) if r.topic == "events"]
    return srv.call(read)


def test_stale_copies_after_replication_are_refused_and_later_messages_kept(pair):
    a, b = pair
    old = RawClient(b.port)  # the publisher's connection to B, which B works off late
    old.logon("P")
    for s in range(1, 6):
        publish(old, s, "B")
    acked_through(old, 5)
    new = RawClient(a.port)  # failed over to A: 6..15 there, replicated to B
    new.logon("P")
    for s in range(6, 16):
        publish(new, s, "A")
    acked_through(new, 15)
    assert until(lambda: len(records(b)) == 15)
    for s in range(6, 11):  # B now reads the stale copies the old connection carried
        publish(old, s, "stale")
    acked_through(old, 10)  # duplicates: dropped, and acked
    for s in range(16, 21):
        publish(new, s, "A")
    acked_through(new, 20)
    want = [(s, {"s": s, "via": "B" if s < 6 else "A"}) for s in range(1, 21)]
    assert until(lambda: len(records(b)) >= 20)
    assert records(b) == want
    assert records(a) == want
    old.close()
    new.close()
