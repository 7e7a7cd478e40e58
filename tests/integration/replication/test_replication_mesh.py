"""Three emulators replicating (issue 20, docs/design/replication.md 5), driven by the official Python
client: a full mesh like 60East's positions demo (each message once on every instance, never
sent back to its origin), the same mesh with ``PassThrough .*`` (records pass on, loop
prevention keeps them from returning), and a chain A -> B -> C where C gets A's messages only
when B's Destination passes A's Group through."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import AMPS
import pytest

from amps_emulator.config import loads_config
from tests.support.clients import Collector
from tests.support.procserver import free_port
from tests.support.replication_nodes import Dest, connect, node_xml, wait_marker
from tests.support.servers import ServerThread


class Fabric:
    """Instances started in-process; clients closed and servers stopped at the end."""

    def __init__(self) -> None:
        self.servers: dict[str, ServerThread] = {}
        self.clients: list[AMPS.Client] = []

    def start(self, name: str, xml: str) -> ServerThread:
        srv = self.servers[name] = ServerThread(loads_config(xml, f"{name}.xml")).start()
        return srv

    def client(self, name: str, client_name: str) -> AMPS.Client:
        c = connect(self.servers[name].uri, client_name)
        self.clients.append(c)
        return c

    def repl(self, name: str, what):
        srv = self.servers[name]
        return srv.call(lambda: what(srv.server.replication))

    def close(self) -> None:
        for c in self.clients:
            c.close()
        for s in self.servers.values():
            s.stop()


@pytest.fixture
def fabric() -> Iterator[Fabric]:
    f = Fabric()
    yield f
    f.close()


def mesh(tmp_path: Path, fabric: Fabric, pass_through: str | None) -> dict[str, AMPS.Client]:
    names = ["NYC", "LON", "SGP"]
    groups = {"NYC": "US", "LON": "UK", "SGP": "SG"}
    ports = {n: free_port() for n in names}
    for n in names:
        dests = [Dest(group=groups[o], port=ports[o], pass_through=pass_through) for o in names if o != n]
        fabric.start(n, node_xml(n, tmp_path / n, listen=ports[n], dests=dests, group=groups[n]))
    return {n: fabric.client(n, f"pub-{n}") for n in names}


def publish_everywhere(clients: dict[str, AMPS.Client], tag: str) -> list[dict]:
    sent = []
    for n, c in clients.items():
        msg = {"id": f"{tag}-{n}", "origin": n}
        c.publish("orders", json.dumps(msg))
        sent.append(msg)
    return sent


def everything(client: AMPS.Client, expect: list[dict]) -> list[tuple[str, dict]]:
    """The instance's journal of ``orders`` once every message of ``expect`` is in it."""
    got = Collector(lambda m: (m.get_bookmark(), json.loads(m.get_data())))
    cid = client.bookmark_subscribe(got, "orders", AMPS.Client.Bookmarks.EPOCH)
    assert got.wait_until(lambda items: all(e in [m for _, m in items] for e in expect)), got.items
    client.unsubscribe(cid)
    return list(got.items)


@pytest.mark.parametrize("pass_through", [None, ".*"], ids=["positions-demo", "pass-through-all"])
def test_full_mesh_each_message_once_everywhere_never_back_to_its_origin(tmp_path, fabric, pass_through):
    clients = mesh(tmp_path, fabric, pass_through)
    first = publish_everywhere(clients, "r1")
    second = publish_everywhere(clients, "r2")
    views = {n: everything(c, first + second) for n, c in clients.items()}
    # a second round arrived after the first on every link: anything of the first round that
    # was going to loop or be duplicated has been sent by now
    for n, items in views.items():
        msgs = [m for _, m in items]
        assert sorted(msgs, key=lambda m: m["id"]) == sorted(first + second, key=lambda m: m["id"]), (n, msgs)
        # per origin, the order it was published in
        for o in clients:
            assert [m["id"] for m in msgs if m["origin"] == o] == [f"r1-{o}", f"r2-{o}"]
    # one bookmark per message, the same on every instance
    by_id = [{m["id"]: bm for bm, m in items} for items in views.values()]
    assert by_id[0] == by_id[1] == by_id[2]
    assert len(set(by_id[0].values())) == 6
    for n in clients:
        receivers = fabric.repl(n, lambda r: {up: (rc.applied, rc.duplicates, rc.looped)
                                             for up, rc in r.receivers.items()})
        assert sum(a for a, _, _ in receivers.values()) == 4, (n, receivers)  # the others' 2 x 2
        assert all(looped == 0 for _, _, looped in receivers.values()), (n, receivers)
        senders = fabric.repl(n, lambda r: {d: s.messages_out for d, s in r.senders.items()})
        if pass_through is None:
            # only what was published here goes out: 2 messages to each of the 2 peers
            assert sorted(senders.values()) == [2, 2], senders
        else:
            # its own 2, plus at most the 2 of the third instance (never the peer's own)
            assert all(2 <= v <= 4 for v in senders.values()), senders


