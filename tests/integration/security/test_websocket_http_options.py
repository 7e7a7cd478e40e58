"""A custom websocket ``Protocol``'s options on real servers: ``HTTPHeader`` on the upgrade's
answers, ``WWWAuthenticate`` (the upgrade's Basic credentials, checked by the transport's
modules, make the connection that user's), ``TrustedAdmin`` (an Admin session cookie logs the
upgrade on). Driven with the ``websockets`` client speaking the AMPS framing, a raw socket for
a pipelined upgrade, the official Python client for the Admin log-on, and the official
JavaScript client."""

from __future__ import annotations

import base64
import json
import socket
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from amps_emulator.config import load_config
from tests.support.entitlements import ALL, FILTERED, web_config
from tests.support.servers import ServerThread

pytest.importorskip("AMPS")

ROOT = {"password": "pw", "topic": [ALL], "admin": [{"topic": ".*", "read": True, "write": True}]}
PROTOCOLS = """<Protocols>
  <Protocol><Name>portal</Name><Module>websocket</Module>
    <WWWAuthenticate>Basic realm="HTTP Special"</WWWAuthenticate>
    <HTTPHeader>X-Frame-Options: DENY</HTTPHeader><HTTPHeader>X-Portal: 1</HTTPHeader></Protocol>
  <Protocol><Name>trusted</Name><Module>websocket</Module>
    <TrustedAdmin>enabled</TrustedAdmin></Protocol>
</Protocols>"""
ADMIN = '<Admin><InetAddr>127.0.0.1:0</InetAddr><WWWAuthenticate>Basic realm="ops"</WWWAuthenticate></Admin>'


def ws_transport(name: str, protocol: str, extra: str = "") -> str:
    return (f"<Transport><Name>{name}</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>"
            f"<MessageType>json</MessageType><Protocol>{protocol}</Protocol>{extra}</Transport>")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wsopts")
    xml = web_config(tmp, {"alice": FILTERED, "root": ROOT}).replace(
        "<Transports>", PROTOCOLS + ADMIN + "<Transports>" + ws_transport(
            "ws-portal", "portal", "<HTTPHeader>X-Transport: yes</HTTPHeader>")
        + ws_transport("ws-trusted", "trusted") + ws_transport("ws-plain", "websocket"))
    (tmp / "config.xml").write_text(xml)
    s = ServerThread(load_config(tmp / "config.xml")).start()
    yield s
    s.stop()


def uri_of(srv: ServerThread, transport: str) -> str:
    return next(lst.uri for lst in srv.server.listeners if lst.name == transport)


def basic(user: str, password: str = "pw") -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def command(ws: ClientConnection, header: dict) -> dict:
    """One AMPS command in the websocket framing; its ack (the next header)."""
    ws.send((1).to_bytes(4, "little"))
    ws.send(json.dumps(header))
    return json.loads(ws.recv(timeout=10))


@contextmanager
def open_ws(srv: ServerThread, transport: str, **headers: str) -> Iterator[ClientConnection]:
    """An upgraded connection that has named its mode."""
    with connect(uri_of(srv, transport), additional_headers=headers, open_timeout=10) as ws:
        ws.send("text")
        yield ws


def refused(srv: ServerThread, transport: str, uri: str | None = None, **headers: str):
    """The answer to an upgrade the server refuses."""
    with pytest.raises(InvalidStatus) as info:
        with connect(uri or uri_of(srv, transport), additional_headers=headers, open_timeout=10):
            pass
    return info.value.response


def logon(ws: ClientConnection, **fields: str) -> dict:
    return command(ws, {"c": "logon", "cid": "l", "a": "processed", "client_name": "c", **fields})


# -- HTTPHeader --------------------------------------------------------------------------------

def test_http_headers_are_on_every_answer_to_the_upgrade(srv):
    with open_ws(srv, "ws-portal", Authorization=basic("alice")) as ws:
        h = ws.response.headers
        assert ws.response.status_code == 101
        assert (h.get_all("X-Frame-Options"), h.get_all("X-Portal"), h.get_all("X-Transport")) \
            == (["DENY"], ["1"], ["yes"])
    r = refused(srv, "ws-portal")  # a 401
    assert r.status_code == 401 and r.headers.get_all("X-Frame-Options") == ["DENY"]
    # a 404 (a path the transport does not serve)
    r = refused(srv, "ws-portal", uri_of(srv, "ws-portal").replace("/amps/json", "/amps/xml"))
    assert r.status_code == 404 and r.headers.get_all("X-Portal") == ["1"]
    with open_ws(srv, "ws-plain") as ws:  # another protocol: none of them
        assert ws.response.headers.get_all("X-Frame-Options") == []


# -- WWWAuthenticate ---------------------------------------------------------------------------

@pytest.mark.parametrize("headers", [
    {},  # no credentials
    {"Authorization": basic("alice", "wrong")},
    {"Authorization": basic("nobody")},
    {"Authorization": "Basic !!not base64!!"},
    {"Authorization": "Bearer abc"},  # not Basic
])
def test_an_upgrade_without_valid_credentials_is_challenged(srv, headers):
    r = refused(srv, "ws-portal", **headers)
    assert r.status_code == 401
    assert r.headers.get_all("WWW-Authenticate") == ['Basic realm="HTTP Special"']


