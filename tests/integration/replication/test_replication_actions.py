"""The replication actions end to end (issue 20 x 23): an HA pair whose instances downgrade and
upgrade their sync destination from ``amps-action-on-schedule``, and replication events that
drive ``do-publish-message``, all through the official Python client on the test clock.

Time moves only when a test advances both instances' clocks, so "the oldest unacknowledged
message is 8 s old" is exact. The clocks start on a fixed day far from now, so any timestamp
taken from real time instead of the server clock shows up as a wrong age.
"""

from __future__ import annotations

import json
import time

import AMPS
import pytest

from amps_emulator.config import loads_config
from amps_emulator.config.errors import ConfigError
from amps_emulator.pair import EmbeddedPair
from tests.integration.replication.test_replication_sync import admin, held, publisher, wait_state
from tests.support.clients import Collector

#: 2025-01-02T03:04:05Z: the pair's test clocks start here
EPOCH = 1735787045.0


def step(kind: str, name: str, **options: str) -> str:
    opts = "".join(f"<{k}>{v}</{k}>" for k, v in options.items())
    return f"<{kind}><Module>amps-action-{name}</Module><Options>{opts}</Options></{kind}>"


def every(period: str, *steps: str) -> str:
    return f"<Action>{step('On', 'on-schedule', Every=period)}{''.join(steps)}</Action>"


#: the shape of a public HA pair's config: every 2 s, downgrade a sync destination whose oldest
#: unacknowledged message is older than 6 s, then upgrade a downgraded one under 2 s behind
SWITCH = every("2s", step("Do", "do-downgrade-replication", Age="6s"),
               step("Do", "do-upgrade-replication", Age="2s"))


def on_event(trigger: str, what: str) -> str:
    """On ``trigger`` publish ``{"event": what, "dest": <destination>}`` to
    ``repl-events/<what>/<destination>``."""
    data = json.dumps({"event": what, "dest": "{{AMPS_DESTINATION_NAME}}"})
    return (f"<Action>{step('On', trigger)}"
            + step("Do", "do-publish-message", Topic=f"repl-events/{what}/{{{{AMPS_DESTINATION_NAME}}}}",
                   MessageType="json", Data=data)
            + "</Action>")


EVENTS = "".join(on_event(f"on-{t}", w) for t, w in (
    ("disconnect-replication", "disconnect"), ("connect-replication", "connect"),
    ("downgrade-replication", "downgrade"), ("upgrade-replication", "upgrade"),
    ("replication-resync-complete", "resync-complete")))


def wait_caught_up(pair: EmbeddedPair) -> None:
    """Until A's link to B is up and B has acknowledged everything A's journal holds (looked
    at on A's loop; the clocks stand still meanwhile, so ``seconds_behind`` cannot show it)."""
    service = pair.a.server.replication
    deadline = time.monotonic() + 10
    while not pair.a.call(lambda: service.gate.caught_up(service.state("B"))):
        assert time.monotonic() < deadline, pair.state("A")


def node(srv) -> dict:
    """The Admin's ``/amps/instance/replication/<destination>`` node of ``srv``'s one destination."""
    out = admin(srv, "/amps/instance/replication.json")["amps"]["instance"]["replication"]
    assert len(out) == 1
    return out[0]


@pytest.fixture(params=[True, False], ids=["memory", "files"])
def pair(request, tmp_path):
    """A sync pair on test clocks, each instance carrying :data:`SWITCH` and :data:`EVENTS`;
    in ``--memory`` mode and with files (the journals stamp records on the server clock in both)."""
    with EmbeddedPair(tmp_path, memory=request.param, actions=SWITCH + EVENTS, test_clock=True,
                      clock_start=EPOCH) as p:
        yield p  # (on test clocks, started means connected)


