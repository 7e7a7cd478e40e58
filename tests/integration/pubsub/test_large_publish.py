"""A publish of a large body runs in stages, each in a loop pass of its own (the decode, then
the publish), so that it does not hold the other clients up; for its client and everyone
else it is still one publish in its place: the client's next commands wait for it, and the
transaction log, the SOW and the subscribers see every message in the same order."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from amps_emulator.server.handlers import publish as publish_handlers
from amps_emulator.server.messaging.message_path import LARGE_BODY
from tests.support.clients import logged_on
from tests.support.raw import RawClient
from tests.support.servers import config_xml, start_server

SOW = """<SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>{d}/sow/%n.sow</FileName></Topic></SOW>"""


def big(i: int, tag: str) -> bytes:
    return json.dumps({"id": i, "tag": tag, "blob": "y" * (LARGE_BODY + 1000)}).encode()


def serve(tmp_path):
    return start_server(config_xml(tmp_path, extra=SOW.format(d=tmp_path)))


def replayed(port: int) -> list[tuple[int, str]]:
    """Every message of ``orders`` in the transaction log, in its order (a replay)."""
    c = RawClient(port)
    c.logon("replayer")
    c.send({"c": "subscribe", "t": "orders", "sub_id": "r", "cid": "r", "bm": "0",
            "a": "completed"})
    out = []
    while True:
        h, body = c.recv_frame()
        if h["c"] == "ack":
            c.close()
            return out
        d = json.loads(body)
        out.append((d["id"], d["tag"]))


def watch(port: int, until: int) -> Callable[[], list[tuple[int, str]]]:
    """A subscriber to ``orders``, subscribed when this returns: a call then reads its live
    messages (as ``replayed``) up to the first with id ``until``."""
    c = RawClient(port)
    c.logon("watcher")
    c.send({"c": "subscribe", "t": "orders", "sub_id": "s", "cid": "s", "a": "processed"})
    c.recv_frame()
    out: list[tuple[int, str]] = []

    def read() -> list[tuple[int, str]]:
        while not out or out[-1][0] != until:
            _, body = c.recv_frame()
            d = json.loads(body)
            out.append((d["id"], d["tag"]))
        c.close()
        return out

    return read


def sow_tags(c) -> dict[int, str]:
    """The SOW of ``orders``: each record's tag by id (an official client's query)."""
    docs = [json.loads(m.get_data()) for m in c.sow("orders", timeout=5000)
            if m.get_command() == "sow"]
    return {d["id"]: d["tag"] for d in docs}


def test_a_large_publish_keeps_its_place_among_its_clients_commands(tmp_path):
    srv = serve(tmp_path)
    try:
        seen = watch(srv.port, until=2)
        a = RawClient(srv.port)
        a.logon("a")
        a.send_raw(b"".join(_frame({"c": "p", "t": "orders"}, body) for body in (
            json.dumps({"id": 1, "tag": "before"}).encode(), big(1, "large"),
            json.dumps({"id": 1, "tag": "after"}).encode(),
            json.dumps({"id": 2, "tag": "after"}).encode())))
        a.send({"c": "flush", "cid": "f", "a": "processed"})
        h, _ = a.recv_frame()
        assert (h["cid"], h["a"]) == ("f", "processed")
        want = [(1, "before"), (1, "large"), (1, "after"), (2, "after")]
        assert seen() == want
        assert replayed(srv.port) == want
        assert sow_tags(logged_on(srv.uri, "reader")) == {1: "after", 2: "after"}
    finally:
        srv.stop()


def test_large_publishes_and_other_clients_publishes_agree_everywhere(tmp_path):
    srv = serve(tmp_path)
    try:
        a, b = logged_on(srv.uri, "a"), logged_on(srv.uri, "b")
        seen = watch(srv.port, until=2)
        stop = threading.Event()

        def small() -> None:
            n = 0
            while not stop.is_set():
                n += 1
                b.publish("orders", json.dumps({"id": 1, "tag": f"b{n}"}))
            b.flush(10000)

        t = threading.Thread(target=small)
        t.start()
        for k in range(5):
            a.publish("orders", big(1, f"a{k}").decode())
        a.flush(20000)
        stop.set()
        t.join(20)
        b.publish("orders", json.dumps({"id": 2, "tag": "end"}))
        b.flush(5000)
        journal = replayed(srv.port)
        assert sum(tag.startswith("a") for _, tag in journal) == 5
        assert seen() == journal  # live: the log's order
        # the SOW holds the last the log has
        assert sow_tags(a) == {1: journal[-2][1], 2: "end"}
    finally:
        srv.stop()


def test_a_large_publish_read_whole_is_published_when_its_client_goes_away(tmp_path,
                                                                         monkeypatch):
    srv = serve(tmp_path)
    real = publish_handlers.decode_ahead

    def decode_then_drop(broker, topic, body):
        broker.by_name["a"].close("it went away in the middle", abort=True)
        return real(broker, topic, body)

    monkeypatch.setattr(publish_handlers, "decode_ahead", decode_then_drop)
    try:
        a = RawClient(srv.port)
        a.logon("a")
        a.send({"c": "p", "t": "orders"}, big(7, "last words"))
        assert a.closed_by_server()
        assert sow_tags(logged_on(srv.uri, "reader")) == {7: "last words"}
    finally:
        srv.stop()


def _frame(header: dict, body: bytes) -> bytes:
    h = json.dumps(header, separators=(",", ":")).encode()
    return (len(h) + len(body)).to_bytes(4, "big") + h + body


SOW_AND_PLAIN = """<SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>{d}/sow/%n.sow</FileName></Topic></SOW>"""


def _mixed_body(mib: int) -> bytes:
    """A JSON document of about ``mib`` MiB whose every piece says where it is (a misplaced
    or repeated piece of the body cannot go unnoticed)."""
    blob = "".join(f"{i:07d}," for i in range((mib << 20) // 8))
    return json.dumps({"id": 5, "tag": "big", "blob": blob}).encode()


def _body_of(c: RawClient, cmd: str) -> tuple[dict, bytes]:
    while True:
        h, body = c.recv_frame(timeout=30)
        if h["c"] == cmd:
            return h, body


def _sow_bodies(c) -> list[bytes]:
    return [m.get_data_raw()
            for m in c.sow("orders", timeout=20000) if m.get_command() == "sow"]


def test_a_large_publish_is_byte_identical_everywhere(tmp_path):
    """A body of a few MiB (assembled by the connection's decoder from many reads) reaches a
    subscriber to its SOW topic and one to a plain topic, the SOW, the transaction log's
    replay and a delta_publish's merge exactly as it was sent."""
    srv = start_server(config_xml(tmp_path, txlog_topics=("orders", "plain"),
                                  extra=SOW_AND_PLAIN.format(d=tmp_path)))
    try:
        body = _mixed_body(3)
        subs = RawClient(srv.port)
        subs.logon("subs")
        for t in ("orders", "plain"):
            subs.send({"c": "subscribe", "t": t, "sub_id": t, "cid": t, "a": "processed"})
            assert subs.recv_frame()[0]["a"] == "processed"
        a = RawClient(srv.port)
        a.logon("a")
        for t in ("orders", "plain"):
            for i in range(0, len(frame := _frame({"c": "p", "t": t}, body)), 100_000):
                a.send_raw(frame[i:i + 100_000])  # (in pieces: many reads on the server)
        a.send({"c": "flush", "cid": "f", "a": "processed"})
        assert a.recv_frame(timeout=30)[0]["cid"] == "f"
        live = {h["t"]: b for h, b in (_body_of(subs, "p") for _ in range(2))}
        assert live == {"orders": body, "plain": body}

        reader = logged_on(srv.uri, "reader")
        assert _sow_bodies(reader) == [body]
        for t in ("orders", "plain"):
            r = RawClient(srv.port)
            r.logon(f"replay-{t}")
            r.send({"c": "subscribe", "t": t, "sub_id": "r", "cid": "r", "bm": "0"})
            assert _body_of(r, "p")[1] == body
            r.close()

        a.send({"c": "delta_publish", "t": "orders", "cid": "d", "a": "processed"},
               b'{"id":5,"tag":"merged"}')
        assert a.recv_frame(timeout=30)[0]["cid"] == "d"
        merged = json.loads(_body_of(subs, "p")[1])
        assert merged == {**json.loads(body), "tag": "merged"}
        assert [json.loads(b) for b in _sow_bodies(reader)] == [merged]
    finally:
        srv.stop()


def test_a_refused_large_publish_keeps_nothing_built_for_it(tmp_path):
    """The SOW value built a pass ahead for a large body is let go when the publish is
    refused (here: a body that does not parse, so no Key), not kept until the topic's next
    store."""
    srv = serve(tmp_path)
    try:
        a = RawClient(srv.port)
        a.logon("a")
        body = b'{"id": 1, "blob": "' + b"y" * (LARGE_BODY + 1000)  # (never closed)
        a.send_raw(_frame({"c": "p", "t": "orders", "cid": "p1", "a": "processed"}, body))
        h, _ = a.recv_frame()
        assert (h["c"], h["status"]) == ("ack", "failure") and "sow key" in h["reason"]
        topic = srv.server.sow_service.get("orders")
        assert srv.call(lambda: topic._b._ready) is None
        a.close()
    finally:
        srv.stop()
