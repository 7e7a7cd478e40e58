"""Sync and async destinations (issue 20, docs/design/replication.md 2.3 and 2.4), driven by the official
Python client over an in-process pair: a sync destination gates the publisher's persisted acks
and a bookmark subscription's ``bm`` acks, an async one gates nothing; a down or lagging sync
destination holds them until it comes back or is downgraded; the Admin shows the link."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import AMPS
import pytest

from amps_emulator.pair import EmbeddedPair
from amps_emulator.replication import link
from tests.support.clients import Collector
from tests.support.servers import turn_held

HOLD_MS = 600  # how long a publish_flush waits to show that acks are held


def publisher(uri: str, name: str = "pub") -> AMPS.Client:
    c = AMPS.Client(name)
    c.set_publish_store(AMPS.MemoryPublishStore())
    c.connect(uri)
    c.logon(5000)
    return c


def held(client: AMPS.Client, ms: int = HOLD_MS) -> bool:
    """True when the client's publish store still waits for persisted acks after ``ms``."""
    try:
        client.publish_flush(ms)
    except AMPS.TimedOutException:
        return True
    return False


def admin(srv, path: str) -> dict:
    with urllib.request.urlopen(srv.server.admin.uri + path, timeout=10) as r:
        return json.loads(r.read())


def wait_state(pair: EmbeddedPair, source: str, pred) -> dict:
    """``source``'s destination state once ``pred`` holds (looked at on the server's loop
    after each of its events, bounded)."""
    deadline = time.monotonic() + 10
    while not pred(state := pair.state(source)):
        assert time.monotonic() < deadline, state
        pair.a.call(lambda: None)  # one round trip to A's loop between looks
    return state


def wait_connected(pair: EmbeddedPair) -> None:
    for name in pair.names:
        wait_state(pair, name, lambda s: s["is_connected"])


@pytest.fixture
def sync_pair(tmp_path):
    with EmbeddedPair(tmp_path, sync_type="sync", memory=False) as pair:
        wait_connected(pair)
        yield pair


@pytest.fixture
def async_pair(tmp_path):
    with EmbeddedPair(tmp_path, sync_type="async", memory=False) as pair:
        wait_connected(pair)
        yield pair


def test_sync_acks_arrive_while_the_peer_acknowledges(sync_pair):
    pub = publisher(sync_pair.a.uri)
    try:
        for i in range(20):
            pub.publish("orders", json.dumps({"id": i}))
        pub.publish_flush(10000)
        assert pub.get_unpersisted_count() == 0
    finally:
        pub.close()


def test_a_held_sync_destination_holds_persisted_acks_until_released(sync_pair):
    pub = publisher(sync_pair.a.uri)
    try:
        sync_pair.hold_acks("A")
        pub.publish("orders", json.dumps({"id": 1}))
        assert held(pub)
        sub = AMPS.Client("sub-b")
        sub.connect(sync_pair.b.uri)
        sub.logon(5000)
        got = Collector(lambda m: json.loads(m.get_data()))
        sub.subscribe(got, "orders")
        pub.publish("orders", json.dumps({"id": 2}))
        assert got.wait_for(1) == [{"id": 2}]  # replication goes on; only the acks wait
        assert held(pub)
        sync_pair.release_acks("A")
        pub.publish_flush(10000)
        sub.close()
    finally:
        pub.close()


def test_acks_the_sync_destination_releases_go_out_before_the_turn_ends(sync_pair):
    """The peer's acknowledgement arrives between turns (here: the end of A's turn never
    comes until the test lets it): the persisted acks it releases are written at once."""
    pub = publisher(sync_pair.a.uri)
    try:
        sync_pair.hold_acks("A")
        pub.publish("orders", json.dumps({"id": 1}))
        assert held(pub)
        with turn_held(sync_pair.a):
            sync_pair.release_acks("A")
            deadline = time.monotonic() + 5
            while pub.get_unpersisted_count():  # (a flush would wait for the turn's end)
                assert time.monotonic() < deadline, "the released ack did not come"
                sync_pair.a.call(lambda: None)  # one round trip to A's loop between looks
    finally:
        pub.close()


def test_a_down_sync_destination_holds_acks_until_it_returns(sync_pair):
    pub = publisher(sync_pair.a.uri)
    try:
        sync_pair.cut("A")
        pub.publish("orders", json.dumps({"id": 1}))
        assert held(pub)
        assert sync_pair.state("A")["is_connected"] is False
        assert sync_pair.state("A")["disconnect_count"] == 1
        sync_pair.restore("A")
        pub.publish_flush(10000)  # resync: B acknowledges what it lacked
    finally:
        pub.close()


