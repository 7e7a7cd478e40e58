"""Configured Actions through the official Python client, on the test clock (docs/design/beyond-json.md
C.3 scenarios 1-13, and the triggers around them). Nothing sleeps: time moves only when a
test advances the server clock, and "nothing more arrived" is shown by a marker published
after it (one connection's messages arrive in order)."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import threading
import urllib.error
import urllib.request

import AMPS
import pytest

from amps_emulator.config import loads_config
from amps_emulator.server.core.clock import TestClock
from amps_emulator.server.services.actions import MAX_DEPTH
from tests.support.clients import Collector
from tests.support.procserver import free_port
from tests.support.servers import ServerThread, until

TRANSPORTS = """<Transports>
  <Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <MessageType>json</MessageType><Protocol>amps</Protocol></Transport>
  <Transport><Name>any</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol></Transport>
  <Transport><Name>test-x</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <MessageType>json</MessageType><Protocol>amps</Protocol></Transport>
</Transports>"""


def config(d, actions: str, sow: str = "") -> str:
    return f"""<AMPSConfig><Name>actions-test</Name>
<Admin><InetAddr>127.0.0.1:0</InetAddr></Admin>
{TRANSPORTS}
<TransactionLog><JournalDirectory>{d}/journal</JournalDirectory>
  <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
<SOW>{sow}</SOW>
<Actions>{actions}</Actions>
</AMPSConfig>"""


def keyed(name: str, d, key: str = "/id") -> str:
    return (f"<Topic><Name>{name}</Name><MessageType>json</MessageType><Key>{key}</Key>"
            f"<FileName>{d}/sow/%n.sow</FileName></Topic>")


def action(on: str, *steps: str) -> str:
    return f"<Action>{on}{''.join(steps)}</Action>"


def module(kind: str, name: str, **options: str) -> str:
    opts = "".join(f"<{k}>{v}</{k}>" for k, v in options.items())
    return f"<{kind}><Module>amps-action-{name}</Module>" + (
        f"<Options>{opts}</Options>" if opts else "") + f"</{kind}>"


def publish_to(topic: str, data: str, **more: str) -> str:
    return module("Do", "do-publish-message", Topic=topic, MessageType=more.pop("MessageType", "json"),
                  Data=data, **more)


class Started:
    """A server on a test clock, its clients, and the clock's time."""

    def __init__(self, d, actions: str, sow: str = "", start: float | None = None) -> None:
        self.clock = TestClock(start=start)
        self.srv = ServerThread(loads_config(config(d, actions, sow), "actions.xml"),
                                timebase=self.clock).start()
        self.clients: list = []

    def client(self, name: str, transport: int = 0, mt: str = "json"):
        c = AMPS.Client(name)
        c.connect(self.uri(transport, mt))
        c.logon(5000)
        self.clients.append(c)
        return c

    def uri(self, transport: int = 0, mt: str = "json") -> str:
        return f"tcp://127.0.0.1:{self.srv.server.listeners[transport].port}/amps/{mt}"

    def advance(self, seconds: float) -> dict:
        return self.srv.http(f"/emulator/clock/advance?seconds={seconds}", "POST")

    def now(self) -> float:
        return self.srv.call(self.clock.time)

    def stop(self) -> None:
        for c in self.clients:
            try:
                c.close()
            except AMPS.AMPSException:
                pass
        self.srv.stop()


@pytest.fixture
def started(tmp_path):
    made: list[Started] = []

    def make(actions: str, sow: str = "", start: float | None = None, sub: str = "") -> Started:
        s = Started(tmp_path / sub if sub else tmp_path, actions, sow, start)
        made.append(s)
        return s

    yield make
    for s in reversed(made):
        s.stop()


class Box(Collector):
    """The JSON bodies of the publishes a subscription got."""

    def __init__(self) -> None:
        super().__init__(lambda m: (m.get_command(), m.get_topic(), m.get_data()))

    def bodies(self, topic: str | None = None) -> list:
        return [json.loads(d) for c, t, d in self.items
                if c in ("publish", "oof") and (topic is None or t == topic)]


def watch(c, *topics: str) -> Box:
    box = Box()
    for t in topics:
        c.subscribe(box, t)
    return box


