"""TLS sockets count against ``MaxConnections`` from their accept, their handshake included.

A peer that opens TCP connections to a TLS port and never sends a ClientHello holds a
descriptor and TLS state on the server all the same: those sockets fill the transport's cap
(and the Admin HTTPS interface's) like any other, so one more is reset at its accept (one
log line), while the other transports keep their descriptors. The places come back when the
stalled sockets close, time out, or are dropped by a disabled transport or a stopping server,
and TLS clients are served again. Also: a long run of sequential handshakes and logons all
succeed (no ClientHello is lost between the accept and the TLS transport), on uvloop and on
asyncio's own loop alike.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import urllib.request
from urllib.parse import urlsplit

import pytest

from amps_emulator import embedded
from amps_emulator.config import loads_config
from amps_emulator.server.ops.admin_http import AdminLimits
from tests.support.clients import Collector, logged_on
from tests.support.raw import RawClient, closed_by_server
from tests.support.servers import ServerThread, until
from tests.support.tls import self_signed

AMPS = pytest.importorskip("AMPS")

CAP = 4  # the tcps and wss transports' MaxConnections
ADMIN_CAP = 3  # the Admin interface's connections at once


def _config(cert, key, admin: bool = False) -> str:
    tls = f"<Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>"
    transports = "".join(
        f"<Transport><Name>{name}</Name><Type>tcps</Type><InetAddr>127.0.0.1:0</InetAddr>"
        f"<MessageType>json</MessageType><Protocol>{protocol}</Protocol>{tls}"
        f"<MaxConnections>{CAP}</MaxConnections></Transport>"
        for name, protocol in (("tcps", "amps"), ("wss", "websocket")))
    transports += ("<Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>"
                   "<MessageType>json</MessageType></Transport>")
    extra = f"<Admin><InetAddr>127.0.0.1:0</InetAddr>{tls}</Admin>" if admin else ""
    return f"<AMPSConfig><Name>tlscap</Name>{extra}<Transports>{transports}</Transports></AMPSConfig>"


@pytest.fixture(params=["uvloop", "asyncio"])
def loop_kind(request, monkeypatch) -> str:
    """The server's event loop: uvloop (what it runs on where installed) or asyncio's."""
    if request.param == "asyncio":
        monkeypatch.setattr(embedded, "new_event_loop", asyncio.new_event_loop)
    else:
        pytest.importorskip("uvloop")
    return request.param


@pytest.fixture
def certs(tmp_path):
    cert, key = self_signed(tmp_path / "tls")
    AMPS.ssl_init()  # (process-wide in the client: verification stays as the process has it)
    AMPS.ssl_load_verify_locations(str(cert), None)
    return cert, key


def _server(certs, loop_kind: str, logon_timeout: float = 30, admin: bool = False
            ) -> ServerThread:
    cfg = loads_config(_config(*certs, admin=admin), "tlscap.xml")
    limits = AdminLimits(max_connections=ADMIN_CAP) if admin else None
    server = ServerThread(cfg, logon_timeout=logon_timeout, admin_limits=limits).start()
    assert type(server.loop).__module__.startswith("uvloop") == (loop_kind == "uvloop")
    return server


def _listener(server: ServerThread, name: str):
    return next(lst for lst in server.server.listeners if lst.name == name)


def _open(server: ServerThread, name: str) -> int:
    """The sockets the transport ``name`` counts against its MaxConnections."""
    return server.call(lambda: _listener(server, name).cap.open)


def _silent(port: int, n: int) -> list[socket.socket]:
    """``n`` TCP connections that never send a byte (no ClientHello)."""
    return [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(n)]


def _refused(port: int) -> bool:
    """A new connection to ``port`` is closed by the server without a byte sent (reset as it
    connects, or right after)."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    except ConnectionResetError:
        return True
    with sock:
        return closed_by_server(sock, 5)


def _pub_sub(uri: str) -> None:
    """An official client over ``uri`` subscribes, publishes and gets its message."""
    client = logged_on(uri, "after-the-flood")
    try:
        got = Collector()
        client.subscribe(got, "prices")
        client.publish("prices", '{"px": 1}')
        client.publish_flush(5000)
        assert [d for _, _, d, _, _ in got.wait_for(1)] == ['{"px": 1}']
    finally:
        client.close()


def _close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()


def test_silent_tls_sockets_fill_the_cap_and_the_next_is_refused_at_its_accept(
        certs, loop_kind, caplog):
    s = _server(certs, loop_kind)
    stalled: list[socket.socket] = []
    try:
        with caplog.at_level(logging.WARNING, logger="amps_emulator.connection"):
            for name in ("tcps", "wss"):
                port = _listener(s, name).port
                stalled += _silent(port, CAP)
                assert until(lambda n=name: _open(s, n) == CAP), \
                    f"{name}: sockets in their handshake are not counted"
                # refused now: no handshake to wait for
                assert all(_refused(port) for _ in range(3)), "a socket past the cap was kept"
            refusals = [r.getMessage() for r in caplog.records if "MaxConnections" in r.getMessage()]
        assert len(refusals) == 2, refusals  # one line per transport, not one per socket
        assert "'tcps'" in refusals[0] and "'wss'" in refusals[1]
        _pub_sub(_listener(s, "tcp").uri)  # the plain transport is served meanwhile
        _close_all(stalled)  # the peers give up: their handshakes fail, their places return
        assert until(lambda: _open(s, "tcps") == 0 and _open(s, "wss") == 0)
        _pub_sub(_listener(s, "tcps").uri)
    finally:
        _close_all(stalled)
        s.stop()


