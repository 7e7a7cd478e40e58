"""Long SOW queries run in steps: the server keeps serving everyone else meanwhile, and the
querying client still sees one command processed in order (official client).

A gate wraps a topic's ``query_steps`` on the server: the query takes its snapshot, then
pauses (the event loop keeps turning) until the test releases it, so the tests choose exactly
what happens while a query is in progress instead of racing it.
"""

from __future__ import annotations

import json
import threading

import AMPS

from amps_emulator.sow.scan import BUILDING
from tests.support.sow import query

N = 200


class Gate:
    def __init__(self, srv, topic_name: str, chunk: int = 7) -> None:
        self.srv = srv
        self.started = threading.Event()  # a query has its snapshot and is paused
        self.stashed = threading.Event()  # the querying connection has stashed a command
        self.release = threading.Event()
        topic = srv.server.sow_service.get(topic_name)
        topic.query_chunk = chunk  # real steps in the engine too
        original = topic.query_steps

        def gated(*args, **kwargs):
            inner = original(*args, **kwargs)
            try:
                while next(inner) is BUILDING:  # a memo index the plan asked for, in steps
                    pass
                result, done = None, False  # plan and snapshot
            except StopIteration as stop:
                result, done = stop.value, True
            yield
            self.started.set()
            while not self.release.wait(0.001):  # (the server's thread lets the test's run)
                if any(c.busy and c._stash for c in srv.server.connections):
                    self.stashed.set()
                yield  # the loop serves other clients between steps
            if not done:
                result = yield from inner
            return result

        topic.query_steps = gated


def _load(c, n=N, v=0):
    for i in range(n):
        c.publish("orders", json.dumps({"id": i, "v": v, "sym": "S%d" % (i % 5)}))
    c.flush(5000)


def _collect(c, cmd):
    """Run ``cmd`` on a thread; returns (thread, list of (command, data or ack type))."""
    got: list = []

    def run():
        for m in c.execute(cmd):
            kind = m.get_command()
            if kind == "ack":
                got.append(("ack", m.get_ack_type()))
                if m.get_ack_type() == "completed":
                    return
            elif kind in ("sow", "p", "publish"):
                got.append((kind, json.loads(m.get_data())))
            else:
                got.append((kind, None))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, got


def test_a_paused_query_does_not_hold_up_other_clients(sow_server, sow_clients):
    gate = Gate(sow_server, "orders")
    a, b = sow_clients("reader"), sow_clients("writer")
    _load(b)
    t, got = _collect(a, AMPS.Command("sow").set_topic("orders").set_filter("/v >= 0")
                      .set_batch_size(13).add_ack_type("completed").set_timeout(20000))
    assert gate.started.wait(10)
    # While the query is in progress: other clients publish, flush and query.
    for i in range(50):
        b.publish("orders", json.dumps({"id": i, "v": 1, "sym": "X"}))
    b.flush(5000)
    assert len(query(b, "orders-eu")) == 0
    assert [k for k, _ in got] == ["group_begin"]  # no record before the query ends
    gate.release.set()
    t.join(20)
    rows = [d for k, d in got if k == "sow"]
    # the query answers from its snapshot: the 50 updates came after it
    assert sorted(r["id"] for r in rows) == list(range(N))
    assert all(r["v"] == 0 for r in rows)
    assert got[-1] == ("ack", "completed")
    assert sorted(r["id"] for r in query(b, "orders", "/v = 1") for r in [r[1]]) == list(range(50))


def test_sow_and_subscribe_delivers_what_was_published_during_the_query_after_it(
        sow_server, sow_clients):
    gate = Gate(sow_server, "orders")
    a, b = sow_clients("reader"), sow_clients("writer")
    _load(b)
    events: list = []
    cv = threading.Condition()

    def on(m):
        kind = m.get_command()
        with cv:
            if kind == "sow":
                events.append(("sow", json.loads(m.get_data())))
            elif kind in ("p", "publish"):
                events.append(("p", json.loads(m.get_data())))
            elif kind == "group_end":
                events.append(("group_end", None))
            cv.notify_all()

    a.execute_async(AMPS.Command("sow_and_subscribe").set_topic("orders")
                    .set_filter("/v >= 0").set_batch_size(10), on)
    assert gate.started.wait(10)
    published = [{"id": i, "v": 1, "sym": "X"} for i in range(50)]
    published.append({"id": N, "v": 1, "sym": "new"})  # a record the snapshot does not have
    for d in published:
        b.publish("orders", json.dumps(d))
    b.flush(5000)
    with cv:
        assert not events  # nothing reaches the subscriber before its query's results
    gate.release.set()
    with cv:
        assert cv.wait_for(lambda: sum(k == "p" for k, _ in events) >= len(published), 10)
    kinds = [k for k, _ in events]
    # the snapshot's records, then group_end, then every publish made during the query once
    assert kinds == ["sow"] * N + ["group_end"] + ["p"] * len(published)
    assert sorted(d["id"] for k, d in events if k == "sow") == list(range(N))
    assert all(d["v"] == 0 for k, d in events if k == "sow")
    assert [d for k, d in events if k == "p"] == published


