"""Replication over TLS: an ``amps-replication-secure`` transport (Certificate, PrivateKey) and a
Destination Transport of that Type. As AMPS does, the connecting side encrypts without checking
the destination's certificate unless its Transport has ``VerifyClient`` with CAFile/CAPath, and
then refuses a certificate those CAs did not sign; a plain connection to the secure port gets
nowhere."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from pathlib import Path

import AMPS
import pytest

from amps_emulator.config import loads_config
from amps_emulator.embedded import EmbeddedServer
from amps_emulator.pair import free_port, pair_config
from tests.support.tls import self_signed

pytest.importorskip("cryptography")


def secure(xml: str, cert: Path, key: Path, verify: Path | None) -> str:
    """``pair_config``'s XML with both replication transports of Type -secure."""
    listener = "<Type>amps-replication</Type>\n      <InetAddr>"
    assert listener in xml
    xml = xml.replace(listener, f"<Type>amps-replication-secure</Type><Certificate>{cert}</Certificate>"
                                f"<PrivateKey>{key}</PrivateKey>\n      <InetAddr>", 1)
    dest = "<Transport><Type>amps-replication</Type>"
    assert dest in xml
    check = "" if verify is None else f"<VerifyClient>true</VerifyClient><CAFile>{verify}</CAFile>"
    return xml.replace(dest, f"<Transport><Type>amps-replication-secure</Type>{check}", 1)


def start_pair(tmp_path: Path, verify_with: Path | None) -> tuple[EmbeddedServer, EmbeddedServer, int]:
    cert, key = self_signed(tmp_path / "certs")
    ports = free_port(), free_port()
    servers = []
    for i, name in enumerate(("A", "B")):
        xml = pair_config(name, "BA"[i], repl_port=ports[i], peer_repl_port=ports[1 - i],
                          data_dir=tmp_path / name, sync_type="async", reconnect_timeout=0.05)
        cfg = loads_config(secure(xml, cert, key, verify_with), f"{name}.xml")
        servers.append(EmbeddedServer(cfg, hold_ports=False).start())
    return servers[0], servers[1], ports[1]