def test_downgrade_releases_held_acks_and_upgrade_gates_again(sync_pair):
    pub = publisher(sync_pair.a.uri)
    try:
        sync_pair.cut("A")
        pub.publish("orders", json.dumps({"id": 1}))
        assert held(pub)
        out = admin(sync_pair.a, "/amps/administrator/replication/B/downgrade")
        assert out["done"] is True and out["replication_type"] == "async"
        pub.publish_flush(10000)
        pub.publish("orders", json.dumps({"id": 2}))
        pub.publish_flush(10000)  # async: nothing waits for B
        node = admin(sync_pair.a, "/amps/instance/replication/B.json")
        assert node["amps"]["instance"]["replication"][0]["replication_type"] == "async"
        # upgrade while B is still cut: pending until it has caught up
        out = admin(sync_pair.a, "/amps/administrator/replication/B/upgrade")
        assert out["done"] is True and out["upgrade_pending"] is True
        assert sync_pair.state("A")["replication_type"] == "async"
        sync_pair.restore("A")
        pub.publish("orders", json.dumps({"id": 3}))
        pub.publish_flush(10000)
        wait_state(sync_pair, "A", lambda s: s["replication_type"] == "sync")
        sync_pair.hold_acks("A")
        pub.publish("orders", json.dumps({"id": 4}))
        assert held(pub)  # sync again: B gates the acks
        sync_pair.release_acks("A")
        pub.publish_flush(10000)
    finally:
        pub.close()


def test_async_destination_gates_nothing(async_pair):
    pub = publisher(async_pair.a.uri)
    try:
        async_pair.cut("A")
        for i in range(5):
            pub.publish("orders", json.dumps({"id": i}))
        pub.publish_flush(10000)
        async_pair.hold_acks("B")
        pub2 = publisher(async_pair.b.uri, "pub-b")
        pub2.publish("orders", json.dumps({"id": 9}))
        pub2.publish_flush(10000)
        pub2.close()
    finally:
        pub.close()


def test_bookmark_subscription_bm_ack_waits_for_sync_destinations(sync_pair):
    """A bookmark subscriber's persisted ``bm`` ack names a message only once B acknowledged
    it (a recovery point valid on every instance)."""
    sub = AMPS.Client("bm-sub")
    sub.connect(sync_pair.a.uri)
    sub.logon(5000)
    pub = publisher(sync_pair.a.uri)
    try:
        got = Collector(lambda m: (m.get_command(), m.get_ack_type(), m.get_bookmark()))
        cmd = AMPS.Command("subscribe").set_topic("orders").set_bookmark("0").set_sub_id("sub-1")
        cmd.add_ack_type("persisted")
        sub.execute_async(cmd, got)
        sync_pair.hold_acks("A")
        pub.publish("orders", json.dumps({"id": 1}))
        assert got.wait_until(lambda items: any(c == "publish" for c, _, _ in items))
        bm = next(b for c, _, b in got.items if c == "publish")
        assert held(pub, 1500)  # longer than the 1 s between a subscription's persisted acks
        assert not any(c == "ack" and b == bm for c, _, b in got.items)  # bm not acked yet
        sync_pair.release_acks("A")
        assert got.wait_until(lambda items: ("ack", "persisted", bm) in items)
        pub.publish_flush(10000)
    finally:
        pub.close()
        sub.close()


def test_fully_durable_subscription_sees_messages_once_acknowledged(sync_pair):
    sub = AMPS.Client("fd-sub")
    sub.connect(sync_pair.a.uri)
    sub.logon(5000)
    pub = publisher(sync_pair.a.uri)
    try:
        fd = Collector(lambda m: json.loads(m.get_data()))
        plain = Collector(lambda m: json.loads(m.get_data()))
        sub.bookmark_subscribe(fd, "orders", AMPS.Client.Bookmarks.NOW, options="fully_durable")
        sub.bookmark_subscribe(plain, "orders", AMPS.Client.Bookmarks.NOW)
        sync_pair.hold_acks("A")
        pub.publish("orders", json.dumps({"id": 1}))
        assert plain.wait_for(1) == [{"id": 1}]
        assert fd.wait_for(1, timeout=HOLD_MS / 1000) == []
        sync_pair.release_acks("A")
        assert fd.wait_for(1) == [{"id": 1}]
    finally:
        pub.close()
        sub.close()


