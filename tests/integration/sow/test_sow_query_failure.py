"""A SOW query that fails once its results have begun (``group_begin`` sent, the ``processed``
ack already a success) still ends for the official client: the server sends ``group_end`` and
then the failure on the acks that end the query (``completed``, ``stats``). Before, the
failure went out as a second ``processed`` ack, which the client's query stream does not wait
for: ``execute()`` and ``sow()`` hung waiting for ``group_end`` and ``completed``.

Every query here reads its stream with the client's own timeout (``MessageStream.timeout``:
the iteration yields None when nothing arrives in time), so a regression fails instead of
hanging.

The real failure: an aggregated query on a FIX topic whose projection names a target a FIX
body cannot hold (``/TotalCost`` is not a tag). The aggregation runs after ``group_begin``,
and writing the first aggregated record fails. Plain, ``sow_and_subscribe`` and paginated
queries have no such failure once their snapshot is read, so for them a topic step that
raises after the snapshot stands in for one (an internal error: ``unknown error``).
"""

from __future__ import annotations

import json

import AMPS
import pytest

from amps_emulator.protocol.topics import qualify
from tests.support.clients import client_for
from tests.support.servers import start_server

WAIT_MS = 5000  # how long the client waits for the next message of a query before giving up

CONFIG = """<AMPSConfig><Name>query-failure</Name>
<Transports><Transport><Name>any</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
  <Protocol>amps</Protocol></Transport></Transports>
<SOW>
  <Topic><Name>fills</Name><MessageType>fix</MessageType><Key>/11</Key>
    <Durability>transient</Durability></Topic>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
    <Durability>transient</Durability></Topic>
</SOW>
</AMPSConfig>"""

#: an aggregation whose output cannot be written as FIX: 55 (symbol), 38 (quantity)
BAD_PROJECTION = "grouping=[/55],projection=[/55,SUM(/38) AS /TotalCost]"
GOOD_PROJECTION = "grouping=[/55],projection=[/55,SUM(/38) AS /38]"


@pytest.fixture
def fix_sow_srv():
    s = start_server(CONFIG)
    yield s
    s.stop()


def _load_fills(c, n: int = 6) -> None:
    for i in range(n):
        c.publish("fills", f"11=F{i}\x0155=S{i % 3}\x0138={10 + i}\x01")
    c.publish_flush(WAIT_MS)


def _load_orders(c, n: int = 40) -> None:
    for i in range(n):
        c.publish("orders", json.dumps({"id": i, "v": i}))
    c.publish_flush(WAIT_MS)


def _answer(stream, subscription: bool = False) -> list[tuple[str, str, str, str]]:
    """Everything a query stream yields until it ends, as (command, ack type, status, reason);
    fails if the stream goes quiet for WAIT_MS before it ends. A ``sow`` stream ends by
    itself (after ``group_end`` and the ack it waits for); a ``sow_and_subscribe`` stream is
    a subscription's, which goes on: ``subscription`` reads it to its ``completed`` ack."""
    stream.timeout(WAIT_MS)
    got = []
    for m in stream:
        assert m is not None, f"the query did not end: {got} and then nothing for {WAIT_MS} ms"
        got.append((m.get_command(), m.get_ack_type() or "", m.get_status() or "",
                    m.get_reason() or ""))
        if subscription and got[-1][:2] == ("ack", "completed"):
            stream.close()
            break
    return got


def _shapes(got: list[tuple[str, str, str, str]]) -> list[tuple[str, ...]]:
    """The answer without its records: the delimiters and the acks."""
    return [(cmd, *rest) if cmd == "ack" else (cmd,) for cmd, *rest in got if cmd != "sow"]


def _stepped(srv, topic: str) -> None:
    """Make queries on ``topic`` read in steps of one record (the failure then comes in a
    later loop step, not while the command is dispatched)."""
    srv.server.sow_service.get(topic).query_chunk = 1  # (a topic key: name and type)


