"""Filter injection: a client's filter is ANDed with its entitlement's read or write filter as a
parsed expression, never pasted beside it as text. A client filter that does not parse on its
own (``1=1) OR (1=1``, which closes the entitlement's parenthesis and ORs its way out of it)
is refused with ``bad filter``; one that parses is one operand of the AND, whatever it holds.

Each attack runs on the SOW topic ``test``, whose reader ``alice`` may read only ``/priority =
1`` and delete only ``/owner = 'alice'``: ``sow`` (a literal topic and a regex one),
``sow_and_subscribe``, a bookmark replay and ``sow_delete``, over TCP with the official Python
client and over WebSocket with the official JavaScript client; and, over TCP, paginated and
aggregated queries and a subscription to the queue ``work`` (same read filter)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from tests.support.clients import logged_on
from tests.support.entitlements import ALL, serve, transport, web_config, with_user
from tests.support.servers import ServerThread

AMPS = pytest.importorskip("AMPS")

READER = {"password": "pw", "topic": [
    {"topic": "test", "read": "/priority = 1", "write": "/owner = 'alice'"},
    {"topic": "work", "read": "/priority = 1", "write": False},
    {"topic": ".*", "read": False, "write": False}]}

QUEUE = ("<Queue><Name>work</Name><MessageType>json</MessageType>"
         "<MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog></Queue>")

#: (id, priority, owner): alice may read 1 and 3, and delete 1
RECORDS = ((1, 1, "alice"), (2, 2, "bob"), (3, 1, "bob"))
READABLE = [1, 3]

#: client filters that escape a text-joined entitlement filter; none parses on its own
INJECTIONS = [
    "1=1) OR (1=1",
    "/priority = 2) OR (/priority = 2",
    "/id > 0) OR NOT (1=0",
    "1=1) OR /id > 0 OR (1=1",
]


def secured(tmp_path: Path, websocket: bool = False) -> ServerThread:
    xml = web_config(tmp_path, {"alice": READER, "admin": {"topic": [ALL]}}).replace(
        "</AMPSConfig>",
        f"<TransactionLog><JournalDirectory>{tmp_path}/journal</JournalDirectory><Topic>"
        "<Name>test</Name><MessageType>json</MessageType></Topic><Topic><Name>work</Name>"
        "<MessageType>json</MessageType></Topic></TransactionLog></AMPSConfig>").replace(
        "</SOW>", QUEUE + "</SOW>")
    if websocket:
        xml = xml.replace(transport("json-tcp"), transport("json-tcp") + transport(
            "json-ws", "<Protocol>websocket</Protocol>"))
    srv = serve(tmp_path, xml)
    admin = logged_on(with_user(srv.uri, "admin"), "admin")
    try:
        for i, priority, owner in RECORDS:
            for topic in ("test", "work"):
                admin.publish(topic, json.dumps({"id": i, "priority": priority, "owner": owner}))
        admin.publish_flush(5000)
    finally:
        admin.close()
    return srv


def stored(srv: ServerThread) -> list[int]:
    admin = logged_on(with_user(srv.uri, "admin"), "check")
    try:
        return sorted(json.loads(m.get_data())["id"] for m in admin.sow("test")
                      if m.get_command() == "sow")
    finally:
        admin.close()


def ids(messages) -> list[int]:
    return sorted(json.loads(m.get_data())["id"] for m in messages
                  if m.get_command() in ("sow", "publish"))


@pytest.fixture
def alice_tcp(tmp_path):
    srv = secured(tmp_path)
    alice = logged_on(with_user(srv.uri, "alice", "pw"), "alice")
    yield srv, alice
    alice.close()
    srv.stop()


@pytest.mark.parametrize("flt", INJECTIONS)
def test_sow_refuses_a_filter_that_would_escape_the_read_filter(alice_tcp, flt):
    _srv, alice = alice_tcp
    with pytest.raises(AMPS.BadFilterException):
        ids(alice.sow("test", flt))
    with pytest.raises(AMPS.BadFilterException):  # a regex topic: each topic's grant
        ids(alice.sow("^tes.$", flt))
    # a filter that parses is one operand of the AND
    assert ids(alice.sow("test", "1=1 OR 1=1")) == READABLE
    assert ids(alice.sow("^tes.$", "1=1 OR /priority = 2")) == READABLE


def test_paginated_and_aggregated_queries_refuse_a_filter_that_would_escape(alice_tcp):
    _srv, alice = alice_tcp

    def paged(flt: str):
        return AMPS.Command("sow").set_topic("test").set_filter(flt).set_order_by("/id") \
            .set_top_n(5).set_options("skip_n=0")

    def grouped(flt: str):
        return AMPS.Command("sow").set_topic("test").set_filter(flt).set_options(
            "grouping=[/priority],projection=[/priority,COUNT(/id) AS /n]")

    for command in (paged, grouped):
        with pytest.raises(AMPS.BadFilterException):
            list(alice.execute(command(INJECTIONS[0])))
    assert ids(alice.execute(paged("1=1 OR 1=1"))) == READABLE
    assert [json.loads(m.get_data()) for m in alice.execute(grouped("1=1 OR 1=1"))
            if m.get_command() == "sow"] == [{"priority": 1, "n": 2}]


def test_a_queue_subscription_refuses_a_filter_that_would_escape_the_read_filter(alice_tcp):
    _srv, alice = alice_tcp
    got: list[int] = []
    done = threading.Event()

    def on_message(m) -> None:
        got.append(json.loads(m.get_data())["id"])
        m.ack()
        if len(got) == len(READABLE):
            done.set()

    with pytest.raises(AMPS.BadFilterException):
        alice.subscribe(on_message, "work", INJECTIONS[0])
    alice.flush(5000)
    assert got == []
    alice.subscribe(on_message, "work", "1=1 OR 1=1")
    assert done.wait(10), got
    alice.flush(5000)
    assert sorted(got) == READABLE


@pytest.mark.parametrize("flt", INJECTIONS[:2])
def test_sow_and_subscribe_refuses_a_filter_that_would_escape_the_read_filter(alice_tcp, flt):
    srv, alice = alice_tcp
    with pytest.raises(AMPS.BadFilterException):
        ids(_until_group_end(alice.sow_and_subscribe("test", flt)))
    got = ids(_until_group_end(alice.sow_and_subscribe("test", "/id > 0 OR 1=1")))
    assert got == READABLE


def _until_group_end(stream):
    for m in stream:
        if m.get_command() == "group_end":
            return
        yield m


@pytest.mark.parametrize("flt", INJECTIONS[:2])
def test_a_bookmark_replay_refuses_a_filter_that_would_escape_the_read_filter(alice_tcp, flt):
    _srv, alice = alice_tcp
    got: list[int] = []
    done = threading.Event()

    def on_message(m) -> None:
        if m.get_command() == "publish":
            got.append(json.loads(m.get_data())["id"])
            if got[-1] == RECORDS[-1][0]:
                done.set()

    with pytest.raises(AMPS.BadFilterException):
        alice.bookmark_subscribe(on_message, "test", "0", flt)
    alice.flush(5000)
    assert got == []
    alice.bookmark_subscribe(on_message, "test", "0", "1=1 OR 1=1")
    assert done.wait(10), got
    assert got == READABLE


@pytest.mark.parametrize("flt", INJECTIONS[:2])
def test_sow_delete_refuses_a_filter_that_would_escape_the_write_filter(alice_tcp, flt):
    srv, alice = alice_tcp
    with pytest.raises(AMPS.BadFilterException):
        alice.sow_delete("test", flt)
    assert stored(srv) == [1, 2, 3]
    # one that parses deletes only what the write filter admits
    ack = alice.sow_delete("test", "1=1 OR 1=1")
    assert (ack.get_status(), int(ack.get_sow_deleted())) == ("success", 1)
    assert stored(srv) == [2, 3]


def test_every_command_over_websocket_refuses_a_filter_that_would_escape(tmp_path):
    from tests.support.js_client import require_js_client, run_js

    require_js_client()
    srv = secured(tmp_path, websocket=True)
    try:
        ws = srv.server.listeners[1].uri
        assert ws.startswith("ws://"), ws
        r = run_js("filter_injection", srv, uri=with_user(ws, "alice", "pw"),
                   env={"FILTER": INJECTIONS[0], "LAST": str(RECORDS[-1][0])})
        for what in ("sow", "sowAndSubscribe", "replay", "sowDelete"):
            assert r[what] == {"got": [], "error": "bad filter"}, (what, r)
        assert stored(srv) == [1, 2, 3]
        r = run_js("filter_injection", srv, uri=with_user(ws, "alice", "pw"),
                   env={"FILTER": "1=1 OR 1=1", "LAST": str(RECORDS[-1][0])})
        assert {what: sorted(r[what]["got"]) for what in ("sow", "sowAndSubscribe", "replay")} \
            == {"sow": READABLE, "sowAndSubscribe": READABLE, "replay": READABLE}, r
        assert r["sowDelete"] == {"got": []}, r
        assert stored(srv) == [2, 3]
    finally:
        srv.stop()