def marked(box: Box, publisher, topic: str, then_expect: int) -> list:
    """Publish a marker to ``topic`` and wait for it: everything the box got before it."""
    publisher.publish(topic, '{"marker":true}')
    assert box.wait_until(lambda items: any('"marker"' in d for _, t, d in items if t == topic))
    got = [b for b in box.bodies(topic) if b != {"marker": True}]
    assert len(got) == then_expect, got
    return got


# -- C.3 1, 2: on-schedule ---------------------------------------------------------------------

def test_1_every_second_publishes_once_per_second_advanced(started):
    s = started(action(module("On", "on-schedule", Every="1s", Name="beat"),
                       publish_to("heartbeat", '{"t":{{AMPS_UNIX_TIMESTAMP}},"n":"{{AMPS_SCHEDULE_NAME}}"}')))
    c = s.client("watcher")
    box = watch(c, "heartbeat")
    t0 = int(s.now())
    assert s.advance(3)["timers_run"] >= 3
    assert box.wait_for(3)
    assert [b["t"] for b in box.bodies()] == [t0 + 1, t0 + 2, t0 + 3]
    assert {b["n"] for b in box.bodies()} == {"beat"}
    marked(box, c, "heartbeat", 3)  # nothing more without the clock moving


def _local(day: dt.date, hour: int, minute: int = 0) -> float:
    return dt.datetime(day.year, day.month, day.day, hour, minute).timestamp()


def test_2_a_nightly_delete_of_closed_records_older_than_a_day(started, tmp_path):
    day = dt.date.today()
    delete = module("Do", "do-delete-sow", Topic="tickets", MessageType="json",
                    Filter="/status = 'closed' AND LAST_UPDATED() &lt; ({{AMPS_UNIX_TIMESTAMP}} - 86400)")
    s = started(action(module("On", "on-schedule", Every="02:00"), delete),
                sow=keyed("tickets", tmp_path), start=_local(day, 1, 30))
    c = s.client("ops")
    oof = Box()
    c.execute_async(AMPS.Command("subscribe").set_topic("tickets").set_options("oof"), oof)
    c.publish("tickets", '{"id":1,"status":"closed"}')
    c.publish("tickets", '{"id":2,"status":"open"}')
    c.flush(5000)
    s.advance(30 * 60)  # 02:00 today: nothing is a day old yet
    s.advance(60 * 60)
    c.publish("tickets", '{"id":3,"status":"closed"}')  # 03:00: 23 h old at the next run
    c.flush(5000)
    s.advance(23 * 3600)  # 02:00 tomorrow
    assert oof.wait_until(lambda items: any(cmd == "oof" for cmd, _, _ in items))
    left = sorted(json.loads(m.get_data())["id"] for m in c.sow("tickets", timeout=5000)
                  if m.get_command() == "sow")
    assert left == [2, 3]
    assert [b["id"] for cmd, _, d in oof.items if cmd == "oof" for b in [json.loads(d)]] == [1]


# -- C.3 3: on-startup -------------------------------------------------------------------------

def _sow(c, topic: str) -> list:
    return [json.loads(m.get_data()) for m in c.sow(topic, timeout=5000) if m.get_command() == "sow"]


def test_3_on_startup_seeds_before_the_first_client_and_once_per_key(started, tmp_path):
    actions = action(module("On", "on-startup"),
                     publish_to("config", '{"id":1,"mode":"live","by":"{{AMPS_INSTANCE_NAME}}"}'))
    s = started(actions, sow=keyed("config", tmp_path))
    assert _sow(s.client("reader"), "config") == [{"id": 1, "mode": "live", "by": "actions-test"}]
    s.stop()
    again = started(actions, sow=keyed("config", tmp_path))
    assert _sow(again.client("reader2"), "config") == [{"id": 1, "mode": "live", "by": "actions-test"}]


# -- C.3 4, 5, 6: condition timeouts and alerts -------------------------------------------------

STALE = action(module("On", "on-message-condition-timeout", Topic="Orders", MessageType="json",
                      Filter="/status = 'PENDING'", Duration="5s"),
               publish_to("Orders_Stale", "{{AMPS_DATA}}"))


