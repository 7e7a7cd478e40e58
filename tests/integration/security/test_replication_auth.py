"""The replication port against an attacker, on a secured configuration (web entitlements with
``file:`` permission documents at instance level, which the ``amps-replication`` transport
inherits): a peer logs on with its hello before anything is answered, needs
``replication-logon``, may replicate only its ``replicated-topics``; the secure transport can
demand a client certificate; a connection that never logs on, or announces a huge frame
before it has, is closed; frames announced after an (anonymous) logon count in the server's
memory budget, and connections past the transport's MaxConnections are reset. Raw sockets
play the attacker; the official client checks that a
properly configured pair still replicates."""

from __future__ import annotations

import json
import logging
import socket
import ssl
import struct
from pathlib import Path

import AMPS
import pytest

from amps_emulator.config import loads_config
from amps_emulator.journal.record import RecordKind
from amps_emulator.pair import free_port
from amps_emulator.protocol.codec import frame, split_frame
from amps_emulator.replication.wire import BootstrapAsk, Hello
from amps_emulator.server.core.clock import TestClock
from tests.support.clients import Collector, logged_on
from tests.support.entitlements import with_user
from tests.support.servers import ServerThread, until

APP = {"logon": True, "password": "app-pw", "topic": [{"topic": ".*", "read": True, "write": True}]}
#: the identity each instance's destination logs on to the other with
PEER = {"logon": False, "replication-logon": True, "password": "peer-pw", "replicated-topics": [".*"]}
USERS = {"app": APP, "peer": PEER,
         "no-repl": {"logon": True, "replication-logon": False, "password": "x"},
         "limited": {"replication-logon": True, "password": "l", "replicated-topics": ["^allowed"]}}


def authenticator(user: str, password: str) -> str:
    return (f"<Authenticator><Module>amps-default-authenticator-module</Module><Options>"
            f"<User>{user}</User><Password>{password}</Password></Options></Authenticator>")


def node(name: str, data: Path, listen: int, *, peer: tuple[str, int] | None = None, logon: str = "",
         listener: str = "<Type>amps-replication</Type>", dest_type: str = "<Type>amps-replication</Type>",
         secured: bool = True) -> str:
    """Instance ``name``: a json transport, a replication transport on ``listen``, a SOW topic
    ``orders``, instance-level web entitlements reading ``data/perms/<user>.json`` (when
    ``secured``), and with ``peer`` (its name, its replication port) a one-way async Destination
    logging on with ``logon``."""
    perms = data / "perms"
    perms.mkdir(parents=True, exist_ok=True)
    for user, doc in USERS.items():
        (perms / f"{user}.json").write_text(json.dumps(doc))
    opts = f"<Options><ResourceURI>file:{perms}/{{{{USER_NAME}}}}.json</ResourceURI></Options>"
    security = ("<Modules><Module><Name>web</Name><Library>libamps_http_entitlement.so</Library></Module>"
                f"</Modules><Authentication><Module>web</Module>{opts}</Authentication>"
                f"<Entitlement><Module>web</Module>{opts}</Entitlement>") if secured else ""
    dest = "" if peer is None else (
        f"<Replication><Destination><Name>{peer[0]}</Name><Group>{peer[0]}</Group><SyncType>async</SyncType>"
        "<Topic><Name>.*</Name><MessageType>json</MessageType>"
        "<ExcludeValidation>replicate</ExcludeValidation></Topic>"
        f"<Transport>{dest_type}<InetAddr>127.0.0.1:{peer[1]}</InetAddr>"
        f"<ReconnectTimeout>0.05</ReconnectTimeout>{logon}</Transport></Destination></Replication>")
    return f"""<AMPSConfig><Name>{name}</Name><Group>{name}</Group>{security}
  <Transports>
    <Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <MessageType>json</MessageType><Protocol>amps</Protocol></Transport>
    <Transport><Name>amps-replication</Name>{listener}<InetAddr>127.0.0.1:{listen}</InetAddr></Transport>
  </Transports>
  <TransactionLog><JournalDirectory>{data}/journal</JournalDirectory>
    <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
  <SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{data}/sow/%n.sow</FileName></Topic></SOW>
  {dest}
</AMPSConfig>"""


def start(xml: str, name: str, **kwargs) -> ServerThread:
    return ServerThread(loads_config(xml, f"{name}.xml"), **kwargs).start()