def test_the_schedule_downgrades_a_lagging_destination_and_upgrades_it_once_caught_up(pair):
    pub = publisher(pair.a.uri)
    try:
        pair.hold_acks("A")  # B looks as if it lagged: A's persisted acks wait
        pub.publish("orders", json.dumps({"id": 1}))
        assert held(pub)
        pair.advance(6)  # runs at +2, +4, +6: the message is 6 s old, not older than Age
        b = node(pair.a)
        assert b["replication_type"] == "sync" and b["seconds_behind"] == "6"
        assert held(pub)
        pair.advance(2)  # +8: older than 6 s, downgraded; the held ack goes out
        b = node(pair.a)
        assert b["replication_type"] == "async" and b["seconds_behind"] == "8"
        pub.publish_flush(10000)
        pub.publish("orders", json.dumps({"id": 2}))
        pub.publish_flush(10000)  # async: nothing waits for B
        pair.advance(2)  # +10: still 10 s behind (held), not upgraded
        assert node(pair.a)["replication_type"] == "async"
        pair.release_acks("A")  # B has acknowledged everything meanwhile
        wait_caught_up(pair)
        assert node(pair.a)["replication_type"] == "async"  # only the schedule upgrades
        pair.advance(2)  # +12: caught up, upgraded
        assert node(pair.a)["replication_type"] == "sync"
        pair.hold_acks("A")
        pub.publish("orders", json.dumps({"id": 3}))
        assert held(pub)  # sync again: B gates A's acks
        pair.release_acks("A")
        pub.publish_flush(10000)
        assert node(pair.b)["replication_type"] == "sync"  # B's destination was never behind
    finally:
        pub.close()


def test_a_down_peer_is_downgraded_by_age_and_upgraded_after_its_resync(pair):
    pub = publisher(pair.a.uri)
    resynced = Collector()
    pub.subscribe(resynced, "repl-events/resync-complete/B")
    try:
        pair.cut("A")
        wait_state(pair, "A", lambda s: not s["is_connected"])
        for i in range(3):
            pub.publish("orders", json.dumps({"id": i}))
        assert held(pub)
        pair.advance(8)
        assert node(pair.a)["replication_type"] == "async"
        pub.publish_flush(10000)
        pair.restore("A")  # reconnects (its ReconnectTimeout passed during the advance)
        assert len(resynced.wait_for(1)) == 1  # what B lacked went out (and the event's message)
        wait_caught_up(pair)
        pair.advance(2)
        b = node(pair.a)
        assert b["replication_type"] == "sync" and b["is_connected"] == "true"
        sub = AMPS.Client("sub-b")
        sub.connect(pair.b.uri)
        sub.logon(5000)
        try:  # the resync brought B what A held while the link was down
            got = Collector(lambda m: json.loads(m.get_data())["id"])
            sub.bookmark_subscribe(got, "orders", AMPS.Client.Bookmarks.EPOCH)
            assert got.wait_for(3) == [0, 1, 2]
        finally:
            sub.close()
    finally:
        pub.close()


def test_replication_events_drive_actions_once_per_event(pair):
    sub = AMPS.Client("events")
    sub.connect(pair.a.uri)
    sub.logon(5000)
    try:
        got = Collector(lambda m: (m.get_topic(), json.loads(m.get_data())))
        sub.subscribe(got, "^repl-events/.*/B$")  # A's events about its destination B
        pair.cut("A")
        assert got.wait_for(1) == [("repl-events/disconnect/B", {"event": "disconnect", "dest": "B"})]
        pub = publisher(pair.a.uri)
        try:
            pub.publish("orders", json.dumps({"id": 1}))
            pair.advance(8)  # downgraded by the schedule
            pub.publish_flush(10000)
        finally:
            pub.close()
        pair.restore("A")  # reconnects and resyncs
        assert len(got.wait_for(4)) == 4, got.items  # ... connect, resync-complete
        wait_caught_up(pair)  # B acknowledged those events' messages too
        pair.advance(2)  # upgraded by the schedule
        expected = ["disconnect", "downgrade", "connect", "resync-complete", "upgrade"]
        assert got.wait_until(lambda items: len(items) >= len(expected)), got.items
        # nothing more: a marker published after them is what arrives next
        sub.publish("repl-events/marker/B", json.dumps({"event": "marker", "dest": "B"}))
        assert got.wait_for(len(expected) + 1)[len(expected)][0] == "repl-events/marker/B"
        assert [body["event"] for _, body in got.items] == [*expected, "marker"]
        assert all(topic == f"repl-events/{body['event']}/B" and body["dest"] == "B"
                   for topic, body in got.items)
    finally:
        sub.close()


