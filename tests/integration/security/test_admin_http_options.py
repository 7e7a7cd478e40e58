"""The Admin interface's HTTP options, on real servers and raw HTTP (``http.client``, sockets):
``Header`` on every answer, ``AccessControlAllowOrigin``, ``AnonymousPaths`` (and what exactly
it opens), the session cookie and ``SessionOptions``, HTTPS (``Certificate``, ``PrivateKey``,
``Ciphers``) and ``Galvanometer``."""

from __future__ import annotations

import base64
import http.client
import socket
import ssl
import time
from urllib.parse import urlsplit

import pytest

from amps_emulator.config import load_config
from amps_emulator.server.core.clock import TestClock
from amps_emulator.server.ops.admin_http import AdminLimits
from tests.support.entitlements import ALL, web_config
from tests.support.servers import ServerThread, until
from tests.support.tls import self_signed

pytest.importorskip("AMPS")

USERS = {
    "root": {"password": "pw", "topic": [ALL], "admin": [{"topic": ".*", "read": True, "write": True}]},
    "viewer": {"password": "pw", "topic": [ALL],
               "admin": [{"topic": "^/amps/instance/name$", "read": True, "write": False},
                         {"topic": "^/amps$", "read": True, "write": False}]},
}
HEADERS = '<Header>X-Special-Information: "AMPS Admin"</Header><Header>X-Other: abc;123</Header>'


def admin_xml(tmp_path, inner: str) -> str:
    admin = ('<Admin><InetAddr>127.0.0.1:0</InetAddr><WWWAuthenticate>Basic realm="ops"'
             f"</WWWAuthenticate>{inner}</Admin>")
    return web_config(tmp_path, USERS).replace("<Transports>", admin + "<Transports>")


def start(tmp_path, inner: str = "", **kwargs) -> ServerThread:
    path = tmp_path / "admin.xml"  # (the permission documents are found beside it)
    path.write_text(admin_xml(tmp_path, inner))
    return ServerThread(load_config(path), **kwargs).start()


@pytest.fixture
def srv(tmp_path):
    s = start(tmp_path, HEADERS + r"<AccessControlAllowOrigin>^https://\w+\.my\.com$</AccessControlAllowOrigin>"
                                  "<AnonymousPaths>^/amps/instance/replication|^/amps$</AnonymousPaths>")
    yield s
    s.stop()


def basic(user: str, password: str = "pw") -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def request(srv: ServerThread, target: str, headers: dict[str, str] | None = None,
            method: str = "GET", context: ssl.SSLContext | None = None
            ) -> tuple[int, http.client.HTTPMessage, bytes]:
    """One request exactly as written (no path normalisation on the way)."""
    u = urlsplit(srv.admin_uri)
    conn: http.client.HTTPConnection
    if context is not None:
        conn = http.client.HTTPSConnection(u.hostname, u.port, timeout=10, context=context)
    else:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    try:
        conn.putrequest(method, target, skip_accept_encoding=True)
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        conn.endheaders()
        r = conn.getresponse()
        return r.status, r.headers, r.read()
    finally:
        conn.close()


def raw(srv: ServerThread, data: bytes) -> bytes:
    u = urlsplit(srv.admin_uri)
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


# -- Header ------------------------------------------------------------------------------------

@pytest.mark.parametrize("target, user, status", [
    ("/amps.json", "root", 200),  # the tree
    ("/amps/instance/name.csv", "root", 200),  # a CSV leaf
    ("/amps/instance", "root", 200),  # a browsable page
    ("/", "root", 200),  # the console
    ("/console.js", "root", 200),
    ("/emulator/health", "root", 200),
    ("/amps/nothing", "root", 404),  # errors
    ("/amps/instance/clients.csv", "root", 400),
    ("/amps/instance", None, 401),
    ("/amps.json", None, 200),  # anonymous
    ("/amps/instance/clients", "viewer", 403),
    ("/amps/administrator/clients/1/disconnect", "viewer", 403),
])
def test_every_answer_carries_the_configured_headers(srv, target, user, status):
    got, headers, _ = request(srv, target, {"Authorization": basic(user)} if user else None)
    assert got == status
    assert headers.get_all("X-Special-Information") == ['"AMPS Admin"']
    assert headers.get_all("X-Other") == ["abc;123"]
    assert headers.get_all("Content-Length") is not None and len(headers.get_all("Content-Length")) == 1


