"""Authentication and entitlements (issue 22; beyond-json.md B.4, B.6), through the official
Python client. Permission documents come from ``file:`` ResourceURIs (the emulator's extension)
or from an in-process HTTP server thread (the corpus's web-entitlements config)."""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path

import pytest

from amps_emulator.config import load_config
from tests.harness import ServerThread

AMPS = pytest.importorskip("AMPS")


def transport(name: str, extra: str = "") -> str:
    return (f"<Transport><Name>{name}</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>"
            f"<MessageType>json</MessageType>{extra}</Transport>")


def config(body: str, transports: str | None = None) -> str:
    return (f"<AMPSConfig><Name>ent</Name>{body}"
            f"<Transports>{transports if transports is not None else transport('json-tcp')}"
            "</Transports></AMPSConfig>")


def serve(tmp_path: Path, xml: str) -> ServerThread:
    path = tmp_path / "config.xml"
    path.write_text(xml)
    return ServerThread(load_config(path)).start()


def with_user(uri: str, user: str, password: str | None = None) -> str:
    scheme, rest = uri.split("://", 1)
    cred = user if password is None else f"{user}:{password}"
    return f"{scheme}://{cred}@{rest}"


def logged_on(uri: str, name: str = "c"):
    c = AMPS.Client(name)
    c.connect(uri)
    c.logon(5000)
    return c


def no_auth(where: str) -> str:
    return f"<Authentication><Module>amps-default-no-authentication-module</Module></Authentication>"


def test_no_authentication_module_refuses_the_logon_and_closes(tmp_path):  # B.6 1
    srv = serve(tmp_path, config(no_auth("instance")))
    try:
        c = AMPS.Client("c")
        c.connect(with_user(srv.uri, "alice", "pw"))
        with pytest.raises(AMPS.AuthenticationException) as info:
            c.logon(5000)
        assert "alice" in str(info.value)
        host, port = srv.uri.split("://")[1].split("/")[0].rsplit(":", 1)
        raw = socket.create_connection((host, int(port)))
        logon = json.dumps({"c": "logon", "cid": "1", "a": "processed", "user_id": "alice"}).encode()
        raw.sendall(struct.pack(">I", len(logon)) + logon)
        raw.settimeout(5)
        got = b""
        while True:  # the failure ack, then the server closes the socket
            chunk = raw.recv(4096)
            if not chunk:
                break
            got += chunk
        assert b'"status":"failure"' in got and b"auth failure" in got
        raw.close()
    finally:
        srv.stop()


def test_a_transport_overrides_the_instance_authentication(tmp_path):  # B.6 2
    ok = "<Authentication><Module>amps-default-authentication-module</Module></Authentication>"
    srv = serve(tmp_path, config(no_auth("instance"), transport("closed") + transport("open", ok)))
    try:
        closed, opened = srv.uris
        with pytest.raises(AMPS.AuthenticationException):
            logged_on(with_user(closed, "alice", "x"), "a").disconnect()
        c = logged_on(with_user(opened, "alice", "x"), "b")
        c.disconnect()
    finally:
        srv.stop()