def test_admin_replication_node_has_the_monitoring_fields(sync_pair):
    pub = publisher(sync_pair.a.uri)
    for i in range(3):
        pub.publish("orders", json.dumps({"id": i}))
    pub.publish_flush(10000)
    pub.close()
    node = admin(sync_pair.a, "/amps/instance/replication.json")["amps"]["instance"]["replication"]
    assert [n["id"] for n in node] == ["B"]
    b = node[0]
    for field in ("name", "destination_name", "destination_group_name", "client_name", "client_type",
                  "authenticated_id", "destination_admin_addr", "pass_through", "replication_type",
                  "is_connected", "connect_time", "disconnect_time", "disconnect_count", "messages_out",
                  "bytes_out", "messages_out_per_sec", "bytes_out_per_sec", "seconds_behind"):
        assert field in b, field
    assert b["destination_name"] == "B" and b["destination_group_name"] == "pair"
    assert b["client_name"] == "A!B!sync!amps-replication"
    assert b["is_connected"] == "true" and b["replication_type"] == "sync"
    assert int(b["messages_out"]) == 3 and int(b["bytes_out"]) > 0
    assert b["seconds_behind"] == "0"
    assert admin(sync_pair.a, "/amps/administrator/replication") == {"replication": ["B"]}
    emu = admin(sync_pair.b, "/emulator/replication")
    assert emu["incoming"] == ["A"] and emu["destinations"][0]["name"] == "A"


def test_replication_triggers_fire_through_on_event(sync_pair):
    """Connect, disconnect, resync-complete, downgrade and upgrade reach ``on_event`` with
    the destination's name (what the actions engine's ``fire`` gets)."""
    seen: list[tuple[str, dict[str, str]]] = []
    for srv in sync_pair.servers:
        srv.call(lambda srv=srv: setattr(srv.server.replication, "on_event",
                                         lambda module, variables: seen.append((module, variables))))
    sync_pair.cut("A")
    wait_state(sync_pair, "A", lambda s: not s["is_connected"])
    sync_pair.downgrade("A")
    sync_pair.restore("A")
    wait_state(sync_pair, "A", lambda s: s["is_connected"])
    sync_pair.upgrade("A")
    wait_state(sync_pair, "A", lambda s: s["replication_type"] == "sync")

    def fired(module: str) -> list[dict[str, str]]:
        return [v for m, v in seen if m == module]

    deadline = time.monotonic() + 10
    while not fired("amps-action-on-replication-resync-complete") \
            or not fired("amps-action-on-connect-incoming-replication"):
        assert time.monotonic() < deadline, seen
        sync_pair.b.call(lambda: None)
    assert fired("amps-action-on-disconnect-replication")[0]["AMPS_DESTINATION_NAME"] == "B"
    assert fired("amps-action-on-downgrade-replication")[0] == {
        "AMPS_DESTINATION_NAME": "B", "AMPS_REASON": "administrator"}
    assert fired("amps-action-on-connect-replication")[0]["AMPS_DESTINATION_NAME"] == "B"
    assert fired("amps-action-on-upgrade-replication") == [{"AMPS_DESTINATION_NAME": "B"}]
    assert fired("amps-action-on-disconnect-incoming-replication")[0]["AMPS_DESTINATION_NAME"] == "A"
    assert fired("amps-action-on-connect-incoming-replication")[0]["AMPS_DESTINATION_NAME"] == "A"


def test_amps_pair_fixture_serves_an_haclient(amps_pair):
    """The pytest plugin's pair: an HAClient over both URIs; A's acks wait for B."""
    pub = AMPS.HAClient("fixture-pub")
    chooser = AMPS.DefaultServerChooser()
    for uri in amps_pair.uris:
        chooser.add(uri)
    pub.set_server_chooser(chooser)
    pub.set_publish_store(AMPS.MemoryPublishStore())
    pub.connect_and_logon()
    sub = AMPS.Client("fixture-sub")
    sub.connect(amps_pair.b.uri)
    sub.logon(5000)
    try:
        got = Collector(lambda m: json.loads(m.get_data()))
        sub.subscribe(got, "orders")
        wait_connected(amps_pair)
        amps_pair.hold_acks("A")
        pub.publish("orders", json.dumps({"id": 1}))
        assert got.wait_for(1) == [{"id": 1}]
        assert held(pub)
        amps_pair.release_acks("A")
        pub.publish_flush(10000)
    finally:
        pub.close()
        sub.close()


def test_console_draws_the_replication_graph(sync_pair):
    with urllib.request.urlopen(sync_pair.a.server.admin.uri + "/", timeout=10) as r:
        page = r.read().decode()
    assert '<svg id="replication"' in page
    assert 'data-state="sync"' in page and ">B</text>" in page and "sync · connected" in page
    sync_pair.cut("A")
    wait_state(sync_pair, "A", lambda s: not s["is_connected"])
    sync_pair.hold_acks("A")
    with urllib.request.urlopen(sync_pair.a.server.admin.uri + "/", timeout=10) as r:
        page = r.read().decode()
    assert 'data-state="down"' in page and "sync · cut · acks held" in page


