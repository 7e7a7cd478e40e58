"""Replication over TLS: an ``amps-replication-secure`` transport (Certificate, PrivateKey) and a
Destination Transport of that Type. As AMPS does, the connecting side encrypts without checking
the destination's certificate unless its Transport has ``VerifyClient`` with CAFile/CAPath, and
then refuses a certificate those CAs did not sign; a plain connection to the secure port gets
nowhere."""

from __future__ import annotations

import json
import socket
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