@pytest.mark.parametrize("steps", [False, True], ids=["at-once", "in-steps"])
def test_an_aggregated_query_failing_after_group_begin_ends_with_a_failed_completed_ack(
        fix_sow_srv, steps):
    c = client_for(fix_sow_srv, "agg", "fix")
    try:
        _load_fills(c)
        if steps:
            _stepped(fix_sow_srv, qualify("fills", "fix"))
        cmd = AMPS.Command("sow").set_topic("fills").set_options(BAD_PROJECTION) \
            .add_ack_type("processed").add_ack_type("completed")
        assert _shapes(_answer(c.execute(cmd))) == [
            ("ack", "processed", "success", ""), ("group_begin",), ("group_end",),
            ("ack", "completed", "failure", "invalid options")]
        # the connection goes on: the same aggregation written as FIX answers in full
        good = AMPS.Command("sow").set_topic("fills").set_options(GOOD_PROJECTION) \
            .add_ack_type("completed")
        got = _answer(c.execute(good))
        assert [x[0] for x in got].count("sow") == 3
        assert got[-1][:3] == ("ack", "completed", "success")
    finally:
        c.close()


def test_a_failed_query_with_a_stats_ack_fails_on_completed_and_stats(fix_sow_srv):
    c = client_for(fix_sow_srv, "agg-stats", "fix")
    try:
        _load_fills(c)
        cmd = AMPS.Command("sow").set_topic("fills").set_options(BAD_PROJECTION) \
            .add_ack_type("completed").add_ack_type("stats")
        assert _shapes(_answer(c.execute(cmd))) == [
            ("group_begin",), ("group_end",),
            ("ack", "completed", "failure", "invalid options"),
            ("ack", "stats", "failure", "invalid options")]
    finally:
        c.close()


def test_client_sow_returns_when_its_query_fails_after_group_begin(fix_sow_srv):
    """``Client.sow()`` asks for ``completed`` itself and keeps that ack from the caller: the
    iteration ends after ``group_end``."""
    c = client_for(fix_sow_srv, "agg-sow", "fix")
    try:
        _load_fills(c)
        got = _answer(c.sow("fills", options=BAD_PROJECTION))
        assert _shapes(got) == [("group_begin",), ("group_end",)]
    finally:
        c.close()


def test_an_aggregated_subscription_failing_after_group_begin_is_not_left_behind(fix_sow_srv):
    c = client_for(fix_sow_srv, "agg-sub", "fix")
    try:
        _load_fills(c)
        cmd = AMPS.Command("sow_and_subscribe").set_topic("fills") \
            .set_options(BAD_PROJECTION).set_sub_id("agg-sub-1").add_ack_type("completed")
        assert _shapes(_answer(c.execute(cmd), subscription=True)) == [
            ("group_begin",), ("group_end",), ("ack", "completed", "failure", "invalid options")]
        conns = [x for x in fix_sow_srv.server.connections if x.client_name == "agg-sub"]
        assert len(conns) == 1 and conns[0].subs == {}
    finally:
        c.close()


def _fail_after_snapshot(srv, topic_name: str) -> None:
    """``topic_name``'s queries fail after the snapshot (so after ``group_begin``), in a
    later loop step than the command's own: the stand-in for a failure nothing else provokes
    there."""
    topic = srv.server.sow_service.get(topic_name)
    topic.query_chunk = 1
    original = topic.query_steps

    def failing(*args, **kwargs):
        inner = original(*args, **kwargs)
        next(inner)  # the plan and the snapshot (40 records read one a step: not done)
        yield
        yield  # the query goes on in a later loop step (sow_commands._step)
        inner.close()
        raise RuntimeError("the topic's store failed mid-query")

    topic.query_steps = failing


@pytest.mark.parametrize("command, options", [
    ("sow", None),
    ("sow_and_subscribe", None),
    ("sow_and_subscribe", "top_n=5,skip_n=2"),  # paginated: its window reads every match
], ids=["sow", "sow_and_subscribe", "paginated"])
def test_a_plain_query_failing_in_a_later_step_ends_with_a_failed_completed_ack(
        fix_sow_srv, command, options):
    c = client_for(fix_sow_srv, f"plain-{command}", "json")
    try:
        _load_orders(c)
        _fail_after_snapshot(fix_sow_srv, "orders")
        cmd = AMPS.Command(command).set_topic("orders").add_ack_type("completed")
        if options:
            cmd.set_options(options)
        assert _shapes(_answer(c.execute(cmd), subscription=command != "sow")) == [
            ("group_begin",), ("group_end",), ("ack", "completed", "failure", "unknown error")]
        conns = [x for x in fix_sow_srv.server.connections if x.client_name == f"plain-{command}"]
        assert len(conns) == 1 and conns[0].subs == {} and not conns[0].busy
        # the connection is still served: a publish round trip answers
        c.publish("orders", json.dumps({"id": 99, "v": 99}))
        c.publish_flush(WAIT_MS)
    finally:
        c.close()
