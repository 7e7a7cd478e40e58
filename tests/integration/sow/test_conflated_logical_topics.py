"""Conflated topics over a ``Topic`` with a ``Pattern``, through the official client: one
conflated topic per logical topic of the container, named by ``TopicFormat`` (``%n``: the
logical topic's name), each changing at most once per ``Interval``. On the test clock, so an
interval ends only when a test moves time."""

from __future__ import annotations

import json

import AMPS
import pytest

from amps_emulator.config import loads_config
from amps_emulator.config.errors import ConfigError
from amps_emulator.server.core.clock import TestClock
from tests.support.clients import Collector, clients_for
from tests.support.servers import ServerThread, config_xml


def sow(d, durability: str = "transient", topic_format: str = "<TopicFormat>%n-C</TopicFormat>") -> str:
    keep = f"<FileName>{d}/sow/%n.sow</FileName>" if durability == "persistent" else \
        "<Durability>transient</Durability>"
    return f"""<SOW>
  <Topic><Name>TheRegexTopic</Name><Pattern>^/my/</Pattern><MessageType>json</MessageType>
    <Key>/id</Key>{keep}</Topic>
  <ConflatedTopic><Name>ConflateUnderlyingRegex</Name><MessageType>json</MessageType>
    <UnderlyingTopic>TheRegexTopic</UnderlyingTopic><Interval>2s</Interval>{topic_format}
    <Filter>/hide IS NULL</Filter></ConflatedTopic>
</SOW>"""


@pytest.fixture
def clock():
    return TestClock()


@pytest.fixture
def srv(tmp_path, clock):
    s = ServerThread(loads_config(config_xml(tmp_path, extra=sow(tmp_path)), "conflated.xml"),
                     timebase=clock).start()
    yield s
    s.stop()


@pytest.fixture
def connect(srv):
    yield from clients_for(srv.uri)


def rows(c, topic: str) -> list:
    return sorted((json.loads(m.get_data()) for m in c.sow(topic, timeout=5000)
                   if m.get_command() == "sow"), key=lambda d: d["id"])


def test_each_logical_topic_gets_its_own_conflated_topic(connect, srv, clock):
    c = connect("app")
    got = Collector(lambda m: (m.get_topic(), json.loads(m.get_data())))
    c.subscribe(got, "^/my/.*-C$")  # every conflated topic, before any exists
    named = Collector(lambda m: json.loads(m.get_data()))
    c.subscribe(named, "/my/trades-C")  # one by its name, before its logical topic has data
    for v in (1, 2, 3):
        c.publish("/my/orders", json.dumps({"id": 1, "v": v}))
    c.publish("/my/orders", '{"id":2,"v":9,"hide":true}')  # the Filter keeps it out
    c.publish("/my/trades", '{"id":7,"px":10}')
    c.flush(5000)
    assert rows(c, "/my/orders") == [{"id": 1, "v": 3}, {"id": 2, "v": 9, "hide": True}]
    assert rows(c, "/my/orders-C") == []  # the first update waits for the interval
    srv.call(lambda: clock.advance(2))
    assert got.wait_for(2)
    c.flush(5000)
    assert sorted(got.items, key=lambda t: t[0]) == [("/my/orders-C", {"id": 1, "v": 3}),
                                                     ("/my/trades-C", {"id": 7, "px": 10})]
    assert named.items == [{"id": 7, "px": 10}]
    assert rows(c, "/my/orders-C") == [{"id": 1, "v": 3}]
    assert rows(c, "/my/orders") != rows(c, "/my/orders-C")
    # one change per interval: two updates in it, the last one goes out
    c.publish("/my/orders", '{"id":1,"v":4}')
    c.publish("/my/orders", '{"id":1,"v":5}')
    c.flush(5000)
    srv.call(lambda: clock.advance(2))
    assert got.wait_for(3)
    assert got.items[2] == ("/my/orders-C", {"id": 1, "v": 5})


def test_a_conflated_topic_is_read_only_and_not_a_logical_topic_itself(connect, srv, clock):
    c = connect("app")
    with pytest.raises(AMPS.AMPSException):
        c.execute(AMPS.Command("publish").set_topic("/my/orders-C").set_data('{"id":1}')
                  .add_ack_type("processed"))
    c.publish("/my/orders", '{"id":1}')
    c.flush(5000)
    srv.call(lambda: clock.advance(2))
    assert rows(c, "/my/orders-C") == [{"id": 1}]
    assert rows(c, "/my/orders-C-C") == []  # not a conflated topic of a conflated topic


def test_the_conflated_topics_are_rebuilt_from_the_stored_logical_topics(tmp_path):
    xml = config_xml(tmp_path, extra=sow(tmp_path, "persistent"))
    first = ServerThread(loads_config(xml, "conflated.xml")).start()
    try:
        c = AMPS.Client("first")
        c.connect(first.uri)
        c.logon(5000)
        c.publish("/my/orders", '{"id":1,"v":1}')
        c.publish("/my/fills", '{"id":3}')
        c.flush(5000)
        c.close()
    finally:
        first.stop()
    again = ServerThread(loads_config(xml, "conflated.xml"), timebase=TestClock()).start()
    try:
        c = AMPS.Client("again")
        c.connect(again.uri)
        c.logon(5000)
        assert rows(c, "/my/orders-C") == [{"id": 1, "v": 1}]
        assert rows(c, "/my/fills-C") == [{"id": 3}]
        c.close()
    finally:
        again.stop()


@pytest.mark.parametrize("topic_format, why", [
    ("", "missing <TopicFormat>"),
    ("<TopicFormat>conflated</TopicFormat>", "must contain %n"),
    ("<TopicFormat>%n.C</TopicFormat>", "significant in a regular expression"),
])
def test_a_topic_format_is_required_and_checked_over_a_pattern(tmp_path, topic_format, why):
    with pytest.raises(ConfigError, match=why):
        loads_config(config_xml(tmp_path, extra=sow(tmp_path, topic_format=topic_format)), "c.xml")