def test_4_an_order_left_pending_fires_once(started, tmp_path):
    s = started(STALE, sow=keyed("Orders", tmp_path))
    c = s.client("trader")
    box = watch(c, "Orders_Stale")
    c.publish("Orders", '{"id":1,"status":"PENDING"}')
    c.publish("Orders", '{"id":2,"status":"PENDING"}')
    c.flush(5000)
    s.advance(3)
    c.publish("Orders", '{"id":2,"status":"FILLED"}')  # filled after 3 s: no alarm
    c.publish("Orders", '{"id":1,"status":"PENDING","note":"still"}')  # an update that still matches
    c.flush(5000)
    s.advance(2)
    assert box.wait_for(1)
    s.advance(10)
    assert marked(box, c, "Orders_Stale", 1) == [{"id": 1, "status": "PENDING", "note": "still"}]


def test_5_a_stale_order_fires_again_right_after_a_restart(started, tmp_path):
    s = started(STALE, sow=keyed("Orders", tmp_path))
    c = s.client("trader")
    c.publish("Orders", '{"id":7,"status":"PENDING"}')
    c.publish("Orders", '{"id":8,"status":"PENDING"}')
    c.flush(5000)
    s.advance(3)
    c.publish("Orders", '{"id":8,"status":"FILLED"}')
    c.flush(5000)
    s.advance(3)
    later = s.now()
    s.stop()
    # the clock goes on from where it was (real time moves on between runs too)
    again = started(STALE, sow=keyed("Orders", tmp_path), start=later + 1)
    r = again.client("reader")
    box = Box()
    r.bookmark_subscribe(box, "Orders_Stale", AMPS.Client.Bookmarks.EPOCH)
    assert box.wait_for(2)
    marked(box, r, "Orders_Stale", 2)
    assert [b["id"] for b in box.bodies() if "id" in b] == [7, 7]


def test_6_on_alert_runs_exactly_one_path_per_order(started, tmp_path):
    alert = action(module("On", "on-alert", Topic="Orders", MessageType="json",
                          Filter="/status = 'PENDING'", Duration="5s", OOFEvent="done",
                          TimeoutEvent="late", EventVariable="EV"),
                   publish_to("alerts", '{"order":{{AMPS_DATA}},"ev":"{{EV}}"}'),
                   module("If", "if-condition", Condition='"{{EV}}" = "late"'),
                   publish_to("late", "{{AMPS_DATA}}"))
    s = started(alert, sow=keyed("Orders", tmp_path))
    c = s.client("trader")
    box = watch(c, "alerts", "late")
    c.publish("Orders", '{"id":1,"status":"PENDING"}')
    c.publish("Orders", '{"id":2,"status":"PENDING"}')
    c.flush(5000)
    s.advance(2)
    c.publish("Orders", '{"id":1,"status":"FILLED"}')
    c.flush(5000)
    s.advance(5)
    c.sow_delete("Orders", "/id = 2")  # after its timeout: no second alert
    s.advance(10)
    got = marked(box, c, "alerts", 2)
    assert sorted((b["order"]["id"], b["ev"]) for b in got) == [(1, "done"), (2, "late")]
    assert marked(box, c, "late", 1) == [{"id": 2, "status": "PENDING"}]


# -- C.3 7: transports -------------------------------------------------------------------------

def _connects(uri: str) -> bool:
    c = AMPS.Client("probe")
    try:
        c.connect(uri)
        c.logon(2000)
    except AMPS.AMPSException:
        return False
    c.close()
    return True


def test_7_disable_and_enable_a_transport_from_a_publish(started):
    s = started(action(module("On", "on-publish-message", Topic="disableX", MessageType="json"),
                       module("Do", "do-disable-transport", Transport="test-x")) +
                action(module("On", "on-publish-message", Topic="enableX", MessageType="json"),
                       module("Do", "do-enable-transport", Transport="test-x")))
    c = s.client("admin")
    inside = s.client("inside", transport=2)
    box = watch(c, "chat")
    c.publish("disableX", "{}")
    c.flush(5000)
    assert until(lambda: not _connects(s.uri(2)))
    inside.publish("chat", '{"still":"here"}')  # the existing connection stays
    assert box.wait_for(1) and box.bodies() == [{"still": "here"}]
    assert _connects(s.uri(0))  # other transports are untouched
    c.publish("enableX", "{}")
    c.flush(5000)
    assert until(lambda: _connects(s.uri(2)))


