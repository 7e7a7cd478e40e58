"""Long commands run in slices of the event loop's time, and what each client sees is still
what it would see if every command ran at once, in the order the server read them:

* a ``sow_delete`` by filter deletes the records its snapshot matched; records published
  while it runs come after it (the transaction log has the delete first), so the SOW ends
  as a replay of the log gives it;
* a client's own commands wait for its command in progress;
* a ``sow_and_subscribe`` gives each update to a record once: in the query's result or on
  the live stream after it, never both, never neither.

A gate pauses a delete between two of its steps (the event loop keeps turning) until the
test releases it, so the tests choose what happens in the middle of it instead of racing it.
"""

from __future__ import annotations

import json
import threading

import AMPS

from amps_emulator.config import loads_config
from amps_emulator.server.core.clock import TestClock
from amps_emulator.server.handlers import sow as sow_handlers
from amps_emulator.server.services import sow_service
from amps_emulator.sow.scan import BUILDING
from amps_emulator.server.handlers import sow_results
from tests.support.clients import Collector, logged_on
from tests.support.raw import RawClient
from tests.support.servers import ServerThread, config_xml, start_server
from tests.support.sow import SOW_XML, query

N = 100


class DeleteGate:
    """Wraps the delete steps of a topic: the first delete, once it has removed ``first``
    records, pauses (the event loop serves the others) until :attr:`release` is set."""

    def __init__(self, srv, topic_name: str, first: int = 6) -> None:
        self.paused = threading.Event()
        self.release = threading.Event()
        topic = srv.server.sow_service.get(topic_name)
        topic.query_chunk = 8  # real steps: 2 records deleted a step
        original = topic.delete_steps

        def gated(*args, **kwargs):
            topic.delete_steps = original  # (only the first delete is gated)
            inner = original(*args, **kwargs)
            removed = 0
            while removed < first:
                part = next(inner)
                removed += len(part)
                yield part
            self.paused.set()
            while not self.release.wait(0.001):  # (the server's thread lets the test's run)
                yield []
            return (yield from inner)

        topic.delete_steps = gated


def serve(data, sow_dir):
    return start_server(config_xml(data, extra=SOW_XML.format(d=sow_dir)), "sow.xml")


def load(c, n=N):
    for i in range(n):
        c.publish("orders", json.dumps({"id": i, "v": 0}))
    c.flush(5000)


def state(c) -> dict:
    return {d["id"]: d for _, d in query(c, "orders")}


def test_publishes_during_a_sliced_delete_end_as_the_transaction_log_orders_them(tmp_path):
    srv = serve(tmp_path / "data", tmp_path / "sow")
    try:
        deleter, writer = logged_on(srv.uri, "deleter"), logged_on(srv.uri, "writer")
        load(writer)
        gate = DeleteGate(srv, "orders")
        stats = []
        t = threading.Thread(target=lambda: stats.append(
            deleter.sow_delete("orders", "/v = 0", 20000)))
        t.start()
        assert gate.paused.wait(10)  # ids 0 to 5 are gone, the rest not yet
        writer.publish("orders", json.dumps({"id": 0, "v": 0, "w": "again"}))  # after it
        writer.publish("orders", json.dumps({"id": 50, "v": 0, "w": "changed"}))  # (matches)
        writer.publish("orders", json.dumps({"id": 60, "v": 1}))
        writer.publish("orders", json.dumps({"id": 1000, "v": 0}))  # new: after the delete
        writer.sow_delete("orders", "/id = 70", 5000)
        writer.flush(5000)
        gate.release.set()
        t.join(20)
        assert int(stats[0].get_sow_deleted()) == N - 3  # not 50, 60, 70: changed after it
        live = state(writer)
        assert live == {0: {"id": 0, "v": 0, "w": "again"},
                        50: {"id": 50, "v": 0, "w": "changed"},
                        60: {"id": 60, "v": 1}, 1000: {"id": 1000, "v": 0}}
    finally:
        srv.stop()
    # the transaction log alone, replayed into an empty SOW, gives the same state
    again = serve(tmp_path / "data", tmp_path / "sow-from-the-log")
    try:
        assert state(logged_on(again.uri, "reader")) == live
    finally:
        again.stop()