def test_grace_period_counts_from_start_up(tmp_path):
    """Nothing is downgraded before ``GracePeriod`` has passed since the instance started,
    however old the message; after it, the Age alone decides."""
    graced = every("2s", step("Do", "do-downgrade-replication", Age="2000ms", GracePeriod="1m"))
    with EmbeddedPair(tmp_path, actions=graced, test_clock=True, clock_start=EPOCH) as pair:
        pub = publisher(pair.a.uri)
        try:
            pair.advance(52)
            pair.hold_acks("A")
            pub.publish("orders", json.dumps({"id": 1}))  # at +52
            pair.advance(6)  # +58: 6 s old (older than Age), but inside the grace period
            assert node(pair.a)["replication_type"] == "sync"
            assert held(pub)
            pair.advance(2)  # +60: the grace period is over
            assert node(pair.a)["replication_type"] == "async"
            pub.publish_flush(10000)
        finally:
            pub.close()


@pytest.mark.parametrize(("module", "options", "message"), [
    ("do-downgrade-replication", {"Age": "6 seconds"}, "invalid option <Age>"),
    ("do-downgrade-replication", {"Age": "6s", "GracePeriod": "soon"}, "invalid option <GracePeriod>"),
    ("do-upgrade-replication", {"Age": "2x"}, "invalid option <Age>"),
    ("do-upgrade-replication", {"Age": "2s", "GracePeriod": "-"}, "invalid option <GracePeriod>"),
    ("do-downgrade-replication", {"GracePeriod": "10s"}, "Age"),
])
def test_bad_age_or_grace_period_fails_the_config_with_its_line(module, options, message):
    xml = f"""<AMPSConfig><Name>A</Name>
<Actions>
{every("2s", step("Do", module, **options))}
</Actions>
</AMPSConfig>"""
    with pytest.raises(ConfigError) as err:
        loads_config(xml, "ha.xml")
    text = str(err.value)
    assert "ha.xml:3" in text and message in text, text


#: a primary written here in the shape of a public HA demo's (a sync, PassThrough destination
#: for one keyed SOW topic, a websocket transport named as the Admin's SQLTransport, Admin
#: statistics, preallocated journals, and a 2 s schedule that downgrades at Age 6s and upgrades
#: at Age 2s); the demo's own file ran here by hand with only its addresses and directory changed
HA_DEMO_PRIMARY = """<AMPSConfig>
  <Name>ha-first</Name><Group>ha-demo</Group>
  <Transports>
    <Transport><Name>clients</Name><Type>tcp</Type><Protocol>amps</Protocol>
      <InetAddr>{tcp}</InetAddr><ReuseAddr>true</ReuseAddr></Transport>
    <Transport><Name>browsers</Name><Type>tcp</Type><Protocol>websocket</Protocol>
      <InetAddr>{ws}</InetAddr><ReuseAddr>true</ReuseAddr></Transport>
    <Transport><Name>links</Name><Type>amps-replication</Type><InetAddr>{repl}</InetAddr></Transport>
  </Transports>
  <Admin><InetAddr>{admin}</InetAddr><Interval>10s</Interval><SQLTransport>browsers</SQLTransport>
    <FileName>{d}/stats/stats.db</FileName></Admin>
  <Logging><Target><Protocol>stdout</Protocol><Level>info</Level></Target></Logging>
  <TransactionLog><JournalDirectory>{d}/journal</JournalDirectory><MinJournalSize>10MB</MinJournalSize>
    <PreallocatedJournalFiles>2</PreallocatedJournalFiles>
    <Topic><MessageType>json</MessageType><Name>orders</Name></Topic></TransactionLog>
  <SOW><Topic><MessageType>json</MessageType><Name>orders</Name><Key>/id</Key>
    <Durability>persistent</Durability><FileName>{d}/sow/orders.sow</FileName></Topic></SOW>
  <Replication><Destination><Name>ha-second</Name><Group>ha-demo</Group><SyncType>sync</SyncType>
    <Transport><InetAddr>{peer}</InetAddr><Type>amps-replication</Type></Transport>
    <Topic><MessageType>json</MessageType><Name>orders</Name></Topic><PassThrough>.*</PassThrough>
  </Destination></Replication>
  <Actions><Action>
    <On><Module>amps-action-on-schedule</Module><Options><Every>2s</Every></Options></On>
    <Do><Module>amps-action-do-downgrade-replication</Module><Options><Age>6s</Age></Options></Do>
    <Do><Module>amps-action-do-upgrade-replication</Module><Options><Age>2s</Age></Options></Do>
  </Action></Actions>
</AMPSConfig>
"""