# -- C.3 8, 9: extract values and conditions ----------------------------------------------------

def test_8_extract_values_then_publish_them(started):
    s = started(action(module("On", "on-publish-message", Topic="trades", MessageType="json"),
                       module("Do", "do-extract-values", MessageType="json",
                              Value="SYM=/symbol</Value><Value>Q=/qty * 2"),
                       publish_to("derived", '{"symbol":"{{SYM}}","q":{{Q}}}')))
    c = s.client("p")
    box = watch(c, "derived")
    c.publish("trades", '{"symbol":"IBM","qty":5}')
    assert box.wait_for(1) and box.bodies() == [{"symbol": "IBM", "q": 10}]


def test_9_a_false_or_invalid_condition_stops_the_action(started, caplog):
    s = started(action(module("On", "on-publish-message", Topic="in", MessageType="json"),
                       module("If", "if-condition", Condition="/go = 1"),
                       publish_to("out", "{{AMPS_DATA}}")) +
                action(module("On", "on-publish-message", Topic="bad", MessageType="json"),
                       module("If", "if-condition", Condition="/x = = {{AMPS_DATA}}"),
                       publish_to("out", '{"never":1}')))
    c = s.client("p")
    box = watch(c, "out")
    c.publish("in", '{"go":0}')
    with caplog.at_level("ERROR", logger="amps_emulator.actions"):
        c.publish("bad", '{"x":1}')
        c.publish("in", '{"go":1}')
        assert marked(box, c, "out", 1) == [{"go": 1}]
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"
            and "invalid condition" in r.getMessage()]


# -- C.3 10: another message type --------------------------------------------------------------

def test_10_publish_nvfix_with_byte_variables(started):
    s = started(action(module("On", "on-publish-message", Topic="go", MessageType="json"),
                       publish_to("fixout", "id=1{{AMPS_BYTE_01}}x=2{{AMPS_BYTE_01}}",
                                  MessageType="nvfix")))
    fix = s.client("fixreader", transport=1, mt="nvfix")
    got = Collector(lambda m: bytes(m.get_data_raw()))
    fix.subscribe(got, "fixout")
    js = s.client("p")
    js.publish("go", "{}")
    assert got.wait_for(1) == [b"id=1\x01x=2\x01"]


# -- C.3 11: on-admin --------------------------------------------------------------------------

