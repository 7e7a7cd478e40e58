"""Commands over the many topics of a regex run in slices of the event loop's time too, and
each client still sees what it would see if the command ran at once where the server read
it:

* a regex ``sow_delete`` deletes topic after topic, each journalled when its turn comes: a
  publish to a topic not yet reached is in the log before that topic's delete (deleted), one
  to a topic already done after it (kept); the deleter's own later commands wait;
* a regex ``sow`` ordered and paged as one result (``orderby``, ``top_n``, ``skip_n``) sorts
  and pages in steps, from the snapshots it read.

A gate pauses the command between two of its steps (the event loop keeps turning, other
clients are served) until the test releases it: deterministic, no timing."""

from __future__ import annotations

import json
import threading

from amps_emulator.server.handlers import sow as sow_handlers
from amps_emulator.server.handlers import sow_delete as delete_handlers
from tests.support.clients import logged_on
from tests.support.raw import RawClient
from tests.support.servers import config_xml, start_server
from tests.support.sow import query

PATTERN = """<SOW><Topic><Name>Prices</Name><Pattern>^px/</Pattern><MessageType>json</MessageType>
  <Key>/id</Key><Durability>transient</Durability></Topic></SOW>"""
TOPICS = 30


class Gate:
    """Pauses a stepped command after ``after`` of its steps until :attr:`release` is set,
    yielding meanwhile (so the loop serves the other clients)."""

    def __init__(self, after: int = 1) -> None:
        self.after = after
        self.paused = threading.Event()
        self.release = threading.Event()

    def wrap(self, steps):
        n = 0
        while True:
            try:
                next(steps)
            except StopIteration as stop:
                return stop.value
            n += 1
            if n == self.after:
                self.paused.set()
                while not self.release.wait(0.001):  # (the server's thread lets the test's run)
                    yield
            yield


def gated_drive(monkeypatch, module, gate: Gate) -> None:
    """The module's ``drive`` runs its command's steps through ``gate``."""
    original = module.drive

    def drive(broker, client, cmd, steps, finish, *args, **kwargs):
        return original(broker, client, cmd, gate.wrap(steps), finish, *args, **kwargs)

    monkeypatch.setattr(module, "drive", drive)


def serve(tmp_path):
    return start_server(config_xml(tmp_path / "data", extra=PATTERN))


def load(c, v: int = 0) -> None:
    for t in range(TOPICS):
        c.publish(f"px/{t:02d}", json.dumps({"id": t, "v": v, "px": (t * 7) % TOPICS}))
    c.flush(5000)


def everything(c) -> dict[int, dict]:
    return {d["id"]: d for _, d in query(c, "^px/")}


def test_a_regex_sow_delete_goes_topic_by_topic_while_the_others_are_served(tmp_path,
                                                                            monkeypatch):
    gate = Gate(after=2)  # px/00 and px/01 done, the others not yet reached
    gated_drive(monkeypatch, delete_handlers, gate)
    srv = serve(tmp_path)
    try:
        writer = logged_on(srv.uri, "writer")
        load(writer)
        a = RawClient(srv.port)
        a.logon("a")
        a.send({"c": "sow_delete", "cid": "d", "t": "^px/", "filter": "1=1",
                "a": "processed,stats"})
        a.send({"c": "p", "cid": "p", "t": "px/05", "a": "processed"},
               json.dumps({"id": 5, "v": "mine"}).encode())  # after the delete: it stays
        assert gate.paused.wait(10)
        # served while the delete is in progress, and it has not reached the later topics
        left = everything(writer)
        assert sorted(left) == list(range(2, TOPICS))
        writer.publish("px/00", json.dumps({"id": 0, "v": "again"}))  # after its delete
        writer.publish("px/20", json.dumps({"id": 20, "v": "changed"}))  # before its delete
        writer.flush(5000)
        gate.release.set()
        got = []
        while len(got) < 3:
            h, _ = a.recv_frame()
            got.append((h["cid"], h["a"], h.get("records_deleted")))
        assert got == [("d", "processed", None), ("d", "stats", TOPICS), ("p", "processed", None)]
        assert everything(writer) == {0: {"id": 0, "v": "again"}, 5: {"id": 5, "v": "mine"}}
    finally:
        srv.stop()


def test_a_regex_sow_ordered_and_paged_sorts_in_steps_from_its_snapshots(tmp_path, monkeypatch):
    monkeypatch.setattr(sow_handlers, "MERGE_CHUNK", 4)  # the 30 records in several steps
    gate = Gate(after=3)
    original = sow_handlers.sorted_page_steps

    def sorting(*args, **kwargs):  # pauses in the middle of the sort and the merge
        return (yield from gate.wrap(original(*args, **kwargs)))

    monkeypatch.setattr(sow_handlers, "sorted_page_steps", sorting)
    srv = serve(tmp_path)
    try:
        writer, reader = logged_on(srv.uri, "writer"), logged_on(srv.uri, "reader")
        load(writer)
        result: list = []
        t = threading.Thread(target=lambda: result.extend(
            d for _, d in query(reader, "^px/", order_by="/px DESC", top_n=10, options="skip_n=3")))
        t.start()
        assert gate.paused.wait(10)
        load(writer, v=1)  # served meanwhile; not in the result (after its snapshots)
        assert {d["v"] for d in everything(writer).values()} == {1}
        gate.release.set()
        t.join(20)
        assert [d["px"] for d in result] == list(range(TOPICS - 4, TOPICS - 14, -1))
        assert {d["v"] for d in result} == {0}
    finally:
        srv.stop()


def test_a_regex_sow_paged_without_an_order_pages_the_topics_in_turn(tmp_path, monkeypatch):
    monkeypatch.setattr(sow_handlers, "MERGE_CHUNK", 4, raising=False)
    srv = serve(tmp_path)
    try:
        writer = logged_on(srv.uri, "writer")
        load(writer)
        got = [d["id"] for _, d in query(writer, "^px/", top_n=6, options="skip_n=9")]
        assert got == list(range(9, 15))
    finally:
        srv.stop()