def test_a_primary_shaped_like_a_public_ha_demo_pairs_replicates_and_runs_its_schedule(tmp_path, caplog):
    """That primary, next to a secondary of the same shape written here, on test clocks:
    it connects, replicates its SOW topic, holds acks while the secondary is cut, downgrades on
    its 2 s schedule once the oldest unacknowledged message is older than 6 s, resyncs and
    upgrades when the link is back, and logs no error on the way."""
    import logging

    from amps_emulator.embedded import EmbeddedServer
    from amps_emulator.pair import free_port, pair_config
    from amps_emulator.server.core.clock import TestClock

    repl, peer = free_port(), free_port()
    primary_xml = HA_DEMO_PRIMARY.format(
        admin=f"127.0.0.1:{free_port()}", tcp=f"127.0.0.1:{free_port()}", ws=f"127.0.0.1:{free_port()}",
        repl=f"127.0.0.1:{repl}", peer=f"127.0.0.1:{peer}", d=tmp_path / "primary")
    secondary_xml = pair_config("ha-second", "ha-first", repl_port=peer, peer_repl_port=repl,
                                data_dir=tmp_path / "secondary", group="ha-demo",
                                sow_topics=[("orders", "/id")], actions=SWITCH)
    clocks = TestClock(EPOCH), TestClock(EPOCH)
    caplog.set_level(logging.INFO, logger="amps_emulator")
    primary = EmbeddedServer(loads_config(primary_xml, "primary.xml"), hold_ports=False, timebase=clocks[0])
    secondary = EmbeddedServer(loads_config(secondary_xml, "secondary.xml"), hold_ports=False,
                               timebase=clocks[1])
    primary.start()
    secondary.start()
    service = primary.server.replication

    def advance(seconds: float) -> None:
        for srv, clock in zip((primary, secondary), clocks, strict=True):
            srv.call(lambda srv=srv, clock=clock: (clock.advance(seconds), srv.server.turn.request()))

    def look() -> tuple[bool, bool, str]:
        st = service.state("ha-second")
        return st.connected, service.gate.caught_up(st), st.replication_type

    def until(pred) -> tuple[bool, bool, str]:
        deadline = time.monotonic() + 10
        while not pred(state := primary.call(look)):
            assert time.monotonic() < deadline, state
        return state

    pub = publisher(primary.uri, "ha-pub")
    sub = AMPS.Client("ha-sub")
    try:
        # the primary started first: its first try found the secondary not listening, and it
        # tries again once its clock passed the ReconnectTimeout
        deadline = time.monotonic() + 10
        while not primary.call(look)[0]:
            assert time.monotonic() < deadline
            wait = primary.call(lambda: (service.state("ha-second").retry_at, clocks[0].monotonic()))
            if wait[0] is not None:
                advance(wait[0] - wait[1])
        sub.connect(secondary.uri)
        sub.logon(5000)
        for i in range(5):
            pub.publish("orders", json.dumps({"id": i}))
        pub.publish_flush(10000)  # sync: the secondary has them
        assert sorted(json.loads(m.get_data())["id"] for m in sub.sow("orders")
                      if m.get_command() == "sow") == [0, 1, 2, 3, 4]
        advance(10)
        assert until(lambda s: True)[2] == "sync"  # nothing lagging: left alone
        primary.call(lambda: service.cut("ha-second"))
        pub.publish("orders", json.dumps({"id": 9}))
        assert held(pub)
        advance(8)
        assert until(lambda s: True)[2] == "async"
        pub.publish_flush(10000)
        primary.call(lambda: service.restore("ha-second"))
        until(lambda s: s[0] and s[1])
        advance(2)
        assert until(lambda s: True)[2] == "sync"
        assert sorted(json.loads(m.get_data())["id"] for m in sub.sow("orders")
                      if m.get_command() == "sow") == [0, 1, 2, 3, 4, 9]
    finally:
        pub.close()
        sub.close()
        secondary.stop()
        primary.stop()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
    assert any("downgraded to async" in r.getMessage() for r in caplog.records)