def _get(s: Started, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(s.srv.admin_uri + path, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_11_an_admin_path_runs_with_its_parameters(started):
    s = started(action(module("On", "on-admin", Path="seed", RequiredParameter="ID", Name="Seed one",
                              Description="publish a seed record"),
                       publish_to("seeded", '{"id":{{ID}},"who":"{{WHO}}"}')))
    c = s.client("p")
    box = watch(c, "seeded")
    listed = _get(s, "/amps/administrator/actions")[1]["actions"]
    assert listed == [{"id": "seed", "name": "Seed one", "description": "publish a seed record",
                       "required_parameters": ["ID"]}]
    assert _get(s, "/amps/administrator")[1]["administrator"]["actions"] == listed
    status, body = _get(s, "/amps/administrator/actions/seed")
    assert status == 400 and "ID" in body["error"]
    assert _get(s, "/amps/administrator/actions/nope?ID=1")[0] == 404
    assert _get(s, "/amps/administrator/actions/seed?ID=7&WHO=ops") == (200, {"action": "seed", "ran": 1})
    assert marked(box, c, "seeded", 1) == [{"id": 7, "who": "ops"}]


# -- C.3 12: disk usage and shutdown -----------------------------------------------------------

def _disk_check(threshold: str, d) -> str:
    return action(module("On", "on-schedule", Every="1m"),
                  module("If", "if-file-system-usage", Path=str(d), GreaterThan=threshold),
                  module("Do", "do-echo-message", Message="disk full: shutting down"),
                  module("Do", "do-shutdown"))


def test_12_a_full_disk_shuts_down_cleanly_and_a_roomy_one_does_not(started, tmp_path):
    usage = shutil.disk_usage(tmp_path)
    if 100.0 * (usage.total - usage.free) / usage.total >= 98.0:
        pytest.skip("the test disk is itself over 98% full")
    roomy = started(_disk_check("98%", tmp_path), sub="roomy")
    c = roomy.client("p")
    roomy.advance(60 * 5)
    c.publish("t", "{}")
    c.flush(5000)
    assert roomy.srv.server.ready and not roomy.srv.server.broker.stopping

    full = started(_disk_check("0%", tmp_path), sub="full")
    lost = threading.Event()
    d = full.client("q")
    d.set_disconnect_handler(lambda client: lost.set())
    full.advance(60)
    assert lost.wait(10)
    assert until(lambda: full.srv.loop.is_closed())  # the server's loop ended: a clean stop


# -- C.3 13: a publish loop ----------------------------------------------------------------------

def test_13_an_action_publishing_into_its_own_trigger_stops_at_the_depth_limit(started):
    s = started(action(module("On", "on-publish-message", Topic="A", MessageType="json"),
                       publish_to("A", '{"again":true}')))
    c = s.client("p")
    box = watch(c, "A", "B")
    c.publish("A", '{"first":true}')
    assert box.wait_for(1 + MAX_DEPTH)
    c.publish("B", '{"after":true}')  # the server still answers
    assert box.wait_until(lambda items: any(t == "B" for _, t, _ in items))
    assert len(box.bodies("A")) == 1 + MAX_DEPTH


# -- clients, subscriptions, oof, query, events -------------------------------------------------

def test_client_and_subscription_triggers(started):
    log_to = publish_to("events", '{"ev":"{{EV}}","client":"{{AMPS_CLIENT_NAME}}","topic":"{{AMPS_TOPIC}}"}')
    acts = "".join(action(module("On", name, **opts), module("Do", "do-translate-data", Data="x",
                                                             Value="EV", Default=ev), log_to)
                   for name, ev, opts in (
                       ("on-connect-client", "connect", {}),
                       ("on-logon-client", "logon", {}),
                       ("on-disconnect-client", "disconnect", {}),
                       ("on-subscribe", "subscribe", {"Topic": "^orders", "MessageType": "json"}),
                       ("on-unsubscribe", "unsubscribe", {"Topic": ".*", "MessageType": "json"})))
    s = started(acts)
    w = AMPS.Client("watcher")
    w.connect(s.uri())
    w.logon(5000)
    s.clients.append(w)
    box = Box()
    w.subscribe(box, "events")
    c = s.client("visitor")
    sub = c.subscribe(lambda m: None, "orders.eu")
    c.subscribe(lambda m: None, "other")  # not ^orders
    c.unsubscribe(sub)
    c.flush(5000)
    c.close()
    assert box.wait_until(lambda items: any('"disconnect"' in d for _, _, d in items))
    got = [(b["ev"], b["client"], b["topic"]) for b in box.bodies()]
    assert ("connect", "", "") in got and ("logon", "visitor", "") in got
    assert ("subscribe", "visitor", "orders.eu") in got
    assert ("unsubscribe", "visitor", "") in got
    assert ("disconnect", "visitor", "") in got
    assert not any(ev == "subscribe" and topic == "other" for ev, _, topic in got)


def test_oof_query_sow_counters_and_events(started, tmp_path):
    acts = (action(module("On", "on-oof-message", Topic="Orders", MessageType="json",
                          Filter="/status = 'open'", Type="match"),
                   module("Do", "do-extract-values", MessageType="json", Value="ID=/id"),
                   publish_to("closed", '{"id":{{ID}},"reason":"{{AMPS_REASON}}"}'))
            + action(module("On", "on-oof-message", Topic="Orders", MessageType="json", Type="delete"),
                     module("Do", "do-extract-values", MessageType="json", Value="ID=/id"),
                     module("Do", "do-increment-counter", Key="deletes", Value="N"),
                     publish_to("removed", '{"id":{{ID}},"n":{{N}},"reason":"{{AMPS_REASON}}"}'))
            + action(module("On", "on-admin", Path="best"),
                     module("Do", "do-query-sow", Topic="Orders", MessageType="json",
                            Filter="/status = 'open'", OrderBy="/px DESC", CaptureData="BEST",
                            DefaultData='{"id":0}'),
                     module("Do", "do-execute-event", Event="report"))
            + action(module("On", "on-execute-event", Event="report"),
                     publish_to("best", "{{BEST}}")))
    s = started(acts, sow=keyed("Orders", tmp_path))
    c = s.client("p")
    box = watch(c, "closed", "removed", "best")
    assert _get(s, "/amps/administrator/actions/best")[0] == 200  # nothing open yet: the default
    for i, px in ((1, 10), (2, 30), (3, 20)):
        c.publish("Orders", json.dumps({"id": i, "status": "open", "px": px}))
    c.flush(5000)
    assert _get(s, "/amps/administrator/actions/best")[0] == 200
    c.publish("Orders", '{"id":2,"status":"filled","px":30}')  # out of focus of the filter
    c.flush(5000)
    c.sow_delete("Orders", "/id IN (1, 3)")
    assert marked(box, c, "best", 2) == [{"id": 0}, {"id": 2, "status": "open", "px": 30}]
    assert marked(box, c, "closed", 1) == [{"id": 2, "reason": "match"}]
    removed = marked(box, c, "removed", 2)
    assert sorted((b["id"], b["n"]) for b in removed) in ([(1, 1), (3, 2)], [(1, 2), (3, 1)])
    assert {b["reason"] for b in removed} == {"deleted"}


def test_on_shutdown_runs_first_and_echo_logs(started, caplog):
    s = started(action(module("On", "on-shutdown"),
                       module("Do", "do-echo-message", Message="bye from {{AMPS_INSTANCE_NAME}}")))
    with caplog.at_level("INFO", logger="amps_emulator.actions"):
        s.srv.stop()
    assert [r.getMessage() for r in caplog.records if getattr(r, "amps_id", "") == "29-0103"] \
        == ["bye from actions-test"]


# -- the Flink connector's pair of configs ------------------------------------------------------
# The shape of 60East/amps-integration-apache-flink amps-configs/amps{1,2}config.xml (two
# instances replicating to each other, a queue over "work", file logging), rewritten with
# ports chosen here and paths under the test's directory; its two actions as they are there:
# remove day-old journals at start-up, and every 10 s shut down when the disk is over 95% full.

FLINK_TOPICS = ("initial-publish", "with-ts", "work", "work-to-do", "checkpoint-failover")


def flink_config(d, me: int, peer_port: int) -> str:
    topics = "".join(f"<Topic><MessageType>json</MessageType><Name>{t}</Name></Topic>"
                     for t in FLINK_TOPICS)
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<AMPSConfig>
  <Name>AMPS-{me}</Name>
  <Group>ReplicationExample</Group>
  <Transports>
    <Transport><Name>any-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol></Transport>
    <Transport><Name>any-ws</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>websocket</Protocol></Transport>
    <Transport><Name>amps-replication</Name><Type>amps-replication</Type><InetAddr>localhost:0</InetAddr></Transport>
  </Transports>
  <Replication>
    <Destination>
      {topics}
      <Name>AMPS-{3 - me}</Name><PassThrough>.*</PassThrough><Group>ReplicationExample</Group>
      <SyncType>sync</SyncType>
      <Transport><InetAddr>localhost:{peer_port}</InetAddr><Type>amps-replication</Type></Transport>
    </Destination>
  </Replication>
  <Admin>
    <InetAddr>127.0.0.1:0</InetAddr><SQLTransport>any-ws</SQLTransport>
    <FileName>{d}/amps-{me}/stats.db</FileName>
    <WWWAuthenticate>Basic realm="AMPS Admin"</WWWAuthenticate>
    <ExternalInetAddr>10.0.2.108:8086</ExternalInetAddr>
  </Admin>
  <Logging>
    <Target><Protocol>stdout</Protocol><Level>warning</Level><IncludeErrors>00-0015</IncludeErrors></Target>
    <Target><Protocol>file</Protocol><Level>info</Level><FileName>{d}/amps-{me}/logs/amps.log</FileName>
      <RotationThreshold>10MB</RotationThreshold></Target>
  </Logging>
  <TransactionLog>
    <JournalDirectory>{d}/amps-{me}/journals</JournalDirectory><JournalSize>1GB</JournalSize>
    {topics}
  </TransactionLog>
  <SOW>
    <Queue><Name>work-to-do</Name><MessageType>json</MessageType><Semantics>at-most-once</Semantics>
      <UnderlyingTopic>work</UnderlyingTopic><MaxBacklog>50000</MaxBacklog>
      <MaxPerSubscriptionBacklog>10000</MaxPerSubscriptionBacklog></Queue>
  </SOW>
  <Actions>
    <Action>
      <On><Module>amps-action-on-startup</Module></On>
      <Do><Module>amps-action-do-remove-journal</Module><Options><Age>1d</Age></Options></Do>
    </Action>
    <Action>
      <On><Module>amps-action-on-schedule</Module>
        <Options><Name>Periodic file system disk usage check</Name><Every>10s</Every></Options></On>
      <If><Module>amps-action-if-file-system-usage</Module>
        <Options><Path>./</Path><GreaterThan>95%</GreaterThan></Options></If>
      <Do><Module>amps-action-do-echo-message</Module>
        <Options><Message>CRITICAL: Shutting down AMPS due to lack of disk space</Message></Options></Do>
      <Do><Module>amps-action-do-shutdown</Module></Do>
    </Action>
  </Actions>
</AMPSConfig>"""


@pytest.mark.parametrize("me", [1, 2])
def test_the_flink_configs_run_their_actions_without_errors(tmp_path, caplog, me):
    usage = shutil.disk_usage(".")
    if 100.0 * (usage.total - usage.free) / usage.total > 95.0:
        pytest.skip("this disk is over 95% full: the config would shut the server down")
    with caplog.at_level("INFO", logger="amps_emulator.actions"):
        srv = ServerThread(loads_config(flink_config(tmp_path, me, free_port()), f"amps{me}config.xml"),
                           timebase=TestClock()).start()
        try:
            assert any("amps-action-do-remove-journal: removed 0 journal file(s)" in r.getMessage()
                       for r in caplog.records)
            srv.http("/emulator/clock/advance?seconds=30", "POST")
            assert srv.call(lambda: [s.runs for s in srv.server.actions.schedules]) == [3]
            assert srv.call(lambda: srv.server.ready and not srv.server.broker.stopping)
            c = AMPS.Client("flink-check")
            c.connect(srv.uri)
            c.logon(5000)
            c.publish("work", '{"n":1}')
            c.flush(5000)
            c.close()
        finally:
            srv.stop()
    bad = [r for r in caplog.records if r.name == "amps_emulator.actions" and r.levelno >= 30]
    assert bad == []


# -- on-signal, through the command line (signal handlers live in the main thread) --------------

def test_on_signal_usr2_runs_its_action(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    cfg = tmp_path / "signal.xml"
    acts = action(module("On", "on-signal", Signal="SIGUSR2"),
                  publish_to("signals", '{"got":"{{AMPS_SIGNAL}}"}'))
    cfg.write_text(f"<AMPSConfig><Name>sig</Name>{TRANSPORTS}<Actions>{acts}</Actions></AMPSConfig>")
    proc = subprocess.Popen([sys.executable, "-m", "amps_emulator.server", str(cfg), "--memory"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ready: "), line
        c = AMPS.Client("sig-watch")
        c.connect(line.split()[1])
        c.logon(5000)
        box = watch(c, "signals")
        c.flush(5000)
        proc.send_signal(signal.SIGUSR2)
        assert box.wait_for(1) and box.bodies() == [{"got": "SIGUSR2"}]
        c.close()
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


def test_delta_and_update_only_publishes(started, tmp_path):
    s = started(action(module("On", "on-admin", Path="patch", RequiredParameter="ID"),
                       publish_to("pos", '{"id":{{ID}},"b":9}', Delta="true", UpdateOnly="true"))
                + action(module("On", "on-admin", Path="put"),
                         publish_to("pos", '{"id":{{ID}},"b":7}', UpdateOnly="false")),
                sow=keyed("pos", tmp_path))
    c = s.client("p")
    c.publish("pos", '{"id":1,"a":1,"b":2}')
    c.flush(5000)
    assert _get(s, "/amps/administrator/actions/patch?ID=1")[0] == 200
    assert _get(s, "/amps/administrator/actions/patch?ID=5")[0] == 200  # no record 5: nothing
    assert _get(s, "/amps/administrator/actions/put?ID=6")[0] == 200
    assert sorted(_sow(c, "pos"), key=lambda b: b["id"]) == [{"id": 1, "a": 1, "b": 9},
                                                             {"id": 6, "b": 7}]