def test_publishers_on_both_instances_of_a_sync_pair_get_their_acks(sync_pair):
    """Records cross in both directions: B acks A's records without waiting for A (a record
    never goes back to where it came from), so the two sync gates cannot wait on each other."""
    pa, pb = publisher(sync_pair.a.uri, "pub-a"), publisher(sync_pair.b.uri, "pub-b")
    try:
        for i in range(300):
            pa.publish("orders", json.dumps({"id": i, "on": "a"}))
            pb.publish("orders", json.dumps({"id": i, "on": "b"}))
        pa.publish_flush(10000)
        pb.publish_flush(10000)
    finally:
        pa.close()
        pb.close()


def test_a_sender_whose_window_is_full_sends_on_as_the_acks_come(tmp_path, monkeypatch):
    """The link streams without waiting for acks up to its window; past it, the peer's acks
    (which move no gate on an async destination) let it go on, with nothing else happening."""
    monkeypatch.setattr(link, "WINDOW", 3)
    with EmbeddedPair(tmp_path, sync_type="async", memory=False) as pair:
        wait_connected(pair)
        pub = publisher(pair.a.uri)
        sub = AMPS.Client("sub-b")
        try:
            for i in range(40):
                pub.publish("orders", json.dumps({"id": i}))
            pub.publish_flush(10000)
            sub.connect(pair.b.uri)
            sub.logon(5000)
            got = Collector(lambda m: json.loads(m.get_data())["id"])
            sub.bookmark_subscribe(got, "orders", AMPS.Client.Bookmarks.EPOCH)
            assert got.wait_for(40) == list(range(40))
        finally:
            pub.close()
            sub.close()


def test_replication_control_downgrades_by_age_and_upgrades_once_caught_up(sync_pair):
    """What the downgrade/upgrade actions call (server.ports.ReplicationControl)."""
    pub = publisher(sync_pair.a.uri)
    control = sync_pair.a.server.replication
    try:
        sync_pair.hold_acks("A")
        pub.publish("orders", json.dumps({"id": 1}))
        assert held(pub)
        assert sync_pair.a.call(lambda: control.downgrade(3600.0, 0.0)) == []  # not that old
        assert sync_pair.a.call(lambda: control.downgrade(0.1, 0.1)) == ["B"]
        pub.publish_flush(10000)  # downgraded: the held acks went out
        assert sync_pair.a.call(lambda: control.upgrade(0.05)) == []  # still lagging (held)
        sync_pair.release_acks("A")
        wait_state(sync_pair, "A", lambda s: s["seconds_behind"] == 0 and s["acked_position"] >= 1)
        assert sync_pair.a.call(lambda: control.upgrade(0.05)) == ["B"]
        assert sync_pair.state("A")["replication_type"] == "sync"
    finally:
        pub.close()


def test_admin_reconnect_drops_the_link_and_it_comes_back(sync_pair):
    out = admin(sync_pair.a, "/amps/administrator/replication/B/reconnect")
    assert out["done"] is True
    st = wait_state(sync_pair, "A", lambda s: s["disconnect_count"] == 1 and s["is_connected"])
    assert st["replication_type"] == "sync"
    pub = publisher(sync_pair.a.uri)
    try:
        pub.publish("orders", json.dumps({"id": 1}))
        pub.publish_flush(10000)
    finally:
        pub.close()
    with pytest.raises(urllib.error.HTTPError) as err:
        admin(sync_pair.a, "/amps/administrator/replication/nowhere/downgrade")
    assert err.value.code == 404


def test_a_link_reads_a_whole_batch_frame_without_pausing_its_socket(sync_pair):
    """Both ends of a link buffer a whole ``repl_batch`` frame: with asyncio's 64 KiB default
    the reader paused and resumed the socket a few times within each frame."""
    import asyncio
    import gc

    from amps_emulator.replication.batch import BATCH_BYTES
    from amps_emulator.replication.stream import READ_LIMIT

    ports = {s.server.replication.listen_port for s in sync_pair.servers}

    def link_readers() -> list[asyncio.StreamReader]:
        out = []
        for o in gc.get_objects():
            if isinstance(o, asyncio.StreamReader) and o._transport is not None:
                ends = {o._transport.get_extra_info(k) for k in ("sockname", "peername")}
                if any(e and e[1] in ports for e in ends):
                    out.append(o)
        return out

    readers = sync_pair.a.call(link_readers)
    assert len(readers) >= 2  # (A's end of each link; B's ends are in the same process)
    assert all(r._limit == READ_LIMIT for r in readers)
    assert READ_LIMIT >= BATCH_BYTES
