"""What a client that never logs on can cost the server: memory, descriptors, time.

Attacks on every client transport (tcp with the amps protocol, websocket, the legacy nvfix
protocol, tcps) through raw sockets: frames that announce tens of megabytes before a logon,
output an unauthenticated client never reads, an HTTP upgrade that never finishes, a TLS
handshake that never starts, a flood of connections on one port. Each is refused or closed,
what the server holds meanwhile is read from its own accounting (the memory budget), and the
other transports and the Admin interface stay served. Also: a second logon on a logged-on
connection is refused and changes nothing, through a raw socket and the official client.
"""

from __future__ import annotations

import logging
import socket
import ssl
import time

import pytest

from amps_emulator.config import loads_config
from amps_emulator.protocol.codec import frame
from tests.support.entitlements import web_config, with_user
from tests.support.raw import RawClient, closed_by_server
from tests.support.servers import ServerThread, until
from tests.support.tls import self_signed
from tests.support.ws import WsPeer, ws_frame_header

AMPS = pytest.importorskip("AMPS")

MiB = 1 << 20
#: a frame announced before logon, as in the attack: 60 MiB, of which 2 MiB are sent
ANNOUNCED, SENT = 60 * MiB, 2 * MiB

TRANSPORTS = """
  <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <MessageType>json</MessageType><Protocol>amps</Protocol></Transport>
  <Transport><Name>ws</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <MessageType>json</MessageType><Protocol>websocket</Protocol></Transport>
  <Transport><Name>nvfix</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <MessageType>nvfix</MessageType><Protocol>nvfix</Protocol></Transport>
"""


def _config(transports: str = TRANSPORTS, extra: str = "") -> str:
    return f"<AMPSConfig><Name>bounds</Name><Transports>{transports}</Transports>{extra}</AMPSConfig>"


@pytest.fixture
def srv():
    s = ServerThread(loads_config(_config(), "bounds.xml"), logon_timeout=30).start()
    yield s
    s.stop()


def _port(server: ServerThread, name: str) -> int:
    return next(lst.port for lst in server.server.listeners if lst.name == name)


def _open_sockets(server: ServerThread, name: str) -> int:
    """The sockets the transport ``name`` counts against its MaxConnections."""
    return server.call(lambda: next(lst.cap.open for lst in server.server.listeners
                                    if lst.name == name))


def _held(server: ServerThread) -> int:
    """Bytes the server's accounting says the client connections hold."""
    return server.call(lambda: sum(c.buffered_bytes() for c in server.server.connections))


def _open_names(server: ServerThread) -> list[str | None]:
    return server.call(lambda: [c.client_name for c in server.server.connections if not c.closed])


