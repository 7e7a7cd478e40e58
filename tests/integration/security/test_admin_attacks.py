"""The Admin interface against an attacker, on a secured configuration (web entitlements from
``file:`` documents at the instance level, which Admin takes as AMPS's ``amps-admin``
transport does): aliases of a denied path, a read-only user's state-changing GETs, bodies sent
without credentials, slow requests, connection floods and a compressed snapshot bomb. Raw
HTTP (``http.client``, sockets) so nothing normalises the paths on the way."""

from __future__ import annotations

import base64
import http.client
import io
import json
import logging
import socket
import tarfile
import time
import tracemalloc
from urllib.parse import urlsplit

import pytest

from tests.support.clients import logged_on
from tests.support.entitlements import ALL, serve, web_config, with_user
from tests.support.servers import ServerThread, until

pytest.importorskip("AMPS")

ADMIN = ('<Admin><InetAddr>127.0.0.1:0</InetAddr><WWWAuthenticate>Basic realm="ops"'
         "</WWWAuthenticate></Admin>")
ACTION = ("<Actions><Action><On><Module>amps-action-on-admin</Module><Options><Path>stamp</Path>"
          "</Options></On><Do><Module>amps-action-do-publish-message</Module><Options><Topic>test"
          "</Topic><MessageType>json</MessageType><Data>{\"id\": 99}</Data></Options></Do>"
          "</Action></Actions>")
DENY = [{"topic": "^/amps/administrator/clients/[^/]+/disconnect$", "read": False, "write": False},
        {"topic": "^/amps/administrator/transports/[^/]+/disable$", "read": False, "write": False},
        {"topic": "^/emulator/journal$", "read": False, "write": False},
        {"topic": ".*", "read": True, "write": True}]
USERS = {
    "ops": {"password": "pw", "topic": [ALL], "admin": DENY},  # everything but the three
    "viewer": {"password": "pw", "topic": [ALL], "admin": [{"topic": ".*", "read": True,
                                                          "write": False}]},
    "root": {"password": "pw", "topic": [ALL], "admin": [{"topic": ".*", "read": True,
                                                        "write": True}]},
}


def secured_xml(tmp_path) -> str:
    return web_config(tmp_path, USERS).replace("<Transports>", ADMIN + ACTION + "<Transports>")


def request(srv: ServerThread, target: str, user: str | None = None, method: str = "GET",
            body: bytes | None = None, timeout: float = 10) -> tuple[int, bytes]:
    """One request exactly as written (no path normalisation on the way)."""
    u = urlsplit(srv.admin_uri)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.putrequest(method, target, skip_accept_encoding=True)
        if user is not None:
            conn.putheader("Authorization", "Basic " + base64.b64encode(f"{user}:pw".encode()).decode())
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def admin_socket(srv: ServerThread, timeout: float = 10) -> socket.socket:
    u = urlsplit(srv.admin_uri)
    return socket.create_connection((u.hostname, u.port), timeout=timeout)


