"""A bookmark subscriber that fails over resumes at the surviving instance without missing what
that instance holds and it never saw (docs/design/replication.md, journal.failover): with the
link from A to B cut, A takes messages B never sees, while B's own reach A and are logged there
after them. The subscriber read B up to B's last message; on A that message comes after A's
messages, yet the replay starts before them. The official client drops the ones it has seen."""

from __future__ import annotations

import json

import AMPS
import pytest

from tests.support.clients import Collector
from tests.support.procserver import free_port
from tests.support.replication_nodes import Dest, connect, node_xml
from tests.support.servers import ServerThread, until

from .test_replication_resync import Nodes


@pytest.fixture
def nodes():
    n = Nodes()
    yield n
    n.close()


def count(srv: ServerThread, topic: str = "events") -> int:
    return srv.call(lambda: sum(r.topic == topic for r in srv.server.broker.txlog.journal.read(1)))


def publish(client: AMPS.Client, tag: str, numbers) -> None:
    for i in numbers:
        client.publish("events", json.dumps({"tag": tag, "i": i}))
    client.flush()


def start_pair(tmp_path, nodes: Nodes) -> tuple[ServerThread, ServerThread]:
    a_port, b_port = free_port(), free_port()
    a = nodes.start("A", node_xml("A", tmp_path / "a", listen=a_port, group="A",
                                  dests=[Dest(group="B", port=b_port)]))
    b = nodes.start("B", node_xml("B", tmp_path / "b", listen=b_port, group="B",
                                  dests=[Dest(group="A", port=a_port)]))
    return a, b


def test_failed_over_subscriber_gets_what_the_survivor_took_while_the_link_was_cut(tmp_path, nodes):
    a, b = start_pair(tmp_path, nodes)
    pa, pb = connect(a.uri, "pub-a"), connect(b.uri, "pub-b")
    publish(pa, "a", range(1, 5))
    publish(pb, "b", range(1, 5))
    assert until(lambda: count(a) == 8 and count(b) == 8)
    a.call(lambda: a.server.replication.cut("B"))  # A -> B: A's messages no longer reach B
    publish(pa, "a", range(5, 25))
    assert until(lambda: count(a) == 28)
    publish(pb, "b", range(5, 10))  # B -> A still up: logged on A after a5..a24
    assert until(lambda: count(a) == 33 and count(b) == 13)

    sub = AMPS.HAClient("subscriber")
    chooser = AMPS.DefaultServerChooser()
    chooser.add(b.uri)
    chooser.add(a.uri)
    sub.set_server_chooser(chooser)
    store = AMPS.MemoryBookmarkStore()
    sub.set_bookmark_store(store)
    seen = Collector(lambda m: (json.loads(m.get_data())["tag"], json.loads(m.get_data())["i"]))

    def on(m: AMPS.Message) -> None:
        seen(m)
        store.discard_message(m)

    sub.connect_and_logon()
    try:
        sub.bookmark_subscribe(on, "events", AMPS.Client.Bookmarks.EPOCH, sub_id="failover")
        seen.wait_for(13)
        on_b = [("a", i) for i in range(1, 5)] + [("b", i) for i in range(1, 10)]
        assert sorted(seen.items) == sorted(on_b)
        nodes.stop("B")  # the subscriber fails over to A, resubscribing with B's last bookmark
        seen.wait_for(33, 30)
        got = list(seen.items)
        assert sorted(got) == sorted([("a", i) for i in range(1, 25)] + [("b", i) for i in range(1, 10)])
        assert [i for tag, i in got if tag == "a"] == list(range(1, 25))  # no gap, no duplicate
    finally:
        sub.close()
