"""The ``Options`` of ``amps-action-on-publish-message`` (the subscription AMPS makes of the
action), through the official Python client on the test clock: a select list projects
``AMPS_DATA``, conflation runs the action once per key per interval with the latest
message, ``no_sowkey`` and ``non_regex_topic`` mean what they mean for a client.

Each action tells what it saw by publishing to ``seen``; "nothing more" is shown by a
marker published after (one connection's messages arrive in order)."""

from __future__ import annotations

import pytest

from amps_emulator.config import loads_config
from amps_emulator.config.errors import ConfigError
from amps_emulator.protocol.bookmarks import format_timestamp
from tests.integration.actions.test_actions import (  # noqa: F401 (started: a fixture)
    action,
    config,
    keyed,
    marked,
    module,
    publish_to,
    started,
    watch,
)
from tests.support.clients import Collector

SEEN = ('{"data":{{AMPS_DATA}},"len":{{AMPS_DATA_LENGTH}},"key":"{{AMPS_SOW_KEY}}",'
        '"ts":"{{AMPS_TIMESTAMP}}","topic":"{{AMPS_TOPIC}}"}')


def on_publish(topic: str, options: str, **more: str) -> str:
    return action(module("On", "on-publish-message", Topic=topic, MessageType="json",
                         Options=options, **more), publish_to("seen", SEEN))


def test_a_select_list_projects_what_the_action_sees(started, tmp_path):
    s = started(on_publish("orders", "select=[-/,+/id,+/px]"), sow=keyed("orders", tmp_path))
    watcher = s.client("watcher")
    box = watch(watcher, "seen")
    publisher = s.client("publisher")
    publisher.publish("orders", '{"id":1,"px":2.5,"secret":"x","qty":3}')
    publisher.flush(5000)
    (one,) = marked(box, watcher, "seen", 1)
    assert one["data"] == {"id": 1, "px": 2.5}
    assert one["len"] == len(b'{"id":1,"px":2.5}')


def test_conflation_runs_once_per_key_per_interval_with_the_latest_message(started, tmp_path):
    s = started(on_publish("orders", "conflation=1s"), sow=keyed("orders", tmp_path))
    watcher = s.client("watcher")
    box = watch(watcher, "seen")
    publisher = s.client("publisher")
    for v in (1, 2, 3):
        publisher.publish("orders", f'{{"id":1,"v":{v}}}')
    publisher.publish("orders", '{"id":2,"v":1}')
    publisher.flush(5000)
    marked(box, watcher, "seen", 0)  # the interval has not ended: nothing ran
    s.advance(0.5)
    publisher.publish("orders", '{"id":1,"v":4}')  # still the first interval of id 1
    publisher.flush(5000)
    marked(box, watcher, "seen", 0)
    s.advance(0.6)  # both keys' intervals end: one run each, with the latest message
    assert box.wait_until(lambda items: len(box.bodies("seen")) == 4)  # (2 markers + 2 runs)
    runs = [b for b in box.bodies("seen") if b != {"marker": True}]
    assert sorted((r["data"]["id"], r["data"]["v"]) for r in runs) == [(1, 4), (2, 1)]
    # a publish after the interval starts a new one
    publisher.publish("orders", '{"id":1,"v":5}')
    publisher.flush(5000)
    s.advance(1.0)
    assert box.wait_until(lambda items: any(b.get("data", {}).get("v") == 5
                                            for b in box.bodies("seen")))
    assert len([b for b in box.bodies("seen") if b != {"marker": True}]) == 3


def test_a_conflation_key_conflates_a_topic_without_a_sow_key(started):
    s = started(on_publish("trades", "conflation=200ms,conflation_key=[/sym]"))
    watcher = s.client("watcher")
    box = watch(watcher, "seen")
    publisher = s.client("publisher")
    for sym, n in (("A", 1), ("B", 1), ("A", 2), ("A", 3), ("B", 2)):
        publisher.publish("trades", f'{{"sym":"{sym}","n":{n}}}')
    publisher.flush(5000)
    s.advance(0.2)
    assert box.wait_for(2)
    got = marked(box, watcher, "seen", 2)
    assert sorted((r["data"]["sym"], r["data"]["n"]) for r in got) == [("A", 3), ("B", 2)]


