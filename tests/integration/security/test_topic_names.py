"""One name per topic: a topic name from the wire holding a control character is refused with
``invalid topic`` on every command that names a topic, so that no client spells the server's
own key of another type's topic. Inside the server the nvfix topic ``orders`` is the key
``orders\\x1fnvfix``; a json client sending that name must not reach it past an entry of its
permission document that forbids ``orders`` (the fallback ``.*`` entry grants every other
name), nor publish into it or delete from it. A regex subscription covers only the topics of
the subscriber's own type, whose entitlements are checked by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.clients import logged_on
from tests.support.entitlements import ALL, config, serve, transport, web_config, with_user
from tests.support.raw import RawClient
from tests.support.servers import ServerThread

AMPS = pytest.importorskip("AMPS")

SMUGGLED = "orders\x1fnvfix"

ALICE = {"password": "pw", "topic": [
    {"topic": "orders", "read": False, "write": False},
    {"topic": ".*", "read": True, "write": True}]}

NVFIX_SOW = ("<SOW><Topic><Name>orders</Name><MessageType>nvfix</MessageType><Key>/k</Key>"
             "<Durability>transient</Durability></Topic>"
             "<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/k</Key>"
             "<Durability>transient</Durability></Topic></SOW>")


def _transports() -> str:
    return transport("json-tcp") + transport("nvfix-tcp").replace(
        "<MessageType>json</MessageType>", "<MessageType>nvfix</MessageType>")


def secured(tmp_path: Path) -> ServerThread:
    xml = web_config(tmp_path, {"alice": ALICE, "admin": {"topic": [ALL]}}, sow=False)
    xml = xml.replace(transport("json-tcp"), _transports()).replace(
        "</AMPSConfig>", NVFIX_SOW + "</AMPSConfig>")
    return serve(tmp_path, xml)


def nvfix_uri(srv: ServerThread, user: str | None = None) -> str:
    uri = srv.server.listeners[1].uri
    return uri if user is None else with_user(uri, user)


def nvfix_records(srv: ServerThread, user: str | None = "admin") -> list[str]:
    c = logged_on(nvfix_uri(srv, user), "nvfix-check")
    try:
        return sorted(m.get_data() for m in c.sow("orders") if m.get_command() == "sow")
    finally:
        c.close()


def logged_on_raw(srv: ServerThread, user: str = "alice", password: str = "pw") -> RawClient:
    """A raw peer logged on as ``user``: the official clients write a header's control
    characters unescaped (``header malformed``); a raw peer escapes them as JSON does."""
    raw = RawClient(srv.port)
    raw.send({"c": "logon", "cid": "l", "user_id": user, "pw": password, "a": "processed"})
    assert raw.recv_frame()[0]["status"] == "success"
    return raw


def answer(raw: RawClient, header: dict, body: bytes = b"") -> tuple[dict, list[bytes]]:
    """Send a command asking for its ``processed`` and ``completed`` acks; the last ack (a
    failure, or ``completed``) and the bodies that came before it."""
    raw.send({**header, "a": "processed,completed"}, body)
    bodies = []
    while True:
        frame = raw.recv_frame()
        assert frame is not None, "the server closed the connection"
        got, data = frame
        if got["c"] == "ack" and got.get("cid") == header["cid"] and (
                got["status"] == "failure" or got["a"] == "completed"):
            return got, bodies
        if got["c"] in ("sow", "p", "publish"):
            bodies.append(bytes(data))


@pytest.fixture
def smuggling(tmp_path):
    srv = secured(tmp_path)
    admin = logged_on(nvfix_uri(srv, "admin"), "admin")
    admin.publish("orders", "k=1\x01secret=yes\x01")
    admin.publish_flush(5000)
    alice = logged_on(with_user(srv.uri, "alice", "pw"), "alice")
    raw = logged_on_raw(srv)
    yield srv, admin, alice, raw
    raw.close()
    alice.close()
    admin.close()
    srv.stop()


def test_a_json_client_cannot_read_the_nvfix_topic_by_its_internal_key(smuggling):
    srv, admin, alice, raw = smuggling
    with pytest.raises(AMPS.NotEntitledException):  # the name its document forbids
        list(alice.sow("orders"))
    for command in ("sow", "sow_and_subscribe", "subscribe"):
        ack, got = answer(raw, {"c": command, "t": SMUGGLED, "cid": command, "sub_id": command})
        assert (ack["status"], ack.get("reason"), got) == ("failure", "invalid topic", []), \
            (command, ack, got)
    admin.publish("orders", "k=2\x01secret=yes\x01")  # nothing reaches a subscription
    admin.publish_flush(5000)
    ack, got = answer(raw, {"c": "sow", "t": "^orders.*", "cid": "regex"})
    assert (ack["status"], got) == ("success", []), (ack, got)
    # a regex covers the json topics only, and is checked by name: not the nvfix records
    got = [m.get_data() for m in alice.sow("^orders.*") if m.get_command() == "sow"]
    assert got == []
    assert nvfix_records(srv) == ["k=1\x01secret=yes\x01", "k=2\x01secret=yes\x01"]


def test_a_json_client_cannot_write_or_delete_the_nvfix_topic_by_its_internal_key(smuggling):
    srv, admin, alice, raw = smuggling
    ack, _ = answer(raw, {"c": "sow_delete", "t": SMUGGLED, "cid": "d", "filter": "1=1"})
    assert (ack["status"], ack.get("reason")) == ("failure", "invalid topic"), ack
    ack, _ = answer(raw, {"c": "publish", "t": SMUGGLED, "cid": "p"}, b"k=2\x01")
    assert (ack["status"], ack.get("reason")) == ("failure", "invalid topic"), ack
    ack, _ = answer(raw, {"c": "delta_publish", "t": SMUGGLED, "cid": "dp"}, b"k=1\x01x=1\x01")
    assert (ack["status"], ack.get("reason")) == ("failure", "invalid topic"), ack
    assert nvfix_records(srv) == ["k=1\x01secret=yes\x01"]


@pytest.mark.parametrize("command", ["publish", "delta_publish", "subscribe", "delta_subscribe",
                                     "sow", "sow_and_subscribe", "sow_and_delta_subscribe",
                                     "sow_delete"])
def test_every_command_refuses_control_characters_in_a_topic_name(tmp_path, command):
    srv = secured(tmp_path)
    raw = RawClient(srv.port)
    try:
        raw.send({"c": "logon", "cid": "l", "user_id": "alice", "pw": "pw", "a": "processed"})
        assert raw.recv_frame()[0]["status"] == "success"
        for i, name in enumerate(["a\x00b", "tab\there", "nl\n", "del\x7f", SMUGGLED, "\x1f"]):
            header = {"c": command, "t": name, "cid": f"c{i}", "a": "processed", "sub_id": f"s{i}"}
            if command == "sow_delete":
                header["filter"] = "1=1"
            raw.send(header, b'{"k":1}' if "publish" in command else b"")
            got, _ = raw.recv_frame()
            assert (got["c"], got["cid"], got["status"], got.get("reason")) == \
                ("ack", f"c{i}", "failure", "invalid topic"), (name, got)
        # the connection stays usable
        raw.send({"c": "sow", "t": "orders", "cid": "ok", "a": "processed"})
        got, _ = raw.recv_frame()
        assert (got["status"], got.get("reason")) == ("failure", "not entitled")
    finally:
        raw.close()
        srv.stop()


def test_without_security_a_json_publish_does_not_land_in_the_nvfix_topic(tmp_path):
    """The plain-publish fast path (no security session) refuses such names as well."""
    srv = serve(tmp_path, config(NVFIX_SOW, _transports()))
    sub, raw = RawClient(srv.port), RawClient(srv.port)
    try:
        sub.logon("sub")
        sub.send({"c": "subscribe", "t": "^x.$", "sub_id": "x", "cid": "s", "a": "processed"})
        assert sub.recv_frame()[0]["status"] == "success"
        raw.logon("raw")
        raw.send({"c": "p", "t": SMUGGLED}, b"k=9\x01")  # plain publishes, no ack
        # as the official clients write it (no escape): a run of plain publishes takes it
        frame = b'{"c":"p","t":"x\x7f"}{"n":1}'
        raw.send_raw(len(frame).to_bytes(4, "big") + frame)
        raw.send({"c": "p", "t": "xy"}, b'{"n":2}')
        raw.send({"c": "flush", "cid": "f", "a": "completed"})
        got, _ = raw.recv_frame()
        assert (got["c"], got["cid"], got["status"]) == ("ack", "f", "success"), got
        header, body = sub.recv_frame()
        assert (header["t"], body) == ("xy", b'{"n":2}'), (header, body)
        assert nvfix_records(srv, None) == []
    finally:
        raw.close()
        sub.close()
        srv.stop()