def test_a_handshake_that_times_out_gives_its_place_back(certs, loop_kind):
    s = _server(certs, loop_kind, logon_timeout=1.5)
    stalled = _silent(_listener(s, "tcps").port, CAP)
    try:
        assert until(lambda: _open(s, "tcps") == CAP)  # counted while their handshake lasts
        assert all(closed_by_server(x, 10) for x in stalled), "a stalled handshake outlived its timeout"
        assert until(lambda: _open(s, "tcps") == 0)
        _pub_sub(_listener(s, "tcps").uri)
    finally:
        _close_all(stalled)
        s.stop()


def test_a_disabled_transport_drops_its_handshakes_and_serves_once_enabled(certs, loop_kind):
    s = _server(certs, loop_kind)
    lst = _listener(s, "tcps")
    stalled = _silent(lst.port, CAP)
    try:
        assert until(lambda: _open(s, "tcps") == CAP)
        s.call(lambda: s.server.action_set_transport("tcps", False))
        assert all(closed_by_server(x, 5) for x in stalled), "a handshake outlived its transport's disable"
        assert until(lambda: _open(s, "tcps") == 0)
        s.call(lambda: s.server.action_set_transport("tcps", True))
        assert until(lambda: s.call(lambda: lst.server is not None))
        _pub_sub(lst.uri)
        held = _silent(lst.port, CAP)
        stalled += held
        assert until(lambda: _open(s, "tcps") == CAP)
    finally:
        s.stop()
        _close_all(stalled)
    assert lst.cap.open == 0  # the stop dropped the handshakes under way, and counted it


def test_silent_sockets_fill_the_admin_https_cap_and_the_next_is_refused(certs, loop_kind, caplog):
    cert, _key = certs
    s = _server(certs, loop_kind, admin=True)
    admin = s.server.admin
    assert admin is not None and admin.uri.startswith("https://")
    u = urlsplit(admin.uri)
    ctx = ssl.create_default_context(cafile=str(cert))
    stalled: list[socket.socket] = []
    try:
        with caplog.at_level(logging.WARNING, logger="amps_emulator.admin"):
            stalled += _silent(u.port, ADMIN_CAP)
            assert until(lambda: s.call(lambda: admin.cap.open) == ADMIN_CAP), \
                "Admin sockets in their handshake are not counted"
            assert all(_refused(u.port) for _ in range(3)), "an Admin socket past the cap was kept"
        lines = [r.getMessage() for r in caplog.records if "connections open" in r.getMessage()]
        assert len(lines) == 1, lines
        _pub_sub(_listener(s, "tcps").uri)  # the client transports are served meanwhile
        _close_all(stalled)
        assert until(lambda: s.call(lambda: admin.cap.open) == 0)
        with urllib.request.urlopen(admin.uri + "/emulator/health", timeout=10, context=ctx) as r:
            assert r.status == 200
    finally:
        _close_all(stalled)
        s.stop()


def test_many_sequential_tls_handshakes_and_logons_all_succeed(certs, loop_kind):
    """No ClientHello is lost between the accept and the TLS transport: each of 200 handshakes
    (each a new socket, sent as soon as it connects) ends in a logon acknowledged."""
    cert, _key = certs
    s = _server(certs, loop_kind)
    ctx = ssl.create_default_context(cafile=str(cert))
    port = _listener(s, "tcps").port
    try:
        for i in range(200):
            raw = socket.create_connection(("127.0.0.1", port), timeout=10)
            peer = RawClient(port, ctx.wrap_socket(raw, server_hostname="localhost"))
            try:
                peer.send({"c": "logon", "cid": "1", "client_name": f"seq-{i}", "a": "processed",
                           "version": "5.3.4.0:python"})
                ack = peer.recv_frame(timeout=10)
                assert ack is not None and ack[0].get("status") == "success", (i, ack)
            finally:
                peer.sock.close()
        assert until(lambda: _open(s, "tcps") == 0)
    finally:
        s.stop()


def test_silent_sockets_fill_the_secure_replication_transports_cap(certs, loop_kind, tmp_path):
    cert, key = certs
    xml = f"""<AMPSConfig><Name>A</Name><Group>g</Group><Transports>
      <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
        <MessageType>json</MessageType></Transport>
      <Transport><Name>repl</Name><Type>amps-replication-secure</Type>
        <InetAddr>127.0.0.1:0</InetAddr><Certificate>{cert}</Certificate>
        <PrivateKey>{key}</PrivateKey><MaxConnections>2</MaxConnections></Transport>
      </Transports>
      <TransactionLog><JournalDirectory>{tmp_path}/journal</JournalDirectory>
        <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
    </AMPSConfig>"""
    s = ServerThread(loads_config(xml, "repl.xml")).start()
    service = s.server.replication
    assert service is not None
    port = service.listen_port
    ctx = ssl.create_default_context(cafile=str(cert))
    stalled = _silent(port, 2)
    try:
        assert until(lambda: s.call(lambda: service.intake.cap.open) == 2), \
            "replication sockets in their handshake are not counted"
        assert all(_refused(port) for _ in range(3)), "a socket past the cap was kept"
        _close_all(stalled)
        assert until(lambda: s.call(lambda: service.intake.cap.open) == 0)
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        with ctx.wrap_socket(raw, server_hostname="localhost") as peer:  # a handshake again
            assert peer.version() is not None
    finally:
        _close_all(stalled)
        s.stop()