def test_the_upgrade_credentials_make_the_connection_that_users(srv):
    with open_ws(srv, "ws-portal", Authorization=basic("alice")) as ws:
        ack = logon(ws)  # no password: the upgrade authenticated the connection
        assert ack["status"] == "success", ack
        user = srv.call(lambda: next(c.user_id for c in srv.server.connections
                                     if c.listener.name == "ws-portal"))
        assert user == "alice"
        # her entitlements, not anyone's
        denied = command(ws, {"c": "subscribe", "t": "secret", "sub_id": "s", "cid": "s",
                              "a": "processed"})
        assert denied["status"] == "failure" and denied["reason"] == "not entitled", denied
    with open_ws(srv, "ws-portal", Authorization=basic("alice")) as ws:
        assert logon(ws, user_id="alice")["status"] == "success"
    with open_ws(srv, "ws-portal", Authorization=basic("alice")) as ws:
        ack = logon(ws, user_id="root", pw="pw")  # naming another user is refused
        assert ack["status"] == "failure" and ack["reason"] == "auth failure", ack


def test_an_upgrade_pipelined_with_its_logon_is_decided_first(srv):
    """A client that sends its mode and logon before the 101: they wait for the decision."""
    from websockets.client import ClientProtocol
    from websockets.uri import parse_uri

    uri = uri_of(srv, "ws-portal")
    proto = ClientProtocol(parse_uri(uri))
    request = proto.connect()
    request.headers["Authorization"] = basic("alice")
    proto.send_request(request)

    def frame(opcode: int, payload: bytes) -> bytes:  # masked with a zero key: as written
        return bytes([0x80 | opcode, 0x80 | len(payload)]) + b"\0\0\0\0" + payload

    logon_header = json.dumps({"c": "logon", "cid": "l", "a": "processed", "client_name": "pipelined"})
    pipelined = (b"".join(proto.data_to_send()) + frame(1, b"text")
                 + frame(2, (1).to_bytes(4, "little")) + frame(1, logon_header.encode()))
    port = int(uri.rsplit(":", 1)[1].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(pipelined)  # in one write: the server reads them together
        events: list = []
        deadline = time.monotonic() + 10
        while len(events) < 2 and time.monotonic() < deadline:
            proto.receive_data(s.recv(65536))
            events.extend(proto.events_received())
    assert events[0].status_code == 101
    assert json.loads(events[1].data)["status"] == "success"


# -- TrustedAdmin ------------------------------------------------------------------------------

def admin_cookie(srv: ServerThread, user: str = "root") -> str:
    req = urllib.request.Request(srv.admin_uri + "/amps/instance/name",
                                 headers={"Authorization": basic(user)})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.headers["Set-Cookie"].split(";", 1)[0]


def test_an_admin_session_cookie_logs_a_trusted_upgrade_on(srv):
    cookie = admin_cookie(srv)
    with open_ws(srv, "ws-trusted", Cookie=cookie) as ws:
        assert logon(ws)["status"] == "success"
        user = srv.call(lambda: next(c.user_id for c in srv.server.connections
                                     if c.listener.name == "ws-trusted"))
        assert user == "root"
    # same host, another port (the console's page): honoured
    with open_ws(srv, "ws-trusted", Cookie=cookie, Origin=srv.admin_uri) as ws:
        assert logon(ws)["status"] == "success"


@pytest.mark.parametrize("headers", [
    {},
    {"Cookie": "amps_admin_session=" + "A" * 43},  # not a session the server gave
    {"Origin": "https://evil.example"},  # a cross-site page riding the browser's cookie
])
def test_without_a_usable_cookie_a_trusted_upgrade_logs_on_as_usual(srv, headers):
    if "Origin" in headers:
        headers["Cookie"] = admin_cookie(srv)
    with open_ws(srv, "ws-trusted", **headers) as ws:
        ack = logon(ws, user_id="root")  # no password: the modules refuse it
        assert ack["status"] == "failure" and ack["reason"] == "auth failure", ack
    with open_ws(srv, "ws-trusted", **headers) as ws:
        assert logon(ws, user_id="root", pw="pw")["status"] == "success"


def test_the_cookie_is_honoured_only_by_a_trusted_protocol_and_only_while_its_session_lives(srv):
    cookie = admin_cookie(srv)
    with open_ws(srv, "ws-plain", Cookie=cookie) as ws:
        assert logon(ws, user_id="root")["status"] == "failure"
    reset = urllib.request.Request(srv.admin_uri + "/amps/administrator/authorization/entitlement/reset",
                                   headers={"Cookie": cookie})
    with urllib.request.urlopen(reset, timeout=10) as r:
        assert r.status == 200
    with open_ws(srv, "ws-trusted", Cookie=cookie) as ws:
        assert logon(ws, user_id="root")["status"] == "failure"


# -- the official JavaScript client ------------------------------------------------------------

def test_the_javascript_client_logs_on_through_the_challenge(srv):
    from tests.support.js_client import require_js_client, run_js

    require_js_client()
    r = run_js("logon_credentials", srv, uri=uri_of(srv, "ws-portal"))
    # a wrong password never reaches the logon: the upgrade is answered 401
    assert r["connected"] is True and r["denied"] == "not entitled"
    assert r["refused"] is not None and "auth failure" not in r["refused"], r
