"""60East's own sample programs (``samples/`` of the amps-python-client source package) run
against the emulator and behave as their comments say. Skipped where that package is not
unpacked (see GUIDE.md); nothing of it is copied here: each program is run from where it lies,
only its hard-coded port is pointed at this test's server.

The config is ours, with the topics the samples use as their ``sample.xml`` defines them (that
``sample.xml`` itself starting unchanged is tested in tests/integration/config/test_config_startup.py)."""

from __future__ import annotations

import re

import pytest

from tests.support.samples import SAMPLES, Program
from tests.support.servers import config_xml, start_server

pytestmark = pytest.mark.skipif(SAMPLES is None, reason="the amps-python-client source package "
                                "(samples/) is not unpacked here")

TOPICS = """<SOW>
  <Topic><Name>messages-sow</Name><MessageType>json</MessageType><Key>/messageNumber</Key>
    <Expiration>4h</Expiration><Durability>transient</Durability></Topic>
  <Queue><Name>sample-queue</Name><MessageType>json</MessageType>
    <UnderlyingTopic>sample-queue-source</UnderlyingTopic><FairnessModel>round-robin</FairnessModel>
    <MaxPerSubscriptionBacklog>1</MaxPerSubscriptionBacklog></Queue>
</SOW>"""


@pytest.fixture(scope="module")
def samples_srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("samples")
    s = start_server(config_xml(d, txlog_topics=("messages-history", "sample-queue-source",
                                                 "sample-queue.*"), extra=TOPICS))
    yield s
    s.stop()


@pytest.fixture
def run(samples_srv, tmp_path):
    started: list[Program] = []

    def start(name: str) -> Program:
        p = Program(samples_srv, name, tmp_path)
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()


def subscribed(srv, topic: str, timeout: float = 10.0) -> None:
    """Wait until the server has a subscription on ``topic`` (the samples print nothing then)."""
    import time

    def present() -> bool:  # read only: the router's cache belongs to the server thread
        return any(s.topic == topic for c in list(srv.server.broker.by_name.values())
                   for s in list(c.subs.values()))

    deadline = time.monotonic() + timeout
    while not present():
        assert time.monotonic() < deadline, f"nobody subscribed to {topic}"
        time.sleep(0.01)


def test_console_publisher_and_subscriber(samples_srv, run):
    sub = run("AMPSConsoleSubscriber.py")
    subscribed(samples_srv, "messages")
    assert run("AMPSConsolePublisher.py").finish() == []
    assert sub.lines(1) == ['{ "hi" : "Hello, world!"}']


def test_sow_query_then_sow_and_subscribe_then_oof(samples_srv, run):
    assert run("AMPSSOWConsolePublisher.py").finish() == []
    out = run("AMPSSOWConsoleSubscriber.py").finish()
    assert out[0] == "Receiving messages from the SOW." and out[-1] == "Done receiving messages from the SOW."
    assert sorted(out[1:-1]) == sorted(
        ['{ "text":"This is new information", "messageNumber":5 }' if n == 5
         else '{ "text":"Hello, world!", "messageNumber": %d }' % n for n in range(10)])

    live = run("AMPSSOWandSubscribeConsoleSubscriber.py")
    assert len(live.lines(until="Done receiving")) == 12
    run("AMPSSOWConsolePublisher.py").finish()
    got = live.lines(12 + 11)
    assert [line.split(" : ")[0] for line in got[12:]] == ["(publish)"] * 11

    oof = run("AMPSSOWandSubscribeWithOOF.py")
    oof.lines(until="Done receiving")
    assert run("AMPSUpdateForOOF.py").finish() == []
    out = oof.lines(until="expired :", timeout=20)
    reasons = [line.split(" : ")[0].strip() for line in out if " : " in line]
    assert reasons.count("match") == 8 and reasons.count("deleted") == 1 \
        and reasons.count("expired") == 1, out


def test_replay_publisher_and_bookmark_subscriber(run):
    pub = run("AMPSPublishForReplay.py")
    pub.lines(until="Published 10 messages")  # ten sets of nine follow, a second apart
    sub = run("AMPSSubscribeForReplay.py")
    out = sub.finish()
    assert [int(re.search(r'"orderId"=(\d+)', line).group(1)) for line in out] == list(range(1, 11))


def test_queue_publisher_and_consumer(run):
    assert run("AMPSQueuePublisher.py").finish() == []
    consumer = run("AMPSQueueConsumer.py")  # loops until killed
    out = consumer.lines(1000)
    assert out == ['{ "hi" : "Hello, world! this is message %d"}' % i for i in range(1000)]