def chain(tmp_path: Path, fabric: Fabric, pass_through: str | None) -> dict[str, AMPS.Client]:
    b_port, c_port = free_port(), free_port()
    fabric.start("C", node_xml("C", tmp_path / "c", listen=c_port, group="GC"))
    fabric.start("B", node_xml("B", tmp_path / "b", listen=b_port, group="GB",
                               dests=[Dest(group="GC", port=c_port, pass_through=pass_through,
                                           exclude="replicate")]))
    fabric.start("A", node_xml("A", tmp_path / "a", listen=None, group="GA",
                               dests=[Dest(group="GB", port=b_port, exclude="replicate")]))
    return {n: fabric.client(n, f"client-{n}") for n in "ABC"}


@pytest.mark.parametrize("pass_through", ["^GA$", ".*"])
def test_chain_with_pass_through_carries_a_messages_to_c(tmp_path, fabric, pass_through):
    clients = chain(tmp_path, fabric, pass_through)
    for i in range(3):
        clients["A"].publish("orders", json.dumps({"id": i, "from": "A"}))
    on_a = wait_marker(clients["A"], "orders", {"id": 2, "from": "A"})
    on_b = wait_marker(clients["B"], "orders", {"id": 2, "from": "A"})
    on_c = wait_marker(clients["C"], "orders", {"id": 2, "from": "A"})
    assert on_a == on_b == on_c  # same messages, same bookmarks, same order
    receivers = fabric.repl("C", lambda r: {up: rc.applied for up, rc in r.receivers.items()})
    assert receivers == {"B": 3}


@pytest.mark.parametrize("pass_through", [None, "^GX$"], ids=["no-pass-through", "other-group"])
def test_chain_without_pass_through_stops_at_b(tmp_path, fabric, pass_through):
    clients = chain(tmp_path, fabric, pass_through)
    for i in range(3):
        clients["A"].publish("orders", json.dumps({"id": i, "from": "A"}))
    assert [m for _, m in wait_marker(clients["B"], "orders", {"id": 2, "from": "A"})] == [
        {"id": i, "from": "A"} for i in range(3)]
    # published on B after A's messages arrived there: B sends in its log order, so had A's
    # messages been going to C they would be there before this one
    clients["B"].publish("orders", json.dumps({"id": "b", "from": "B"}))
    on_c = wait_marker(clients["C"], "orders", {"id": "b", "from": "B"})
    assert [m for _, m in on_c] == [{"id": "b", "from": "B"}]
    sow = [json.loads(m.get_data()) for m in clients["C"].sow("orders") if m.get_command() == "sow"]
    assert sow == [{"id": "b", "from": "B"}]


def test_destination_topics_select_by_name_regex_and_filter(tmp_path, fabric):
    """Only what a Destination's Topics select travels: ``^orders$`` where ``/qty > 10``, and
    every ``news`` topic unfiltered; the rest stays on A."""
    b_port = free_port()
    fabric.start("B", node_xml("B", tmp_path / "b", listen=b_port))
    dest = Dest(group="B", port=b_port, exclude="replicate",
                topics=[("^orders$", "json", "/qty &gt; 10"), ("^news", "json", None)])
    fabric.start("A", node_xml("A", tmp_path / "a", listen=None, dests=[dest]))
    a, b = fabric.client("A", "pub-a"), fabric.client("B", "sub-b")
    for topic, msg in [("orders", {"id": 1, "qty": 5}), ("orders", {"id": 2, "qty": 20}),
                       ("news-eu", {"id": 3}), ("trades", {"id": 4, "qty": 50}),
                       ("orders", {"id": 5, "qty": 11}), ("news-us", {"id": 6})]:
        a.publish(topic, json.dumps(msg))
    on_b = wait_marker(b, "^(orders|news.*|trades)$", {"id": 6})
    assert [m for _, m in on_b] == [{"id": 2, "qty": 20}, {"id": 3}, {"id": 5, "qty": 11}, {"id": 6}]
    assert on_b == [x for x in wait_marker(a, "^(orders|news.*|trades)$", {"id": 6})
                    if x[1]["id"] in (2, 3, 5, 6)]