def test_a_clients_commands_wait_for_its_sliced_delete(tmp_path):
    srv = serve(tmp_path / "data", tmp_path / "sow")
    try:
        load(logged_on(srv.uri, "loader"))
        gate = DeleteGate(srv, "orders")
        a = RawClient(srv.port)
        a.logon("a")
        a.send({"c": "sow_delete", "cid": "d", "t": "orders", "filter": "/v = 0",
                "a": "processed,stats"})
        a.send({"c": "p", "cid": "p", "t": "orders", "a": "processed"},
               json.dumps({"id": 2000, "v": 0}).encode())  # after the delete: it stays
        a.send({"c": "flush", "cid": "f", "a": "processed"})
        assert gate.paused.wait(10)
        other = logged_on(srv.uri, "other")
        other.publish("elsewhere", "{}")
        other.flush(5000)  # served while a's delete is in progress
        gate.release.set()
        got = []
        while len(got) < 4:
            h, _ = a.recv_frame()
            got.append((h["cid"], h["a"]))
        assert got == [("d", "processed"), ("d", "stats"), ("p", "processed"),
                       ("f", "processed")]
        assert [d["id"] for _, d in query(other, "orders")] == [2000]
    finally:
        srv.stop()


def test_sow_and_subscribe_under_publishes_gives_every_update_once(tmp_path, monkeypatch):
    monkeypatch.setattr(sow_handlers, "SLICE_SECONDS", 0.0)  # a step a pass: publishes between
    monkeypatch.setattr(sow_results, "SEND_STEP", 5)
    srv = serve(tmp_path / "data", tmp_path / "sow")
    keys, rounds = 40, 30
    try:
        writer, reader = logged_on(srv.uri, "writer"), logged_on(srv.uri, "reader")
        load(writer, keys)
        srv.server.sow_service.get("orders").query_chunk = 4
        seen: dict[int, list[int]] = {k: [] for k in range(keys)}  # versions, in order
        done = threading.Event()

        def publish() -> None:
            for v in range(1, rounds + 1):
                for k in range(keys):
                    writer.publish("orders", json.dumps({"id": k, "v": v}))
            writer.publish("orders", json.dumps({"id": -1, "v": 0}))  # the last one
            writer.flush(20000)

        def on(m):
            kind = m.get_command()
            if kind in ("sow", "p", "publish"):
                d = json.loads(m.get_data())
                if d["id"] < 0:
                    done.set()
                else:
                    seen[d["id"]].append(d["v"])

        t = threading.Thread(target=publish)
        t.start()
        reader.execute_async(AMPS.Command("sow_and_subscribe").set_topic("orders")
                             .set_batch_size(3), on)
        t.join(30)
        assert done.wait(20)
        for k, versions in seen.items():
            # from the version the query read on, each later one once, in order
            assert versions == list(range(versions[0], rounds + 1)), (k, versions)
    finally:
        srv.stop()


PATTERN = """<SOW><Topic><Name>Prices</Name><Pattern>^px/</Pattern><MessageType>json</MessageType>
  <Key>/id</Key><Durability>transient</Durability></Topic></SOW>"""