def test_answers_written_without_a_request_carry_them_too(tmp_path):
    s = start(tmp_path, HEADERS, admin_limits=AdminLimits(max_connections=1))
    try:
        bad = raw(s, b"GET /amps HTTP/1.1\r\nHost x\r\n\r\n")  # a head h11 refuses
        assert bad.startswith(b"HTTP/1.1 400 ") and b'X-Special-Information: "AMPS Admin"\r\n' in bad
        u = urlsplit(s.admin_uri)
        with socket.create_connection((u.hostname, u.port), timeout=10):
            assert until(lambda: s.call(lambda: s.server.admin.cap.open) == 1)
            busy = raw(s, b"")
        assert busy.startswith(b"HTTP/1.1 503 ") and b"X-Other: abc;123\r\n" in busy
    finally:
        s.stop()


# -- AccessControlAllowOrigin ------------------------------------------------------------------

def test_cors_echoes_a_matching_origin_and_names_the_server_otherwise(srv):
    auth = {"Authorization": basic("root")}
    _, h, _ = request(srv, "/amps.json", {**auth, "Origin": "https://nyc.my.com"})
    assert h.get_all("Access-Control-Allow-Origin") == ["https://nyc.my.com"]
    own = srv.admin_uri  # http://127.0.0.1:<port>: the address it was reached at
    for origin in ("https://evil.com", "https://nyc.my.com.evil.com", "https://a.b.my.com"):
        _, h, _ = request(srv, "/amps.json", {**auth, "Origin": origin})
        assert h.get_all("Access-Control-Allow-Origin") == [own], origin
    _, h, _ = request(srv, "/amps.json", auth)  # no Origin
    assert h.get_all("Access-Control-Allow-Origin") == [own]
    _, h, _ = request(srv, "/amps.json", {"Origin": "https://nyc.my.com"})  # a 401 too
    assert h.get_all("Access-Control-Allow-Origin") == ["https://nyc.my.com"]