def _send_partial(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:  # the server already closed it: what the test wants
        pass


def _attack(server: ServerThread, transport: str) -> socket.socket:
    """A connection on ``transport`` that sends, without logging on, the start of a frame
    announcing :data:`ANNOUNCED` bytes."""
    port = _port(server, transport)
    if transport == "ws":
        peer = WsPeer(port)  # upgraded, mode named; no logon
        _send_partial(peer.sock, ws_frame_header(ANNOUNCED) + b"x" * SENT)
        return peer.sock
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    _send_partial(sock, ANNOUNCED.to_bytes(4, "big") + b"x" * SENT)
    return sock


@pytest.mark.parametrize("transport", ["tcp", "ws", "nvfix"])
def test_a_large_frame_before_logon_is_refused_at_its_header(srv, transport):
    socks = [_attack(srv, transport) for _ in range(6)]
    try:
        assert all(closed_by_server(s) for s in socks), "an unauthenticated 60 MiB frame was kept"
        assert until(lambda: not _open_names(srv))
        assert _held(srv) == 0
    finally:
        for s in socks:
            s.close()
    c = AMPS.Client(f"after-{transport}")  # the transport still serves a client that logs on
    c.connect(f"tcp://127.0.0.1:{_port(srv, 'tcp')}/amps/json")
    c.logon(5000)
    c.close()


def test_a_websocket_partial_frame_counts_in_the_memory_budget(srv, caplog):
    srv.call(lambda: setattr(srv.server, "memory_budget", 5 * MiB))
    port = _port(srv, "ws")
    small, large = WsPeer(port), WsPeer(port)
    small.logon("ws-small")
    large.logon("ws-large")
    try:
        small.partial_frame(8 * MiB, 2 * MiB)  # (a logged-on client may send 8 MiB frames)
        assert until(lambda: _held(srv) >= 2 * MiB), _held(srv)
        with caplog.at_level(logging.WARNING, logger="amps_emulator.server"):
            _send_partial(large.sock, ws_frame_header(8 * MiB) + b"x" * (4 * MiB))
            assert large.closed_by_server()
        assert any("memory budget" in r.getMessage() and "ws-large" in r.getMessage()
                   for r in caplog.records)
        assert _open_names(srv) == ["ws-small"]
    finally:
        small.sock.close()
        large.sock.close()


def test_output_a_client_never_reads_before_logon_is_bounded(srv):
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # (before connect: a small window)
    sock.connect(("127.0.0.1", _port(srv, "tcp")))
    try:
        # each command gets a 'logon required' failure ack echoing its 1000-byte cid, which this
        # client never reads: 40 MB of acks, more than kernel buffers hold and far below the
        # 128 MB a logged-on client may have queued
        for i in range(40_000):
            try:
                sock.sendall(frame({"c": "sow", "t": "x", "cid": f"{i:06d}" + "c" * 994,
                                    "a": "processed"}))
            except OSError:
                break
        assert closed_by_server(sock), "an unauthenticated client's unread output was kept"
    finally:
        sock.close()


def test_an_unfinished_websocket_upgrade_is_closed_at_the_logon_timeout():
    s = ServerThread(loads_config(_config(), "bounds.xml"), logon_timeout=0.5).start()
    try:
        sock = socket.create_connection(("127.0.0.1", _port(s, "ws")), timeout=10)
        start = time.monotonic()
        request = (b"GET /amps/json HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                   b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n")
        closed = False
        for byte in request:  # trickled: a byte every 100 ms, never the end of the head
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            sock.settimeout(0.1)  # (the pace of the trickle)
            try:
                if not sock.recv(4096):
                    closed = True
                    break
            except TimeoutError:
                continue
            except ConnectionResetError:
                closed = True
                break
        assert closed, "an upgrade trickled for longer than the logon timeout stayed open"
        assert 0.4 <= time.monotonic() - start < 5
        assert s.call(lambda: len(s.server.budget)) == 0  # nothing left in the accounting
        sock.close()
    finally:
        s.stop()


def test_a_tls_handshake_that_never_starts_is_closed_at_the_logon_timeout(tmp_path):
    cert, key = self_signed(tmp_path)
    tls = ("<Transport><Name>tcps</Name><Type>tcps</Type><InetAddr>127.0.0.1:0</InetAddr>"
           f"<MessageType>json</MessageType><Certificate>{cert}</Certificate>"
           f"<PrivateKey>{key}</PrivateKey></Transport>")
    s = ServerThread(loads_config(_config(tls), "tls.xml"), logon_timeout=0.5).start()
    try:
        silent = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        assert closed_by_server(silent, timeout=5), "a silent TLS connection outlived the logon timeout"
        silent.close()
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", s.port), timeout=10)) as ok:
            assert closed_by_server(ok, timeout=5)  # handshake done, no logon: the logon timeout
    finally:
        s.stop()


CAPPED = """
  <Transport><Name>capped</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <MessageType>json</MessageType><MaxConnections>3</MaxConnections></Transport>
  <Transport><Name>ws-capped</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <MessageType>json</MessageType><Protocol>websocket</Protocol></Transport>
  <Transport><Name>other</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <MessageType>json</MessageType></Transport>
"""


def test_connections_past_max_connections_are_refused_with_one_log_line(caplog):
    cfg = loads_config(_config(CAPPED, "<MaxConnections>2</MaxConnections>"), "capped.xml")
    s = ServerThread(cfg, admin="127.0.0.1:0").start()
    held: list[socket.socket] = []
    try:
        with caplog.at_level(logging.WARNING, logger="amps_emulator.connection"):
            for name, cap in (("capped", 3), ("ws-capped", 2)):  # own, and the top-level default
                port = _port(s, name)
                held += [socket.create_connection(("127.0.0.1", port)) for _ in range(cap)]
                assert until(lambda n=name, k=cap: _open_sockets(s, n) == k)
                flood = [socket.create_connection(("127.0.0.1", port)) for _ in range(30)]
                assert all(closed_by_server(f, 5) for f in flood), "a connection past the cap was kept"
                for f in flood:
                    f.close()
            refusals = [r.getMessage() for r in caplog.records if "MaxConnections" in r.getMessage()]
        assert len(refusals) == 2, refusals  # one line per transport, not one per connection
        assert "'capped'" in refusals[0] and "'ws-capped'" in refusals[1]
        # the other transport and the Admin interface are served meanwhile
        c = AMPS.Client("elsewhere")
        c.connect(f"tcp://127.0.0.1:{_port(s, 'other')}/amps/json")
        c.logon(5000)
        c.close()
        assert s.http("/amps.json")
        # a place frees up when a connection closes
        held.pop(0).close()
        assert until(lambda: _open_sockets(s, "capped") == 2)
        late = AMPS.Client("late")
        late.connect(f"tcp://127.0.0.1:{_port(s, 'capped')}/amps/json")
        late.logon(5000)
        late.close()
    finally:
        for h in held:
            h.close()
        s.stop()


# -- a second logon ----------------------------------------------------------------------------

def test_a_second_logon_is_refused_and_the_identity_stays(tmp_path):
    docs = {"alice": {"topic": [{"topic": "alice-only", "read": True, "write": True}]},
            "bob": {"topic": [{"topic": "bob-only", "read": True, "write": True}]}}
    path = tmp_path / "config.xml"
    path.write_text(web_config(tmp_path, docs, sow=False))
    from amps_emulator.config import load_config

    s = ServerThread(load_config(path)).start()
    raw = RawClient(s.port)
    try:
        raw.send({"c": "logon", "cid": "1", "client_name": "first", "user_id": "alice",
                  "a": "processed"})
        ack, _ = raw.recv_frame()
        assert ack["status"] == "success" and ack["client_name"] == "first"
        raw.send({"c": "logon", "cid": "2", "client_name": "second", "user_id": "bob",
                  "a": "processed"})
        ack, _ = raw.recv_frame()
        assert (ack["status"], ack["reason"]) == ("failure", "duplicate logon"), ack
        assert "bob" not in str(ack) and "second" not in str(ack)
        # still alice, entitled as alice, under the first name
        raw.send({"c": "subscribe", "t": "bob-only", "sub_id": "b", "cid": "3", "a": "processed"})
        ack, _ = raw.recv_frame()
        assert (ack["status"], ack["reason"]) == ("failure", "not entitled")
        raw.send({"c": "subscribe", "t": "alice-only", "sub_id": "a", "cid": "4", "a": "processed"})
        assert raw.recv_frame()[0]["status"] == "success"
        assert s.call(lambda: [(c.client_name, c.user_id) for c in s.server.connections]) \
            == [("first", "alice")]
        # the official client: its second logon raises, and the server kept the first identity
        c = AMPS.Client("official")
        c.connect(with_user(s.uri, "alice"))
        c.logon(5000)
        with pytest.raises(AMPS.CommandException, match="duplicate logon"):
            c.logon(5000)
        c.close()
    finally:
        raw.close()
        s.stop()


def test_a_second_logon_without_security_changes_nothing(srv):
    raw = RawClient(_port(srv, "tcp"))
    try:
        assert raw.logon("once")["status"] == "success"
        raw.send({"c": "logon", "cid": "2", "client_name": "twice", "a": "processed", "mt": "json"})
        ack, _ = raw.recv_frame()
        assert (ack["status"], ack["reason"]) == ("failure", "duplicate logon")
        assert _open_names(srv) == ["once"]
        raw.send({"c": "flush", "cid": "f", "a": "processed"})
        assert raw.recv_frame()[0]["status"] == "success"  # the connection goes on
    finally:
        raw.close()