class Waiter(logging.Handler):
    """Log records of the replication logger, waited for without sleeping."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self._cv = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self._cv:
            self.lines.append(record.getMessage())
            self._cv.notify_all()

    def wait_for(self, *parts: str, timeout: float = 10.0) -> str:
        def hit() -> str | None:
            return next((ln for ln in self.lines if all(p in ln for p in parts)), None)

        with self._cv:
            assert self._cv.wait_for(hit, timeout), (parts, self.lines)
            found = hit()
            assert found is not None
            return found


@pytest.fixture
def repl_log() -> Iterator[Waiter]:
    w = Waiter()
    logger = logging.getLogger("amps_emulator.replication")
    logger.addHandler(w)
    old = logger.level
    logger.setLevel(logging.DEBUG)
    yield w
    logger.setLevel(old)
    logger.removeHandler(w)


SOW_ID = "<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>"
SOW_OTHER = "<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/other</Key><Durability>transient</Durability></Topic>"


@pytest.mark.parametrize(("b_sow", "b_txlog", "exclude", "reason"), [
    (SOW_OTHER, ".*", "replicate", "validation keys"),
    (SOW_ID, "^news$", "replicate", "validation txlog"),
    (SOW_ID.replace("orders", "trades"), ".*", "replicate", "validation sow"),
    (SOW_ID, ".*", None, "validation replicate"),
    (SOW_OTHER, ".*", "replicate,keys", None),  # excluded: the link is made
], ids=["keys", "txlog", "sow", "replicate", "excluded"])
def test_validation_refusal_is_logged_on_both_sides(tmp_path, fabric, repl_log, b_sow, b_txlog, exclude, reason):
    b_port = free_port()
    fabric.start("B", node_xml("B", tmp_path / "b", listen=b_port, sow=b_sow, txlog_topics=b_txlog))
    fabric.start("A", node_xml("A", tmp_path / "a", listen=None, sow=SOW_ID,
                               dests=[Dest(group="B", port=b_port, exclude=exclude)]))
    if reason is None:
        repl_log.wait_for("replication destination 'B' connected to 'B'")
        a, b = fabric.client("A", "pub-a"), fabric.client("B", "sub-b")
        a.publish("orders", json.dumps({"id": 1, "other": 2}))
        assert [m for _, m in wait_marker(b, "orders", {"id": 1, "other": 2})] == [{"id": 1, "other": 2}]
        assert not [ln for ln in repl_log.lines if "refused" in ln]
        return
    upstream = repl_log.wait_for("replication destination 'B'", "refused:", reason)
    downstream = repl_log.wait_for("refused by the upstream", reason)
    assert "orders" in upstream and "orders" in downstream
    assert fabric.repl("A", lambda r: dict(r.connected)) == {}


def test_resync_pass_through_applies_to_what_a_reconnect_replays_only(tmp_path, fabric):
    """B -> C has no PassThrough but ``ResyncPassThrough .*``: A's messages that B logged while
    C was away reach C with the resync; those arriving at B once C is connected do not."""
    b_port, c_port = free_port(), free_port()
    fabric.start("B", node_xml("B", tmp_path / "b", listen=b_port, group="GB", dests=[
        Dest(group="GC", port=c_port, exclude="replicate",
             extra="<ResyncPassThrough>.*</ResyncPassThrough>")]))
    fabric.start("A", node_xml("A", tmp_path / "a", listen=None, group="GA",
                               dests=[Dest(group="GB", port=b_port, exclude="replicate")]))
    a, b = fabric.client("A", "pub-a"), fabric.client("B", "pub-b")
    a.publish("orders", json.dumps({"id": "early"}))
    wait_marker(b, "orders", {"id": "early"})
    fabric.start("C", node_xml("C", tmp_path / "c", listen=c_port, group="GC"))
    c = fabric.client("C", "sub-c")
    assert [m for _, m in wait_marker(c, "orders", {"id": "early"})] == [{"id": "early"}]
    a.publish("orders", json.dumps({"id": "late"}))
    wait_marker(b, "orders", {"id": "late"})
    b.publish("orders", json.dumps({"id": "from-b"}))
    assert [m for _, m in wait_marker(c, "orders", {"id": "from-b"})] == [{"id": "early"}, {"id": "from-b"}]