def test_an_origin_that_is_not_printable_ascii_is_never_echoed(tmp_path):
    s = start(tmp_path, "<AccessControlAllowOrigin>.*</AccessControlAllowOrigin>")
    try:
        for origin in (b"https://\xff.my.com", b"https://a.my.com\x7f"):
            answer = raw(s, b"GET /amps/instance/name HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                            b"Authorization: " + basic("root").encode() + b"\r\nOrigin: " + origin
                            + b"\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
            assert b"access-control-allow-origin: " + s.admin_uri.encode() + b"\r\n" in answer
    finally:
        s.stop()


@pytest.mark.parametrize("option", ["", "<AccessControlAllowOrigin>*</AccessControlAllowOrigin>"])
def test_without_the_option_or_with_a_star_cors_allows_any_origin(tmp_path, option):
    s = start(tmp_path, option)
    try:
        _, h, _ = request(s, "/amps.json", {"Authorization": basic("root"), "Origin": "https://x.y"})
        assert h.get_all("Access-Control-Allow-Origin") == ["*"]
    finally:
        s.stop()


# -- AnonymousPaths ----------------------------------------------------------------------------

@pytest.mark.parametrize("target", [
    "/amps", "/amps.json", "/amps.xml", "/amps/", "//amps", "/amps?x=1",
    "/amps/instance/replication", "/amps/instance/replication.json",
    "/amps//instance/replication/", "/amps/instance/%72eplication",
])
def test_an_anonymous_path_is_served_without_credentials(srv, target):
    status, _, body = request(srv, target)
    assert status == 200, body


@pytest.mark.parametrize("target, status", [
    # what the expression does not match needs credentials, whatever the spelling
    ("/amps/instance", 401),
    ("/amps/instance/clients", 401),
    ("/amps/administrator", 401),
    ("/amps/administrator/clients/1/disconnect", 401),
    ("/emulator/health", 401),
    ("/", 401),
    # no canonical form: never anonymous (credentials are asked first, then a 404)
    ("/amps/instance/replication/../../administrator", 401),
    ("/amps/instance/replication/..%2f..%2fadministrator", 401),
    ("/amps/administrator/..%2f", 401),
    ("/amps/instance/replication%2F..%2F..%2Fadministrator", 401),
    ("/amps/instance/replication/%2e%2e/%2e%2e/administrator", 401),
    ("/amps.json/administrator", 401),
    ("/AMPS", 401),
    ("/amps/instance/replication/%00", 401),
    ("/amps/instance/replication/%ff", 401),
])
def test_a_path_the_expression_does_not_match_needs_credentials(srv, target, status):
    got, _, body = request(srv, target)
    assert got == status, body


def test_only_gets_and_heads_are_anonymous(srv):
    assert request(srv, "/amps", method="HEAD")[0] == 200
    for method in ("POST", "PUT", "DELETE"):
        assert request(srv, "/amps", method=method)[0] == 401


def test_an_anonymous_administrator_path_runs_its_action_as_the_doc_says(tmp_path):
    """AnonymousPaths skips entitlement too (Configuration Reference): a config that names an
    administrator action lets anyone run it, and only that action."""
    s = start(tmp_path, "<AnonymousPaths>^/amps/administrator/transports/json-tcp/disable$</AnonymousPaths>")
    try:
        assert request(s, "/amps/administrator/transports/json-tcp/disable")[0] == 200
        assert s.call(lambda: s.server.listeners[0].server) is None  # it ran
        assert request(s, "/amps/administrator/transports/json-tcp/enable")[0] == 401
        assert request(s, "/amps/administrator/transports/json-tcp")[0] == 401
    finally:
        s.stop()


# -- the session cookie ------------------------------------------------------------------------

def cookie_of(headers: http.client.HTTPMessage) -> tuple[str, str]:
    (set_cookie,) = headers.get_all("Set-Cookie")
    pair, _, options = set_cookie.partition("; ")
    return pair, options


def test_a_logged_on_request_gets_a_cookie_that_stands_for_its_credentials(srv):
    status, h, _ = request(srv, "/amps/instance/name", {"Authorization": basic("viewer")})
    assert status == 200
    pair, options = cookie_of(h)
    name, _, token = pair.partition("=")
    assert name == "amps_admin_session" and len(token) == 43  # 256 bits, urlsafe base64
    assert options == "max-age=86400; path=/; HttpOnly"
    status, h, _ = request(srv, "/amps/instance/name", {"Cookie": f"x=1; {pair}; y=2"})
    assert status == 200 and h.get_all("Set-Cookie") is None  # no new session
    # entitlement is checked on each request, with the session's user
    assert request(srv, "/amps/instance/clients", {"Cookie": pair})[0] == 403
    assert request(srv, "/amps/administrator/clients/1/disconnect", {"Cookie": pair})[0] == 403
    # a token that is not one the server gave asks for credentials
    forged = "amps_admin_session=" + token[:-1] + ("A" if token[-1] != "A" else "B")
    assert request(srv, "/amps/instance/name", {"Cookie": forged})[0] == 401
    assert request(srv, "/amps/instance/name", {"Cookie": "amps_admin_session="})[0] == 401
    # a refused log-on gets none
    status, h, _ = request(srv, "/amps/instance", {"Authorization": basic("root", "wrong")})
    assert status == 401 and h.get_all("Set-Cookie") is None
    # an anonymous path logs no one on
    status, h, _ = request(srv, "/amps.json", {"Authorization": basic("root")})
    assert status == 200 and h.get_all("Set-Cookie") is None


def test_session_options_are_appended_and_its_max_age_ends_the_session(tmp_path):
    clock = TestClock()
    s = start(tmp_path, "<SessionOptions>max-age=60; path=/amps; HttpOnly; Secure</SessionOptions>",
              timebase=clock)
    try:
        _, h, _ = request(s, "/amps.json", {"Authorization": basic("root")})
        pair, options = cookie_of(h)
        assert options == "max-age=60; path=/amps; HttpOnly; Secure"
        s.call(lambda: clock.advance(59))
        assert request(s, "/amps.json", {"Cookie": pair})[0] == 200
        s.call(lambda: clock.advance(2))
        assert request(s, "/amps.json", {"Cookie": pair})[0] == 401
        assert s.call(lambda: len(s.server.admin.access.sessions)) == 0
    finally:
        s.stop()


@pytest.mark.parametrize("reset", ["authentication", "entitlement"])
def test_resetting_authorization_ends_every_session(srv, reset):
    _, h, _ = request(srv, "/amps/instance", {"Authorization": basic("root")})
    pair, _ = cookie_of(h)
    _, h2, _ = request(srv, "/amps/instance/name", {"Authorization": basic("viewer")})
    viewer, _ = cookie_of(h2)
    assert request(srv, "/amps/administrator/authorization", {"Cookie": pair})[0] == 200
    assert request(srv, f"/amps/administrator/authorization/{reset}/reset", {"Cookie": viewer})[0] == 403
    status, _, body = request(srv, f"/amps/administrator/authorization/{reset}/reset.json",
                              {"Cookie": pair})
    assert status == 200, body
    assert request(srv, "/amps/instance", {"Cookie": pair})[0] == 401
    assert request(srv, "/amps/instance/name", {"Cookie": viewer})[0] == 401
    assert request(srv, "/amps/instance", {"Authorization": basic("root")})[0] == 200


def test_the_same_credentials_keep_one_session(srv):
    """A script that never sends its cookie back holds one session, and does not push out a
    browser's session of the same user."""
    _, h, _ = request(srv, "/amps/instance/name", {"Authorization": basic("viewer")})
    browser, _ = cookie_of(h)
    for _ in range(40):
        _, h, _ = request(srv, "/amps/instance/name", {"Authorization": basic("viewer")})
        assert cookie_of(h)[0] == browser
    _, h, _ = request(srv, "/amps/instance", {"Authorization": basic("root")})
    assert cookie_of(h)[0] != browser
    assert srv.call(lambda: len(srv.server.admin.access.sessions)) == 2
    assert request(srv, "/amps/instance/name", {"Cookie": browser})[0] == 200


# -- HTTPS -------------------------------------------------------------------------------------

def trusting(cert) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(cert))
    ctx.check_hostname = False
    return ctx