def test_commands_sent_after_a_long_query_wait_for_it(sow_server, sow_clients):
    gate = Gate(sow_server, "orders")
    a, b = sow_clients("reader"), sow_clients("writer")
    _load(b)
    order: list[str] = []
    lock = threading.Lock()
    finished = threading.Event()

    def on_query(m):
        if m.get_command() == "ack" and m.get_ack_type() == "completed":
            with lock:
                order.append("query completed")

    def on_publish(m):
        if m.get_command() == "ack" and m.get_ack_type() == "processed":
            with lock:
                order.append("publish processed")
            finished.set()

    a.execute_async(AMPS.Command("sow").set_topic("orders").set_filter("/v >= 0")
                    .add_ack_type("completed"), on_query)
    assert gate.started.wait(10)
    # (the client waits for a processed ack inside execute_async: send from a thread)
    threading.Thread(target=a.execute_async, daemon=True, args=(
        AMPS.Command("publish").set_topic("orders")
        .set_data(json.dumps({"id": 0, "v": 9, "sym": "Z"})).add_ack_type("processed"),
        on_publish)).start()
    assert gate.stashed.wait(10)  # the server holds the publish back while the query runs
    assert not finished.is_set()
    gate.release.set()
    assert finished.wait(10)
    assert order == ["query completed", "publish processed"]
    assert [r["v"] for _, r in query(b, "orders", "/id = 0")] == [9]


def test_a_regex_query_over_several_topics_in_steps(sow_server, sow_clients):
    b = sow_clients("writer")
    _load(b)
    for i in range(30):
        b.publish("orders-eu", json.dumps({"id": i, "v": 2}))
    b.flush(5000)
    for name in ("orders", "orders-eu"):
        sow_server.server.sow_service.get(name).query_chunk = 7  # both topics read in steps
    rows = query(b, "orders.*", "/v >= 0", batch_size=11)
    assert sorted((r["v"], r["id"]) for _, r in rows) == \
        sorted([(0, i) for i in range(N)] + [(2, i) for i in range(30)])
    with_top = query(b, "orders.*", "/v >= 0", top_n=205)
    assert len(with_top) == 205


def test_a_paginated_subscription_catches_up_with_what_changed_during_its_query(
        sow_server, sow_clients):
    gate = Gate(sow_server, "orders")
    a, b = sow_clients("reader"), sow_clients("writer")
    _load(b, n=20)
    events: list = []
    cv = threading.Condition()

    def on(m):
        kind = m.get_command()
        with cv:
            if kind in ("sow", "p", "publish", "oof"):
                events.append(("p" if kind == "publish" else kind,
                               json.loads(m.get_data())["id"]))
            elif kind == "group_end":
                events.append(("group_end", None))
            cv.notify_all()

    a.execute_async(AMPS.Command("sow_and_subscribe").set_topic("orders").set_order_by("/id")
                    .set_top_n(3).set_options("skip_n=2,oof").set_batch_size(10), on)
    assert gate.started.wait(10)
    # during the query: 1 leaves (the window shifts up), 30 lands after the window
    b.sow_delete("orders", "/id = 1", 5000)
    b.publish("orders", json.dumps({"id": 30, "v": 1, "sym": "X"}))
    b.flush(5000)
    with cv:
        assert not events
    gate.release.set()
    with cv:
        assert cv.wait_for(lambda: len(events) >= 6, 10)
    a.flush(5000)  # and nothing more (30 sorts after the window)
    # the snapshot's window (2 3 4), then the change: 2 leaves, 5 enters
    assert events == [("sow", 2), ("sow", 3), ("sow", 4), ("group_end", None),
                      ("oof", 2), ("p", 5)]


def test_a_big_sow_delete_runs_in_steps_with_its_oofs_and_counts(sow_server, sow_clients):
    topic = sow_server.server.sow_service.get("orders")
    topic.query_chunk = 7  # real steps: 200 records to delete
    a, b = sow_clients("deleter"), sow_clients("watcher")
    _load(b)
    oofs: list = []
    cv = threading.Condition()

    def on(m):
        if m.get_command() == "oof":
            with cv:
                oofs.append(json.loads(m.get_data())["id"])
                cv.notify_all()

    b.execute_async(AMPS.Command("subscribe").set_topic("orders").set_options("oof"), on)
    stats = a.sow_delete("orders", "/v >= 0", 5000)
    assert (int(stats.get_sow_deleted()), int(stats.get_matches())) == (N, N)
    with cv:
        assert cv.wait_for(lambda: len(oofs) == N, 10)
    assert sorted(oofs) == list(range(N))
    assert query(a, "orders") == []