def read_all(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a timeout fails the test)."""
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    d = tmp_path_factory.mktemp("admin-attacks")
    srv = serve(d, secured_xml(d))
    victim = logged_on(with_user(srv.uri, "root", "pw"), "victim")
    yield srv
    victim.close()
    srv.stop()


def untouched(srv: ServerThread) -> None:
    """The victim client is connected, the transport listens, no action ran."""
    names = srv.call(lambda: {c.client_name for c in srv.server.connections})
    assert "victim" in names
    assert srv.call(lambda: all(x.server is not None for x in srv.server.listeners))
    status, body = request(srv, "/emulator/sow/test", "root")
    assert status == 200 and json.loads(body)["count"] == 0


DISCONNECT = "/amps/administrator/clients/victim/disconnect"


D = DISCONNECT
J = "/emulator/journal"
T = "/amps/administrator/transports/json-tcp/disable"


@pytest.mark.parametrize("target, refused", [
    # other spellings of a denied path: the deny entry applies to their one canonical form
    ("/amps//administrator/clients/victim/disconnect", D),
    ("/amps/administrator//clients/victim/disconnect", D),
    ("/amps/administrator/clients/victim/disconnect/", D),
    ("/amps/administrator/clients/victim/disconnect.json", D),
    ("/amps/administrator/clients/victim/disconnect.xml", D),
    ("/amps/administrator/clients/victim/%64isconnect", D),
    ("/amps/administrator/clients/victim/disconnect?x=/", D),
    ("/amps/administrator/transports/json-tcp/disable.json", T),
    ("/amps//administrator/transports/json-tcp//disable", T),
    ("/emulator//journal", J),
    ("/emulator/journal/", J),
    ("/emulator/%6Aournal?limit=5", J),
    # names that are no resource at all (404)
    ("/amps.json/administrator/clients/victim/disconnect", None),
    ("/amps.xml/administrator/transports/json-tcp/disable", None),
    ("/ampsX/administrator/clients/victim/disconnect", None),
    ("/ampsX/administrator/transports/json-tcp/disable", None),
    ("/AMPS/administrator/clients/victim/disconnect", None),
    ("/amps%2Fadministrator/clients/victim/disconnect", None),
    ("/amps/administrator/clients/victim%2Fdisconnect", None),
    ("/amps/administrator/clients/victim/disconnect/more", None),
    ("/amps/administrator/clients/victim/disconnect;x", None),
    ("/amps/administrator/clients/victim/disconnect%00", None),
    ("/amps/administrator/clients/victim/disconnect%252F", None),
    ("/amps/./administrator/clients/victim/disconnect", None),
    ("/amps/x/../administrator/clients/victim/disconnect", None),
    ("/amps/x/%2e%2e/administrator/clients/victim/disconnect", None),
    ("/emulatorX/journal", None),
    ("/emulator.json/journal", None),
    ("/emulator/journal.json", None),
    ("/emulator/journal/x", None),
    ("/emulator/x/../journal", None),
    ("/metrics/x", None),
    ("/metrics.json", None),
    ("/console.css/x", None),
])
def test_an_alias_of_a_denied_path_is_refused(secured, caplog, target, refused):
    """``refused``: the canonical path whose deny entry refuses it (403, logged once with that
    path), or None: not a resource (404)."""
    caplog.set_level(logging.INFO, "amps_emulator.admin")
    status, body = request(secured, target, "ops")
    assert status == (404 if refused is None else 403), body
    untouched(secured)
    if refused is not None:
        lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert lines == [f"admin GET {refused} refused: user 'ops' may not write it"] \
            or lines == [f"admin GET {refused} refused: user 'ops' may not read it"], lines


def test_the_denied_user_still_reaches_what_is_not_denied(secured):
    assert request(secured, "/amps/administrator/clients/victim", "ops")[0] == 200
    assert request(secured, "/amps/instance/clients.json", "ops")[0] == 200
    assert request(secured, "/amps.json", "ops")[0] == 200
    assert request(secured, "/emulator/subscriptions", "ops")[0] == 200


STATE_CHANGING = [
    ("GET", DISCONNECT),
    ("POST", DISCONNECT),
    ("GET", "/amps/administrator/transports/json-tcp/disable"),
    ("GET", "/amps/administrator/transports/json-tcp/enable"),
    ("GET", "/amps/administrator/actions/stamp"),
    ("GET", "/amps/administrator/replication/peer/downgrade"),
    ("GET", "/amps/administrator/replication/peer/upgrade"),
    ("GET", "/amps/administrator/replication/peer/reconnect"),
    ("GET", "/amps/administrator/queues/work/enable_proxied_transfer"),
    ("GET", "/amps/administrator/queues/work/disable_proxied_transfer"),
    ("GET", "/amps/administrator/minidump"),
    ("POST", "/emulator/reset"),
    ("POST", "/emulator/reset?client=victim"),
    ("POST", "/emulator/faults"),
    ("DELETE", "/emulator/faults"),
    ("POST", "/emulator/snapshot"),
    ("POST", "/emulator/clock/advance?seconds=1"),
    ("POST", "/emulator/replication/peer/cut"),
]


@pytest.mark.parametrize("method, target", STATE_CHANGING)
def test_a_read_only_admin_user_changes_nothing_whatever_the_method(secured, method, target):
    """The Monitoring Reference's administrator actions run on a plain GET; they are writes of
    the ``admin`` resource all the same: a user who may only read is refused (403)."""
    body = b"[]" if method == "POST" else None
    status, text = request(secured, target, "viewer", method, body)
    assert status == 403, text
    untouched(secured)


def test_a_read_only_admin_user_reads_and_a_writer_acts(secured):
    assert request(secured, "/amps/administrator", "viewer")[0] == 200
    assert request(secured, "/amps/administrator/clients", "viewer")[0] == 200
    assert request(secured, "/amps/instance/clients.json", "viewer")[0] == 200
    assert request(secured, "/emulator/subscriptions", "viewer")[0] == 200
    status, body = request(secured, "/amps/administrator/actions/stamp", "root")
    assert status == 200 and json.loads(body)["ran"] == 1
    assert until(lambda: json.loads(request(secured, "/emulator/sow/test", "root")[1])["count"] == 1)
    assert request(secured, "/emulator/reset?topic=test", "root", "POST", b"")[0] == 200


@pytest.mark.parametrize("user, target, status", [
    (None, "/emulator/faults", 401),  # no credentials
    ("nobody", "/emulator/snapshot", 401),  # no such user
    ("viewer", "/emulator/snapshot", 403),  # may not write it
    ("ops", "/emulator/journal", 403),
    ("root", "/emulator/faults", 413),  # more than a request body may be
])
def test_a_refused_request_is_answered_on_its_head_and_its_body_never_read(secured, user, target,
                                                                           status):
    """A body of 512 MiB is announced and never sent: the answer comes at once, on the head,
    and the connection closes (before, the server read the whole body first: seconds of its
    loop for tens of MiB, quadratically)."""
    head = f"POST {target} HTTP/1.1\r\nHost: x\r\nContent-Length: {512 << 20}\r\n"
    if user is not None:
        head += "Authorization: Basic " + base64.b64encode(f"{user}:pw".encode()).decode() + "\r\n"
    with admin_socket(secured) as s:
        s.sendall(head.encode() + b"\r\n" + b"x" * 1000)
        answer = read_all(s)
    assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer[:200]
    assert b"connection: close" in answer.lower()


@pytest.fixture
def quick(tmp_path):
    """A server whose Admin limits are short: 1 s for a request, two connections, 1 KiB bodies,
    archives that unpack to at most 4 MiB."""
    from amps_emulator.config import loads_config
    from amps_emulator.server.ops.admin_http import AdminLimits
    from tests.integration.admin.test_admin import EXTRA
    from tests.support.servers import config_xml

    limits = AdminLimits(request_deadline=1.0, max_connections=2, max_body=1024,
                         max_extracted=4 << 20)
    xml = config_xml(tmp_path, extra=EXTRA.format(d=tmp_path))
    srv = ServerThread(loads_config(xml, "admin.xml"), admin_limits=limits).start()
    yield srv
    srv.stop()


@pytest.mark.parametrize("opening", [
    b"GET /amps.json HTTP/1.1\r\nHost: x\r\nX-Slow: ",  # a head that never ends
    b"POST /emulator/faults HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n[",  # a body
])
def test_a_request_trickled_a_byte_at_a_time_is_cut_at_its_deadline(quick, opening):
    """A byte every 0.2 s keeps any idle timeout happy; the request's deadline (1 s here, 30 s
    by default) is for the whole head and body."""
    with admin_socket(quick) as s:
        s.sendall(opening)
        start = time.monotonic()
        answer = b""
        while time.monotonic() - start < 8:
            try:
                s.sendall(b"a")
            except OSError:  # closed under us
                break
            s.settimeout(0.2)  # (the trickle's pace)
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                continue
            except OSError:  # reset: closed with the trickle unread
                break
            if not chunk:
                break
            answer += chunk
        took = time.monotonic() - start
    assert took < 5, "still open after 5 s of a 1 s deadline"
    assert answer == b"" or answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert quick.http("/emulator/health")["ready"]


def test_connections_past_the_cap_are_answered_503_with_one_log_line(quick, caplog):
    caplog.set_level(logging.WARNING, "amps_emulator.admin")
    admin = quick.server.admin
    held = [admin_socket(quick), admin_socket(quick)]
    assert until(lambda: quick.call(lambda: admin.cap.open) == 2)
    for _ in range(3):
        with admin_socket(quick) as s:
            assert read_all(s).startswith(b"HTTP/1.1 503 ")
    lines = [r.getMessage() for r in caplog.records if "connections open" in r.getMessage()]
    assert len(lines) == 1, lines
    held.pop().close()
    assert until(lambda: quick.call(lambda: admin.cap.open) == 1)
    assert quick.http("/emulator/health")["ready"]
    held.pop().close()


def test_a_connection_that_fails_before_its_first_request_gives_its_place_back(quick, monkeypatch):
    """Whatever fails once a connection is counted gives its place under the cap back: the
    headers every answer carries are made before the first request."""
    admin = quick.server.admin
    real = admin.access.response_headers
    failed = []

    def failing_once(req, sockname):
        if not failed:
            failed.append(True)
            raise RuntimeError("made to fail")
        return real(req, sockname)

    monkeypatch.setattr(admin.access, "response_headers", failing_once)
    with admin_socket(quick) as s:
        assert read_all(s) == b""  # closed by the server, with nothing said
    assert failed
    assert until(lambda: quick.call(lambda: admin.cap.open) == 0)
    assert quick.http("/emulator/health")["ready"]


def test_a_body_past_its_limit_is_refused_as_it_arrives(quick):
    """Chunked, so no length announces it: the server stops at the limit (1 KiB here)."""
    with admin_socket(quick) as s:
        s.sendall(b"POST /emulator/faults HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        try:
            for _ in range(64):
                s.sendall(b"100\r\n" + b"a" * 256 + b"\r\n")
        except OSError:
            pass  # closed under us: refused
        answer = read_all(s)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]


def bomb(size: int) -> bytes:
    """A tar.gz of a manifest and one journal file of ``size`` zero bytes (a few KiB)."""
    import gzip

    class Zeros:
        def __init__(self) -> None:
            self.left = size

        def read(self, n: int) -> bytes:
            n = min(n, self.left, 1 << 20)
            self.left -= n
            return bytes(n)

    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9) as gz, \
            tarfile.open(fileobj=gz, mode="w|") as tar:
        manifest = json.dumps({"format": 1, "instance": "x", "journal": True, "sow": []}).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        info = tarfile.TarInfo("journal/bomb")
        info.size = size
        tar.addfile(info, Zeros())  # type: ignore[arg-type]
    return buf.getvalue()


def test_a_compressed_snapshot_bomb_is_refused_without_unpacking_it_in_memory(quick, tmp_path):
    archive = bomb(64 << 20)  # 64 MiB of zeros, a few dozen KiB compressed
    assert len(archive) < 1 << 20
    before = quick.http("/emulator/sow/orders")["count"]
    tracemalloc.start()
    try:
        status, body = request(quick, "/emulator/snapshot", method="POST", body=archive, timeout=60)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert status == 400 and "unpacks to more than" in json.loads(body)["error"], body
    assert peak < 16 << 20, f"{peak >> 20} MiB allocated while refusing it"
    assert quick.http("/emulator/sow/orders")["count"] == before
    assert not [p for p in tmp_path.rglob("amps-restore-*")]  # the staging went with it


@pytest.mark.parametrize("member, reason", [
    ("link", "not a regular file"),
    ("/abs", "leaves the archive"),
    ("journal/../../x", "leaves the archive"),
    ("manifest-dir", "bad sow entry"),
])
def test_a_snapshot_member_that_leaves_the_staging_directory_is_refused(quick, member, reason):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        sow = [{"dir": "../../outside", "topics": ["orders"]}] if member == "manifest-dir" else []
        manifest = json.dumps({"format": 1, "instance": "x", "journal": True, "sow": sow}).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        if member == "link":
            info = tarfile.TarInfo("journal/passwd")
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
        elif member != "manifest-dir":
            info = tarfile.TarInfo(member)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    status, body = request(quick, "/emulator/snapshot", method="POST", body=buf.getvalue())
    assert status == 400 and reason in json.loads(body)["error"], body


def test_a_request_body_held_in_memory_counts_in_the_memory_budget(tmp_path, caplog):
    """What an Admin connection holds of its request is in the server's one memory budget: past
    it (512 KiB here) the largest holder, this request, is closed; the interface serves on."""
    from amps_emulator.config import loads_config
    from amps_emulator.server.ops.admin_http import AdminLimits
    from tests.integration.admin.test_admin import EXTRA
    from tests.support.servers import config_xml

    xml = config_xml(tmp_path, extra=EXTRA.format(d=tmp_path))
    srv = ServerThread(loads_config(xml, "admin.xml"), admin_limits=AdminLimits(max_body=1 << 20)).start()
    srv.call(lambda: setattr(srv.server, "memory_budget", 512 << 10))
    budget = srv.server.budget
    try:
        with admin_socket(srv) as s:
            s.sendall(b"POST /emulator/faults HTTP/1.1\r\nHost: x\r\nContent-Length: 900000\r\n\r\n"
                      + b"a" * (300 << 10))
            assert until(lambda: srv.call(budget.held) >= 300 << 10)
            with caplog.at_level(logging.WARNING, logger="amps_emulator.server"):
                try:
                    s.sendall(b"a" * (300 << 10))
                except OSError:
                    pass  # closed under us: what the test wants
                assert read_all(s) == b""  # reset, unanswered
            lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("memory budget")]
            assert len(lines) == 1 and "Admin connection" in lines[0], lines
        assert until(lambda: srv.call(lambda: len(budget)) == 0)
        assert srv.http("/emulator/health")["ready"]
    finally:
        srv.stop()
