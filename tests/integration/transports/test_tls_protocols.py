"""``SecureSocketProtocols`` and ``Ciphers`` on TLS transports, seen from Python ``ssl``
clients that force one protocol version or one cipher: a transport restricted to TLS 1.3
refuses a TLS 1.2 client and serves a TLS 1.3 one; a transport without the element accepts
what AMPS's default list (TLS 1.1 to 1.3) allows, OpenSSL's security level permitting; a
transport's Ciphers decide the TLS 1.2 suite."""

from __future__ import annotations

import json
import socket
import ssl
import warnings

import pytest

from tests.support.servers import start_server
from tests.support.tls import self_signed

CONFIG = """<AMPSConfig>
  <Name>tls-protocols</Name>
  <Transports>
    <Transport><Name>only13</Name><Type>tcps</Type><InetAddr>127.0.0.1:0</InetAddr>
      <Protocol>amps</Protocol><MessageType>json</MessageType>
      <Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>
      <SecureSocketProtocols>TLSv1.3</SecureSocketProtocols></Transport>
    <Transport><Name>only12</Name><Type>tcps</Type><InetAddr>127.0.0.1:0</InetAddr>
      <Protocol>amps</Protocol><MessageType>json</MessageType>
      <Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>
      <SecureSocketProtocols>TLSv1.2</SecureSocketProtocols>
      <Ciphers>ECDHE-ECDSA-AES128-GCM-SHA256</Ciphers></Transport>
    <Transport><Name>default</Name><Type>tcps</Type><InetAddr>127.0.0.1:0</InetAddr>
      <Protocol>amps</Protocol><MessageType>json</MessageType>
      <Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>
      <Ciphers>DEFAULT:@SECLEVEL=0</Ciphers></Transport>
    <Transport><Name>modern</Name><Type>tcps</Type><InetAddr>127.0.0.1:0</InetAddr>
      <Protocol>amps</Protocol><MessageType>json</MessageType>
      <Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>
      <Ciphers>DEFAULT:@SECLEVEL=0</Ciphers>
      <SecureSocketProtocols>TLSv1.2 TLSv1.3</SecureSocketProtocols></Transport>
  </Transports>
</AMPSConfig>"""


@pytest.fixture(scope="module")
def ports(tmp_path_factory):
    cert, key = self_signed(tmp_path_factory.mktemp("tls"))
    srv = start_server(CONFIG.format(cert=cert, key=key), "tls-protocols.xml")
    yield {ls.name: ls.port for ls in srv.server.listeners}
    srv.stop()


def _client(version: ssl.TLSVersion, ciphers: str | None = None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with warnings.catch_warnings():  # TLS 1.1 is deprecated by the ssl module
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ctx.maximum_version = version
    if ciphers is not None:
        ctx.set_ciphers(ciphers)
    return ctx


def handshake(port: int, version: ssl.TLSVersion, ciphers: str | None = None) -> tuple[str, str] | str:
    """(protocol, cipher) of a handshake that succeeded and a logon it carried; else why it
    failed."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                _client(version, ciphers).wrap_socket(raw) as tls:
            header = json.dumps({"c": "logon", "cid": "1", "client_name": f"tls-{version.name}",
                                 "a": "processed", "mt": "json"}).encode()
            tls.sendall(len(header).to_bytes(4, "big") + header)
            size = int.from_bytes(tls.recv(4), "big")
            ack = b""
            while len(ack) < size:
                ack += tls.recv(size - len(ack))
            assert b'"status":"success"' in ack.replace(b" ", b""), ack
            cipher = tls.cipher()
            return str(tls.version()), cipher[0] if cipher else ""
    except ssl.SSLError as exc:  # the server's alert, or its close before one (asyncio's TLS)
        return exc.reason or str(exc)
    except ConnectionError as exc:
        return f"closed: {exc}"


def refused(outcome: tuple[str, str] | str) -> bool:
    """A handshake the server refused (for its protocol version or cipher)."""
    return isinstance(outcome, str)


def test_a_tls13_transport_refuses_a_tls12_client(ports):
    assert handshake(ports["only13"], ssl.TLSVersion.TLSv1_3)[0] == "TLSv1.3"
    assert refused(handshake(ports["only13"], ssl.TLSVersion.TLSv1_2))


def test_a_tls12_transport_refuses_tls13_and_uses_its_cipher(ports):
    assert handshake(ports["only12"], ssl.TLSVersion.TLSv1_2) == ("TLSv1.2", "ECDHE-ECDSA-AES128-GCM-SHA256")
    assert refused(handshake(ports["only12"], ssl.TLSVersion.TLSv1_3))
    # a client offering only another suite finds nothing in common
    assert refused(handshake(ports["only12"], ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-CHACHA20-POLY1305"))


def test_the_default_list_starts_at_tls11_and_a_list_can_leave_it_out(ports):
    """AMPS's default accepts TLS 1.1 (OpenSSL 3 negotiates it only at security level 0,
    which these transports' Ciphers set); listing TLS 1.2 and 1.3 refuses it."""
    old = "DEFAULT:@SECLEVEL=0"
    assert handshake(ports["default"], ssl.TLSVersion.TLSv1_1, old)[0] == "TLSv1.1"
    assert handshake(ports["default"], ssl.TLSVersion.TLSv1_3)[0] == "TLSv1.3"
    assert refused(handshake(ports["modern"], ssl.TLSVersion.TLSv1_1, old))
    assert handshake(ports["modern"], ssl.TLSVersion.TLSv1_2)[0] == "TLSv1.2"
