"""Historical SOW queries through the official client: ``sow`` and ``sow_and_subscribe`` with a
``bookmark`` on topics configured with ``History``."""

from __future__ import annotations

import json
import queue

import AMPS
import pytest

from tests.support.servers import config_xml

SOW_XML = """<SOW>
  <Topic><Name>hist</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{d}/sow/%n.sow</FileName>
    <History><Window>1d</Window><Granularity>0s</Granularity></History></Topic>
  <Topic><Name>hist-mem</Name><MessageType>json</MessageType><Key>/id</Key>
    <Durability>transient</Durability>
    <History><Window>1h</Window><Granularity>0s</Granularity></History></Topic>
  <Topic><Name>plain</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{d}/sow/%n.sow</FileName></Topic>
  <Topic><Name>unlogged</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{d}/sow/%n.sow</FileName>
    <History><Window>1d</Window><Granularity>0s</Granularity></History></Topic>
</SOW>"""


@pytest.fixture
def history_clients(clients_with):
    return clients_with(SOW_XML, txlog_topics=("hist.*", "plain"))


def rows(c, topic, bookmark=None, flt=None, options="timestamp"):
    cmd = AMPS.Command("sow").set_topic(topic).set_options(options)
    if flt:
        cmd.set_filter(flt)
    if bookmark is not None:
        cmd.set_bookmark(bookmark)
    out = []
    for m in c.execute(cmd):
        if m.get_command() == "sow":
            out.append((json.loads(m.get_data()), m.get_timestamp(), m.get_bookmark()))
    return out


def state(c, topic, bookmark=None, flt=None):
    return sorted((d["id"], d["v"]) for d, _, _ in rows(c, topic, bookmark, flt))


def publish_a_then_b(c, topic):
    """State A (ids 1-3 at v=a), then state B (1 and 2 updated, 3 deleted); returns the
    timestamp of state A and the bookmark of its last message."""
    for i in (1, 2, 3):
        c.publish(topic, json.dumps({"id": i, "v": "a"}))
    c.flush(5000)
    a = rows(c, topic)
    t_a = max(ts for _, ts, _ in a)
    last_bm = next(bm for d, _, bm in a if d["id"] == 3)
    c.publish(topic, json.dumps({"id": 1, "v": "b"}))
    c.publish(topic, json.dumps({"id": 2, "v": "b"}))
    c.flush(5000)
    c.execute(AMPS.Command("sow_delete").set_topic(topic).set_filter("/id = 3")
              .add_ack_type("completed"))
    c.publish(topic, json.dumps({"id": 1, "v": "c"}))
    c.flush(5000)
    return t_a, last_bm


@pytest.mark.parametrize("topic", ["hist", "hist-mem"])
def test_a_historical_sow_query_returns_the_state_as_of_the_bookmark(history_clients, topic):
    c = history_clients()
    t_a, last_bm = publish_a_then_b(c, topic)
    assert state(c, topic) == [(1, "c"), (2, "b")]
    a_state = [(1, "a"), (2, "a"), (3, "a")]
    assert state(c, topic, t_a) == a_state              # a timestamp
    assert state(c, topic, last_bm) == a_state          # a transaction-log bookmark
    assert state(c, topic, t_a, "/id >= 2") == [(2, "a"), (3, "a")]
    assert state(c, topic, "0") == []                   # the beginning of time
    assert state(c, topic, "0|1|") == [(1, "c"), (2, "b")]  # now: the current state
    assert state(c, topic, "20000101T000000Z") == []    # before the window: nothing
    # the records of a historical query carry their own time, before the bookmark's
    assert all(ts <= t_a for _, ts, _ in rows(c, topic, t_a))


def test_topics_without_history_ignore_the_bookmark(history_clients):
    c = history_clients()
    t_a, _ = publish_a_then_b(c, "plain")
    assert state(c, "plain", t_a) == [(1, "c"), (2, "b")]


def test_a_bad_or_unknown_bookmark_fails_the_query(history_clients):
    c = history_clients()
    c.publish("hist", json.dumps({"id": 1, "v": "a"}))
    c.flush(5000)
    for bad in ("not-a-bookmark", "[0:0|1|]", "123|456|"):
        with pytest.raises(AMPS.AMPSException):
            rows(c, "hist", bad)
    assert state(c, "hist") == [(1, "a")]  # the connection keeps working


def test_historical_sow_and_subscribe_replays_from_the_query_point(history_clients):
    c = history_clients()
    t_a, _ = publish_a_then_b(c, "hist")
    got: queue.Queue = queue.Queue()
    sub = AMPS.Command("sow_and_subscribe").set_topic("hist").set_bookmark(t_a) \
        .set_batch_size(10).set_sub_id("h1")
    c.execute_async(sub, lambda m: got.put((m.get_command(), m.get_data())))
    seen = []
    while True:
        cmd, data = got.get(timeout=5)
        seen.append((cmd, json.loads(data) if data else None))
        if cmd == "group_end":
            break
    assert sorted((d["id"], d["v"]) for k, d in seen if k == "sow") == [
        (1, "a"), (2, "a"), (3, "a")]
    # then every message published after that point, in order, once; then live ones
    c.publish("hist", json.dumps({"id": 4, "v": "live"}))
    replayed = []
    while len(replayed) < 4:
        cmd, data = got.get(timeout=5)
        if cmd == "p" or cmd == "publish":
            replayed.append(json.loads(data))
    assert [(d["id"], d["v"]) for d in replayed] == [(1, "b"), (2, "b"), (1, "c"), (4, "live")]
    assert got.empty()


def test_historical_sow_and_subscribe_needs_the_transaction_log(history_clients):
    c = history_clients()
    c.publish("unlogged", json.dumps({"id": 1, "v": "a"}))
    c.flush(5000)
    t = rows(c, "unlogged")[0][1]
    assert state(c, "unlogged", t) == [(1, "a")]  # a plain historical query works
    with pytest.raises(AMPS.AMPSException):
        list(c.execute(AMPS.Command("sow_and_subscribe").set_topic("unlogged")
                       .set_bookmark(t).set_sub_id("u1")))


def test_history_survives_a_kill_and_a_rebuild_from_the_log(tmp_path):
    import shutil

    from tests.support.procserver import ProcServer

    def make(d):
        return config_xml(d, txlog_topics=("hist.*", "plain"), extra=SOW_XML.format(d=d))

    srv = ProcServer.with_config(tmp_path, make)
    try:
        c = AMPS.Client("history-writer")
        c.connect(srv.uri)
        c.logon(5000)
        t_a, last_bm = publish_a_then_b(c, "hist")
        c.close()
        a_state = [(1, "a"), (2, "a"), (3, "a")]
        for restart in ("kill", "rebuild"):
            if restart == "kill":
                srv.kill()  # SIGKILL
            else:
                srv.stop()
                shutil.rmtree(tmp_path / "data" / "sow")  # rebuilt from the log
            srv.start()
            r = AMPS.Client(f"history-reader-{restart}")
            r.connect(srv.uri)
            r.logon(5000)
            assert state(r, "hist", t_a) == a_state, restart
            assert state(r, "hist", last_bm) == a_state, restart
            assert state(r, "hist") == [(1, "c"), (2, "b")], restart
            r.close()
    finally:
        srv.stop()
