"""web-entitlements against an in-process HTTP server thread: credentials, headers, timeouts,
retries, the per-user cache, 401/404/500 and bad documents; and the document parser (hypothesis)."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator.auth import (
    Credentials,
    PermissionDocumentError,
    SecurityLayer,
    block_from_values,
    parse_document,
)
from amps_emulator.auth.config import AUTHENTICATION, ENTITLEMENT, ModuleDecl, SecurityConfig, web_options
from amps_emulator.auth.web import DocumentSource, FetchError, _digest_header
from amps_emulator.protocol import reasons

USERS = {"alice": "s3cret", "joshua": "wopr"}
DOC = {"logon": True, "topic": [{"topic": "test", "read": "/priority = 1", "write": False},
                                {"topic": ".*", "read": True, "write": True}]}


class Server:
    """Serves /<user>.json with Basic auth; behaviours switchable per test."""

    def __init__(self) -> None:
        self.requests: list[dict[str, str]] = []
        self.fail_next = 0  # answer 500 this many times
        self.stall = 0.0  # seconds to wait before answering
        self.body_for: dict[str, bytes] = {}
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                outer.requests.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
                if outer.stall:
                    time.sleep(outer.stall)
                if outer.fail_next:
                    outer.fail_next -= 1
                    return self._send(500, b"oops")
                user = self.path.strip("/").removesuffix(".json")
                auth = self.headers.get("Authorization", "")
                expected = "Basic " + base64.b64encode(f"{user}:{USERS.get(user)}".encode()).decode()
                if user not in USERS:
                    return self._send(404, b"no such user")
                if auth != expected:
                    return self._send(401, b"", {"WWW-Authenticate": 'Basic realm="perms"'})
                self._send(200, outer.body_for.get(user, json.dumps(DOC).encode()))

            def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


WEB = {"web": ModuleDecl(name="web", library="libamps_http_entitlement.so")}


def web_layer(port: int, **opts: str) -> SecurityLayer:
    options = [("ResourceURI", f"http://127.0.0.1:{port}/{{{{USER_NAME}}}}.json"), *opts.items()]
    cfg = SecurityConfig(authentication=block_from_values(AUTHENTICATION, "web", options, WEB),
                         entitlement=block_from_values(ENTITLEMENT, "web", options, WEB))
    return SecurityLayer(cfg)


async def test_right_password_wrong_password_unknown_user(server):  # scenario 4
    lay = web_layer(server.port)
    ok = await lay.transport(None).logon(Credentials("alice", "s3cret"))
    assert ok.session is not None and ok.session.user_id == "alice"
    assert ok.session.permissions.read_filter("json", "test") == "/priority = 1"
    assert server.requests[0]["path"] == "/alice.json"
    assert server.requests[0]["authorization"].startswith("Basic ")
    wrong = await lay.transport(None).logon(Credentials("joshua", "nope"))
    assert not wrong.accepted and wrong.reason == reasons.AUTH_FAILURE and "401" in wrong.detail
    unknown = await lay.transport(None).logon(Credentials("mallory", "x"))
    assert not unknown.accepted and "404" in unknown.detail


async def test_cache_per_user_and_password(server):
    lay = web_layer(server.port)
    t = lay.transport(None)
    s1 = (await t.logon(Credentials("alice", "s3cret"))).session
    s2 = (await t.logon(Credentials("alice", "s3cret"))).session
    assert s1 is not None and s2 is not None and len(server.requests) == 1  # cached
    assert not (await t.logon(Credentials("alice", "guess"))).accepted  # a different password asks again
    assert len(server.requests) == 2
    s1.close()
    s2.close()
    assert (await t.logon(Credentials("alice", "s3cret"))).accepted
    assert len(server.requests) == 3  # the last connection closed: fetched again


async def test_headers_substituted(server):
    lay = web_layer(server.port, HTTPHeader="X-AMPS-User: {{AMPS_USER_NAME}}")
    assert (await lay.transport(None).logon(Credentials("joshua", "wopr"))).accepted
    assert server.requests[0]["x-amps-user"] == "joshua"


async def test_retries_after_500(server):
    server.fail_next = 2
    lay = web_layer(server.port, RetryCount="2")
    assert (await lay.transport(None).logon(Credentials("alice", "s3cret"))).accepted
    assert len(server.requests) == 3
    server.fail_next = 5
    lay0 = web_layer(server.port)  # RetryCount 0: one attempt
    out = await lay0.transport(None).logon(Credentials("joshua", "wopr"))
    assert not out.accepted and "500" in out.detail
    assert len(server.requests) == 4


async def test_request_timeout(server):
    server.stall = 1.0
    lay = web_layer(server.port, RequestTimeout="100")
    started = time.monotonic()
    out = await lay.transport(None).logon(Credentials("alice", "s3cret"))
    assert not out.accepted and "timed out" in out.detail
    assert time.monotonic() - started < 0.9


async def test_server_down_fails_fast():
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    lay = web_layer(port, ConnectionTimeout="300", RetryCount="1")
    out = await lay.transport(None).logon(Credentials("alice", "s3cret"))
    assert not out.accepted and out.reason == reasons.AUTH_FAILURE and "alice" in out.detail


async def test_bad_documents_refuse_the_logon_naming_user_and_reason(server):
    lay = web_layer(server.port)
    server.body_for["alice"] = b"{not json"
    out = await lay.transport(None).logon(Credentials("alice", "s3cret"))
    assert not out.accepted and out.reason == reasons.AUTH_FAILURE
    assert "'alice'" in out.detail and "not valid JSON" in out.detail
    bad_filter = {"logon": True, "topic": [{"topic": "t", "read": "/a = ("}]}
    server.body_for["joshua"] = json.dumps(bad_filter).encode()
    out = await lay.transport(None).logon(Credentials("joshua", "wopr"))
    assert not out.accepted and "bad filter" in out.detail


async def test_the_event_loop_keeps_running_during_a_fetch(server):
    import asyncio

    server.stall = 0.3
    lay = web_layer(server.port)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    task = asyncio.create_task(ticker())
    assert (await lay.transport(None).logon(Credentials("alice", "s3cret"))).accepted
    task.cancel()
    assert ticks > 5


def test_digest_answer_is_rfc7616():
    challenge = 'Digest realm="r", nonce="n", qop="auth", algorithm=MD5, opaque="o"'
    header = _digest_header(challenge, "GET", "/alice.json", "alice", "s3cret")
    assert header is not None and header.startswith("Digest ")
    fields = dict(p.strip().split("=", 1) for p in header[7:].split(","))
    ha1 = hashlib.md5(b"alice:r:s3cret").hexdigest()
    ha2 = hashlib.md5(b"GET:/alice.json").hexdigest()
    cnonce = fields["cnonce"].strip('"')
    expected = hashlib.md5(f"{ha1}:n:00000001:{cnonce}:auth:{ha2}".encode()).hexdigest()
    assert fields["response"].strip('"') == expected and fields["opaque"] == '"o"'
    assert _digest_header('Basic realm="x"', "GET", "/", "a", "b") is None


def test_unsupported_scheme():
    block = block_from_values(ENTITLEMENT, "web", [("ResourceURI", "ftp://host/{{USER_NAME}}")], WEB)
    with pytest.raises(FetchError, match="unsupported ResourceURI"):
        DocumentSource(web_options(block, ".")).fetch_sync("alice", "pw")


# --- the document parser never raises anything but PermissionDocumentError --------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20)
entry = st.fixed_dictionaries({}, optional={
    "topic": st.one_of(st.text(max_size=10), st.sampled_from(["t", ".*", "(", "a[", "^x$"]), json_values),
    "read": st.one_of(st.booleans(), st.sampled_from(["/a = 1", "/a = (", "", "1=1"]), json_values),
    "write": st.one_of(st.booleans(), st.sampled_from(["/b > 2", "/x LIKE '('"]), json_values),
    "select": st.one_of(st.sampled_from(["-/,+/id", "+/a/b", "id", "-", ""]), json_values)})
document = st.fixed_dictionaries({}, optional={
    "logon": st.one_of(st.booleans(), json_values), "user_name": json_values, "password": json_values,
    "topic": st.one_of(st.lists(entry, max_size=4), json_values),
    "admin": st.one_of(st.lists(entry, max_size=2), json_values),
    "replicated-topics": st.one_of(st.lists(st.one_of(entry, st.text(max_size=5)), max_size=2), json_values)})


@settings(max_examples=300, deadline=None)
@given(document)
def test_parser_on_documents(doc):
    try:
        parsed = parse_document(json.dumps(doc), "u")
    except PermissionDocumentError as e:
        assert e.user == "u" and e.reason
    else:
        assert isinstance(parsed.logon, bool)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200))
def test_parser_on_arbitrary_bytes(data):
    try:
        parse_document(data, "u")
    except PermissionDocumentError:
        pass