def test_with_timestamp_a_conflated_run_is_stamped_when_its_first_message_came(started, tmp_path):
    s = started(on_publish("orders", "conflation=1s,timestamp,no_sowkey"),
                sow=keyed("orders", tmp_path), start=1_700_000_000.0)
    watcher = s.client("watcher")
    box = watch(watcher, "seen")
    publisher = s.client("publisher")
    first = s.now()
    publisher.publish("orders", '{"id":1,"v":1}')
    publisher.flush(5000)
    s.advance(0.5)
    publisher.publish("orders", '{"id":1,"v":2}')
    publisher.flush(5000)
    s.advance(0.5)
    assert box.wait_for(1)
    (run,) = marked(box, watcher, "seen", 1)
    assert run["data"] == {"id": 1, "v": 2}
    assert run["ts"] == format_timestamp(round(first * 1_000_000))
    assert run["key"] == ""  # no_sowkey


def test_without_options_every_publish_runs_the_action_at_once(started, tmp_path):
    s = started(on_publish("orders", ""), sow=keyed("orders", tmp_path))
    watcher = s.client("watcher")
    box = watch(watcher, "seen")
    publisher = s.client("publisher")
    for v in (1, 2):
        publisher.publish("orders", f'{{"id":1,"v":{v}}}')
    publisher.flush(5000)
    got = marked(box, watcher, "seen", 2)
    assert [r["data"]["v"] for r in got] == [1, 2] and all(r["key"] for r in got)


def test_non_regex_topic_takes_the_topic_literally(started):
    s = started(on_publish("orders.eu", "non_regex_topic")
                + on_publish("orders.us", ""))
    watcher = s.client("watcher")
    box = watch(watcher, "seen")
    publisher = s.client("publisher")
    for topic in ("ordersXeu", "orders.eu", "ordersXus"):
        publisher.publish(topic, '{"n":1}')
    publisher.flush(5000)
    got = marked(box, watcher, "seen", 2)
    assert sorted(r["topic"] for r in got) == ["orders.eu", "ordersXus"]


@pytest.mark.parametrize(("options", "reason"), [
    ("select=[/a,", "unbalanced brackets"),
    ("select=[+]", "invalid <Options>"),
    ("conflation=1s,conflation_key=[not a path]", "invalid <Options>"),
])
def test_a_bad_value_is_a_config_error_at_the_options_line(tmp_path, options, reason):
    from amps_emulator.server.app import Server  # (the engine checks what needs the server's parsers)

    text = config(tmp_path, on_publish("orders", options), keyed("orders", tmp_path))
    with pytest.raises(ConfigError) as info:
        Server(loads_config(text, "opts.xml"))
    (issue,) = info.value.errors
    assert issue.file == "opts.xml" and reason in issue.reason, issue
    assert issue.line == next(n for n, line in enumerate(text.splitlines(), 1)
                              if f"<Options>{options}</Options>" in line)


def test_an_action_on_a_queue_takes_no_lease(started, tmp_path):
    queues = ("<Queue><Name>work</Name><MessageType>json</MessageType>"
              "<LeasePeriod>60s</LeasePeriod></Queue>"
              "<Queue><Name>jobs</Name><MessageType>json</MessageType>"
              "<UnderlyingTopic>jobs-in</UnderlyingTopic></Queue>")
    s = started(on_publish("work", "") + on_publish("jobs", ""), sow=queues)
    warned = [w for w in s.srv.server.config.warnings if "names the queue" in w.reason]
    assert len(warned) == 2
    watcher = s.client("watcher")
    box = watch(watcher, "seen")
    publisher = s.client("publisher")
    publisher.publish("work", '{"job":1}')
    publisher.publish("jobs", '{"job":2}')  # goes to jobs-in: the action on "jobs" sees none
    publisher.flush(5000)
    assert [r["data"] for r in marked(box, watcher, "seen", 1)] == [{"job": 1}]
    worker = s.client("worker")
    got = Collector(lambda m: m.get_data())
    worker.subscribe(got, "work")
    # the action leased nothing: the queue's consumer gets the message
    assert got.wait_for(1) and got.items == ['{"job":1}']