def test_a_regex_sow_and_subscribe_over_many_topics_gives_every_update_once(tmp_path):
    srv = start_server(config_xml(tmp_path, extra=PATTERN))
    topics = 30
    try:
        writer, reader = logged_on(srv.uri, "writer"), logged_on(srv.uri, "reader")
        for t in range(topics):
            writer.publish(f"px/{t}", json.dumps({"id": t, "v": 0}))
        writer.flush(5000)
        # the query takes the topics' snapshots one by one: it pauses before px/10's
        paused, release = threading.Event(), threading.Event()
        topic = srv.server.sow_service.get("px/10")
        original = topic.query_steps

        def gated(*args, **kwargs):
            paused.set()
            while not release.wait(0.001):  # (the server's thread lets the test's run)
                yield BUILDING  # (what a step before the snapshot yields)
            return (yield from original(*args, **kwargs))

        topic.query_steps = gated
        seen: dict[str, list[int]] = {}
        done = threading.Event()

        def on(m):
            if m.get_command() in ("sow", "p", "publish"):
                d = json.loads(m.get_data())
                seen.setdefault(m.get_topic(), []).append(d["v"])
                if m.get_topic() == "px/end":
                    done.set()

        # (the client waits for the processed ack, which comes once every snapshot is read)
        threading.Thread(target=reader.execute_async, daemon=True, args=(
            AMPS.Command("sow_and_subscribe").set_topic("^px/").set_batch_size(2), on)).start()
        assert paused.wait(10)
        # the topics go in name order: px/0 and px/1 were read before these, the rest after
        for v in (1, 2):
            for t in range(topics):
                writer.publish(f"px/{t}", json.dumps({"id": t, "v": v}))
        writer.flush(5000)
        release.set()
        writer.publish("px/end", json.dumps({"id": -1, "v": 0}))
        assert done.wait(10)
        want = {f"px/{t}": [0, 1, 2] if t < 2 else [2] for t in range(topics)}
        assert {t: v for t, v in seen.items() if t != "px/end"} == want
    finally:
        srv.stop()


def test_a_long_filter_subscription_is_in_place_for_the_next_command(tmp_path):
    srv = serve(tmp_path / "data", tmp_path / "sow")
    try:
        a = RawClient(srv.port)
        a.logon("a")
        text = " OR ".join(f"/id = {i}" for i in range(3000))  # compiled off the loop
        a.send({"c": "subscribe", "cid": "s", "sub_id": "s", "t": "orders", "filter": text,
                "a": "processed"})
        a.send({"c": "p", "t": "orders"}, json.dumps({"id": 2999, "v": 7}).encode())
        a.send({"c": "p", "t": "orders"}, json.dumps({"id": 3000, "v": 8}).encode())
        a.send({"c": "p", "t": "orders"}, json.dumps({"id": 1, "v": 9}).encode())
        got = []
        while len(got) < 3:
            h, body = a.recv_frame()
            got.append((h["c"], h.get("a"), body))
        assert got == [("ack", "processed", b""), ("p", None, b'{"id": 2999, "v": 7}'),
                       ("p", None, b'{"id": 1, "v": 9}')]
    finally:
        srv.stop()


def test_records_expiring_together_go_a_slice_a_pass_and_every_one_goes(tmp_path, monkeypatch):
    monkeypatch.setattr(sow_service, "SWEEP_LIMIT", 7)
    clock = TestClock()
    srv = ServerThread(loads_config(config_xml(tmp_path, extra=SOW_XML.format(d=tmp_path))),
                       timebase=clock).start()
    try:
        sweeps = []
        sow = srv.server.sow_service.sow
        real = sow.sweep_expired
        monkeypatch.setattr(sow, "sweep_expired", lambda **kw: sweeps.append(1) or real(**kw))
        watcher, writer = logged_on(srv.uri, "watcher"), logged_on(srv.uri, "writer")
        gone = Collector(lambda m: (m.get_command(), json.loads(m.get_data())["id"]))
        watcher.subscribe(gone, "quotes", options="oof")
        for i in range(50):
            writer.publish("quotes", json.dumps({"id": i}), expiration=1)
        writer.flush(5000)
        assert len(gone.wait_for(50)) == 50
        srv.call(lambda: clock.advance(2))  # all fifty are due at once
        assert sorted(i for kind, i in gone.wait_for(100) if kind == "oof") == list(range(50))
        assert len(sweeps) >= 8  # seven a pass
        assert query(writer, "quotes") == []
    finally:
        srv.stop()