def app(srv: ServerThread, name: str) -> AMPS.Client:
    return logged_on(with_user(srv.uri, "app", "app-pw"), name)


def replicates(a: ServerThread, b: ServerThread) -> None:
    """A message published at ``a`` reaches a subscriber at ``b``."""
    sub = app(b, "sub")
    got = Collector(lambda m: json.loads(m.get_data()))
    sub.subscribe(got, "orders")
    pub = app(a, "pub")
    pub.publish("orders", json.dumps({"id": 5}))
    assert got.wait_for(1) == [{"id": 5}]
    pub.close()
    sub.close()


def sow_of(client: AMPS.Client, topic: str) -> list[dict]:
    return [json.loads(m.get_data()) for m in client.sow(topic, timeout=5000) if m.get_command() == "sow"]


def read_all(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """Everything the server sends until it closes the connection (or ``timeout`` of silence)."""
    sock.settimeout(timeout)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except (ConnectionResetError, TimeoutError, ssl.SSLError):
        pass
    return got


def commands(data: bytes) -> list[str]:
    """The ``c`` of each replication frame in ``data``."""
    out = []
    while len(data) >= 4:
        size = struct.unpack(">I", data[:4])[0]
        h, _ = split_frame(data[4:4 + size])
        out.append(str(h.get("c")))
        data = data[4 + size:]
    return out


def hello(bootstrap: BootstrapAsk | None = None, **logon: str) -> bytes:
    """An emulator's hello from instance ``X``, with ``logon`` fields (``user``, ``pw``) if any."""
    h, body = split_frame(Hello(name="X", group="X", hw={}, bootstrap=bootstrap).encode()[4:])
    return frame({**h, **logon}, body)


def record(pos: int, topic: str, kind: RecordKind, body: bytes = b"", **more: str) -> bytes:
    h = {"c": "repl_rec", "pos": pos, "k": int(kind), "t": topic, "mt": "json", "pid": "777",
         "seq": str(pos), "cn": "intruder", "ts": 1, "path": "X", "ug": "X", **more}
    return frame(h, body)


@pytest.fixture
def secured(tmp_path):
    """One secured instance with a record in ``orders`` (SOW and journal) and its replication port."""
    port = free_port()
    srv = start(node("B", tmp_path / "B", port), "B")
    pub = app(srv, "pub")
    pub.publish("orders", json.dumps({"id": 1, "secret": "s"}))
    pub.publish_flush(5000)
    yield srv, port, pub
    pub.close()
    srv.stop()


def test_a_bootstrap_hello_without_a_logon_gets_nothing(secured, caplog):
    srv, port, _ = secured
    ask = BootstrapAsk(topics=((".*", "json"),))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(hello(ask))
        got = read_all(s)
    assert commands(got) == ["repl_refuse"], got[:300]  # no hello, no record, then closed
    assert b"secret" not in got
    assert until(lambda: any("replication link from" in r.getMessage() and "refused" in r.getMessage()
                             for r in caplog.records))


def test_records_and_a_sow_delete_from_an_unauthenticated_peer_change_nothing(secured):
    srv, port, pub = secured
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(hello(user="app", pw="wrong")
                  + record(1, "orders", RecordKind.PUBLISH, json.dumps({"id": 9}).encode())
                  + record(2, "orders", RecordKind.SOW_DELETE, h=json.dumps({"filter": "1=1"})))
        got = read_all(s)
    assert commands(got) == ["repl_refuse"]
    assert sow_of(pub, "orders") == [{"id": 1, "secret": "s"}]


def test_a_peer_without_replication_logon_is_refused_and_both_sides_say_so(tmp_path, caplog):
    a_port, b_port = free_port(), free_port()
    a = start(node("A", tmp_path / "A", a_port), "A")
    b = start(node("B", tmp_path / "B", b_port, peer=("A", a_port), logon=authenticator("no-repl", "x")), "B")
    try:
        def lines() -> tuple[list[str], list[str]]:
            msgs = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
            return ([m for m in msgs if m.startswith("replication link from") and "no-repl" in m],
                    [m for m in msgs if m.startswith("replication destination 'A'") and "refused" in m])
        assert until(lambda: all(lines()), timeout=10), [r.getMessage() for r in caplog.records]
        here, there = lines()
        assert "replication-logon" in here[0]
        assert "not entitled" in there[0]
        assert b.call(lambda: b.server.replication.state("A").connected) is False
    finally:
        b.stop()
        a.stop()


def test_a_properly_secured_pair_replicates(tmp_path):
    a_port, b_port = free_port(), free_port()
    xml_a = node("A", tmp_path / "A", a_port, peer=("B", b_port), logon=authenticator("peer", "peer-pw"))
    xml_b = node("B", tmp_path / "B", b_port, peer=("A", a_port), logon=authenticator("peer", "peer-pw"))
    cfg_a = loads_config(xml_a, "A.xml")
    # every security element of the link is honoured, none ignored
    assert not [w for w in cfg_a.warnings if "Authenticat" in w.reason or "Entitlement" in w.reason]
    a = ServerThread(cfg_a).start()
    b = start(xml_b, "B")
    try:
        replicates(a, b)
    finally:
        b.stop()
        a.stop()


def test_replicated_topics_limit_what_a_peer_may_replicate(tmp_path, caplog):
    a_port, b_port = free_port(), free_port()
    a = start(node("A", tmp_path / "A", a_port), "A")
    b = start(node("B", tmp_path / "B", b_port, peer=("A", a_port), logon=authenticator("limited", "l")), "B")
    try:
        sub = app(a, "sub")
        allowed, denied = Collector(lambda m: json.loads(m.get_data())), Collector()
        sub.subscribe(allowed, "allowed-1")
        sub.subscribe(denied, "denied-1")
        pub = app(b, "pub")
        for i in range(20):
            pub.publish("denied-1", json.dumps({"n": i}))
        pub.publish("allowed-1", json.dumps({"n": "marker"}))  # after the others on the one link
        assert allowed.wait_for(1) == [{"n": "marker"}]
        assert denied.items == []
        refusals = [r.getMessage() for r in caplog.records if "records of topic" in r.getMessage()
                    or "a record of topic" in r.getMessage()]
        assert len(refusals) == 1 and "'denied-1'" in refusals[0]  # once, not once per record
        pub.close()
        sub.close()
    finally:
        b.stop()
        a.stop()


def test_the_secure_transport_refuses_a_peer_without_a_client_certificate(tmp_path):
    pytest.importorskip("cryptography")
    from tests.support.tls import self_signed

    cert, key = self_signed(tmp_path / "certs")
    tls = f"<Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>"
    port, b_port = free_port(), free_port()
    secure = (f"<Type>amps-replication-secure</Type>{tls}<VerifyClient>true</VerifyClient>"
              f"<CAFile>{cert}</CAFile>")
    a = start(node("A", tmp_path / "A", port, listener=secure, secured=False), "A")
    # a peer that presents the certificate the CAFile trusts replicates
    b = start(node("B", tmp_path / "B", b_port, peer=("A", port), secured=False,
                   dest_type=f"<Type>amps-replication-secure</Type>{tls}"), "B")
    try:
        assert until(lambda: b.call(lambda: b.server.replication.state("A").connected))
        plain = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        plain.check_hostname, plain.verify_mode = False, ssl.CERT_NONE
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            got = b""
            try:
                with plain.wrap_socket(raw) as s:
                    s.sendall(hello(user="x"))
                    got = read_all(s)
            except (ssl.SSLError, ConnectionResetError):
                pass  # refused during the handshake
        assert b"repl_hello" not in got
    finally:
        b.stop()
        a.stop()


def test_a_silent_connection_is_closed_at_the_logon_timeout(tmp_path, caplog):
    port = free_port()
    clock = TestClock()
    srv = start(node("B", tmp_path / "B", port), "B", timebase=clock)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.settimeout(0.2)

            def closed() -> bool:
                srv.call(lambda: clock.advance(31))  # past the 30 s logon timeout, on the server clock
                try:
                    return s.recv(1) == b""
                except TimeoutError:
                    return False
                except ConnectionResetError:
                    return True

            assert until(closed, timeout=10)
        # logged once the handler resumes, just after the close
        assert until(lambda: any("no logon within 30s" in r.getMessage() for r in caplog.records))
    finally:
        srv.stop()


def test_a_huge_frame_before_the_logon_is_refused_unread(secured, caplog):
    _, port, pub = secured
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(struct.pack(">I", 60 << 20) + b"x" * 65536)  # announces 60 MiB, sends a little
        assert read_all(s) == b""  # closed at once, without waiting for (or holding) the rest
    assert until(lambda: any(f"frame of {60 << 20} bytes" in r.getMessage() for r in caplog.records))
    assert sow_of(pub, "orders") == [{"id": 1, "secret": "s"}]


# -- memory and descriptors -------------------------------------------------------------------

MiB = 1 << 20


def logged_on_link(port: int) -> socket.socket:
    """A raw connection to the replication port that has logged on (anonymously: the instance
    is not secured) and read the instance's hello."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(hello())
    size = struct.unpack(">I", s.recv(4, socket.MSG_WAITALL))[0]
    assert commands(struct.pack(">I", size) + s.recv(size, socket.MSG_WAITALL)) == ["repl_hello"]
    return s


def closed_by_server(s: socket.socket, timeout: float = 5.0) -> bool:
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def announce(s: socket.socket, size: int, sent: int) -> None:
    """The start of a frame of ``size`` bytes, ``sent`` of them."""
    try:
        s.sendall(struct.pack(">I", size) + b"x" * sent)
    except OSError:  # the server already closed it: what the tests want
        pass


def budgeted_links(data, large: int):
    """An instance B accepting replication (anonymous logon) with a 5 MiB memory budget, a
    link logged on to it, and ``large`` more: (server, its budget, the link, the others)."""
    port = free_port()
    srv = start(node("B", data / "B", port, secured=False), "B")
    srv.call(lambda: setattr(srv.server, "memory_budget", 5 * MiB))
    return srv, srv.server.budget, logged_on_link(port), [logged_on_link(port) for _ in range(large)]


def test_large_frames_after_an_anonymous_logon_count_in_the_memory_budget(tmp_path, caplog):
    srv, budget, small, large = budgeted_links(tmp_path, 6)
    try:
        announce(small, 2 * MiB, MiB)  # (a peer may send frames up to 64 MiB once logged on)
        assert until(lambda: srv.call(budget.held) >= 2 * MiB)
        with caplog.at_level(logging.WARNING, logger="amps_emulator.server"):
            for s in large:
                announce(s, 8 * MiB, MiB)
            assert all(closed_by_server(s) for s in large), "8 MiB frames past the budget were kept"
        drops = [r.getMessage() for r in caplog.records if r.getMessage().startswith("memory budget")]
        assert len(drops) == 6 and all("replication link from" in m for m in drops), drops
        assert not closed_by_server(small, timeout=0.5)  # within the budget: still open
        assert srv.call(lambda: len(budget)) == 1
    finally:
        for s in [small, *large]:
            s.close()
        assert until(lambda: srv.call(lambda: len(budget)) == 0)  # discarded at their close
        srv.stop()


def test_a_flood_past_max_connections_is_reset_and_the_pair_still_replicates(tmp_path, caplog):
    a_port, b_port = free_port(), free_port()
    capped = "<Type>amps-replication</Type><MaxConnections>3</MaxConnections>"
    b = start(node("B", tmp_path / "B", b_port, listener=capped, secured=False), "B")
    a = start(node("A", tmp_path / "A", a_port, peer=("B", b_port), secured=False), "A")
    cap = b.server.replication.intake.cap
    held: list[socket.socket] = []
    try:
        assert until(lambda: a.call(lambda: a.server.replication.state("B").connected))
        held = [socket.create_connection(("127.0.0.1", b_port)) for _ in range(2)]  # the cap's rest
        assert until(lambda: b.call(lambda: cap.open) == 3)
        with caplog.at_level(logging.WARNING, logger="amps_emulator.connection"):
            flood = [socket.create_connection(("127.0.0.1", b_port)) for _ in range(30)]
            assert all(closed_by_server(f) for f in flood), "a connection past MaxConnections was kept"
            for f in flood:
                f.close()
        refusals = [r.getMessage() for r in caplog.records if "MaxConnections" in r.getMessage()]
        assert len(refusals) == 1 and "'amps-replication'" in refusals[0], refusals
        assert b.call(lambda: cap.refused) == 30
        replicates(a, b)  # the pair's link, admitted before the flood, still replicates
        held.pop().close()  # a place frees up when a connection closes
        assert until(lambda: b.call(lambda: cap.open) == 2)
    finally:
        for h in held:
            h.close()
        a.stop()
        b.stop()