def connected(srv: EmbeddedServer, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if srv.call(lambda: bool(srv.server.replication and srv.server.replication.connected)):
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("verify", [False, True], ids=["encrypted", "verified"])
def test_a_secure_pair_replicates(tmp_path, verify):
    cert_dir = tmp_path / "certs"
    a, b, _ = start_pair(tmp_path, cert_dir / "cert.pem" if verify else None)
    try:
        assert connected(a) and connected(b)
        pub = AMPS.Client("tls-pub")
        pub.connect(a.uri)
        pub.logon(5000)
        sub = AMPS.Client("tls-sub")
        sub.connect(b.uri)
        sub.logon(5000)
        stream = sub.subscribe("orders", timeout=5000)
        pub.publish("orders", json.dumps({"id": 1}))
        pub.publish_flush(5000)
        msg = next(iter(stream))
        assert json.loads(msg.get_data()) == {"id": 1}
        pub.close()
        sub.close()
    finally:
        a.stop()
        b.stop()


def test_verify_client_refuses_a_certificate_its_cas_did_not_sign(tmp_path):
    other_ca, _ = self_signed(tmp_path / "other")  # a CA that signed neither server's certificate
    a, b, _ = start_pair(tmp_path, other_ca)
    try:
        assert not connected(a, timeout=1.0)  # each side refuses the other's certificate
        assert a.call(lambda: a.server.replication.state("B").connected) is False
    finally:
        a.stop()
        b.stop()


def test_a_plain_connection_to_the_secure_port_gets_nowhere(tmp_path):
    """An emulator's hello in the clear (what a plain amps-replication Destination sends) is not
    answered: the port speaks TLS only."""
    from amps_emulator.replication.wire import Hello

    a, b, b_port = start_pair(tmp_path, None)
    try:
        assert connected(a)
        with socket.create_connection(("127.0.0.1", b_port), timeout=5) as s:
            s.sendall(Hello(name="C", group="pair", hw={}).encode())
            s.settimeout(5)
            got = b""
            try:
                while chunk := s.recv(4096):
                    got += chunk
            except (ConnectionResetError, TimeoutError):
                pass
        assert b"repl_hello" not in got
        assert connected(a)  # the secure link is untouched
    finally:
        a.stop()
        b.stop()


def _tls_client(version: ssl.TLSVersion) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ctx.maximum_version = version
    return ctx


def _handshakes(port: int, version: ssl.TLSVersion) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                _tls_client(version).wrap_socket(raw):
            return True
    except (ssl.SSLError, ConnectionError):
        return False


def test_the_secure_replication_transport_takes_secure_socket_protocols(tmp_path):
    """B's amps-replication-secure transport accepts TLS 1.3 only: A (whose Destination offers
    every version) still replicates to it, and a TLS 1.2 handshake on its port is refused."""
    cert, key = self_signed(tmp_path / "certs")
    ports = free_port(), free_port()
    servers = []
    for i, name in enumerate(("A", "B")):
        xml = secure(pair_config(name, "BA"[i], repl_port=ports[i], peer_repl_port=ports[1 - i],
                                 data_dir=tmp_path / name, sync_type="async", reconnect_timeout=0.05),
                     cert, key, None)
        if name == "B":
            xml = xml.replace("<Type>amps-replication-secure</Type><Certificate>",
                              "<Type>amps-replication-secure</Type>"
                              "<SecureSocketProtocols>TLSv1.3</SecureSocketProtocols><Certificate>", 1)
        cfg = loads_config(xml, f"{name}.xml")
        servers.append(EmbeddedServer(cfg, hold_ports=False).start())
    a, b = servers
    try:
        assert b.call(lambda: b.server.config.replication_listener.secure_socket_protocols) == ("TLSv1.3",)
        assert connected(a)
        assert _handshakes(ports[1], ssl.TLSVersion.TLSv1_3)
        assert not _handshakes(ports[1], ssl.TLSVersion.TLSv1_2)
        assert _handshakes(ports[0], ssl.TLSVersion.TLSv1_2)  # A's transport keeps the default list
    finally:
        a.stop()
        b.stop()


class _OneHandshake:
    """A TLS 1.2 server that accepts one connection, offering only ``cipher``, and records the
    cipher it agreed on (or the error)."""

    def __init__(self, cert: Path, key: Path, cipher: str) -> None:
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        self.ctx.set_ciphers(cipher)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(15)
        self.port = self.sock.getsockname()[1]
        self.outcome: str | None = None
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError as exc:
            self.outcome = f"no connection: {exc}"
            self.done.set()
            return
        try:
            with self.ctx.wrap_socket(conn, server_side=True) as tls:
                cipher = tls.cipher()
                self.outcome = cipher[0] if cipher else ""
        except (ssl.SSLError, OSError) as exc:
            self.outcome = f"refused: {exc}"
        finally:
            conn.close()
            self.sock.close()
            self.done.set()


def _first_handshake(tmp_path: Path, ciphers: str) -> str | None:
    """What a TLS 1.2 destination that takes only ECDHE-ECDSA-AES256-GCM-SHA384 made of the
    first connection of a Destination Transport with ``ciphers``."""
    cert, key = self_signed(tmp_path / "certs")
    remote = _OneHandshake(cert, key, "ECDHE-ECDSA-AES256-GCM-SHA384")
    xml = secure(pair_config("A", "B", repl_port=free_port(), peer_repl_port=remote.port,
                             data_dir=tmp_path / "A", sync_type="async", reconnect_timeout=0.05),
                 cert, key, None)
    xml = xml.replace("<Transport><Type>amps-replication-secure</Type>",
                      f"<Transport><Type>amps-replication-secure</Type><Ciphers>{ciphers}</Ciphers>", 1)
    a = EmbeddedServer(loads_config(xml, "A.xml"), hold_ports=False).start()
    try:
        assert remote.done.wait(15)
        return remote.outcome
    finally:
        a.stop()


def test_a_destination_offers_only_its_ciphers(tmp_path):
    """A Destination Transport's Ciphers is what its connection offers: a destination taking
    that suite agrees on it, one taking only another suite refuses the handshake."""
    suite = "ECDHE-ECDSA-AES256-GCM-SHA384"
    assert _first_handshake(tmp_path / "shared", suite) == suite
    disjoint = _first_handshake(tmp_path / "disjoint", "ECDHE-ECDSA-CHACHA20-POLY1305")
    assert disjoint is not None and disjoint.startswith("refused"), disjoint