def test_admin_is_served_over_https_with_its_ciphers(tmp_path):
    cert, key = self_signed(tmp_path)
    s = start(tmp_path, f"<Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>"
                        "<Ciphers>ECDHE-ECDSA-AES256-GCM-SHA384</Ciphers>"
                        "<SecureSocketProtocols>TLSv1.2</SecureSocketProtocols>" + HEADERS)
    try:
        assert s.admin_uri.startswith("https://")
        status, h, body = request(s, "/amps.json", {"Authorization": basic("root")},
                                  context=trusting(cert))
        assert status == 200 and b'"instance"' in body
        assert h.get_all("X-Other") == ["abc;123"]
        u = urlsplit(s.admin_uri)
        with socket.create_connection((u.hostname, u.port), timeout=10) as raw_sock:
            with trusting(cert).wrap_socket(raw_sock) as tls:
                assert tls.version() == "TLSv1.2"
                assert tls.cipher()[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
        # plain HTTP on the HTTPS port gets no answer, and the server goes on
        assert b"HTTP/1.1 200" not in raw(s, b"GET /amps.json HTTP/1.1\r\nHost: x\r\n\r\n")
        assert request(s, "/emulator/health", {"Authorization": basic("root")},
                       context=trusting(cert))[0] == 200
    finally:
        s.stop()


def test_a_tls_handshake_that_stalls_is_closed_at_the_request_deadline(tmp_path):
    cert, key = self_signed(tmp_path)
    s = start(tmp_path, f"<Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>",
              admin_limits=AdminLimits(request_deadline=1.0))
    try:
        u = urlsplit(s.admin_uri)
        with socket.create_connection((u.hostname, u.port), timeout=10) as stalled:
            stalled.sendall(b"\x16\x03\x01")  # the start of a ClientHello, and nothing more
            start_at = time.monotonic()
            try:
                assert stalled.recv(65536) == b""
            except ConnectionResetError:
                pass
            took = time.monotonic() - start_at
        assert took < 5, f"the stalled handshake was held {took:.1f}s"
    finally:
        s.stop()


# -- Galvanometer ------------------------------------------------------------------------------

def test_galvanometer_disabled_turns_the_console_off_and_nothing_else(tmp_path):
    s = start(tmp_path, "<Galvanometer>disabled</Galvanometer>")
    try:
        auth = {"Authorization": basic("root")}
        for target in ("/", "/index.html", "/console.js", "/console.css"):
            assert request(s, target, auth)[0] == 404, target
        assert request(s, "/amps.json", auth)[0] == 200
        assert request(s, "/emulator/health", auth)[0] == 200
    finally:
        s.stop()
