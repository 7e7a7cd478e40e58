"""``amps-unix`` transports: the official Python client over a Unix-domain socket
(``unix://localhost:0/amps/json?path=...``), the socket file's mode from ``FileMask``, a stale
socket file replaced and anything else at the path refused, the file removed at shutdown;
the same protocol stack as TCP (authentication, a malformed frame, the Admin listings)."""

from __future__ import annotations

import json
import os
import socket
import stat

import AMPS
import pytest

from amps_emulator.config import ConfigError, loads_config
from tests.support.clients import Collector, Inbox
from tests.support.entitlements import NO_AUTH, with_user
from tests.support.raw import RawClient
from tests.support.servers import ServerThread, until


def unix_config(path, extra: str = "", transport_extra: str = "<FileMask>0660</FileMask>") -> str:
    return f"""<AMPSConfig>
  <Name>unix-test</Name>{extra}
  <Transports>
    <Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <MessageType>json</MessageType><Protocol>amps</Protocol></Transport>
    <Transport><Name>local</Name><Type>amps-unix</Type><Protocol>amps</Protocol>
      <MessageType>json</MessageType>
      <FileName>{path}</FileName>{transport_extra}</Transport>
  </Transports>
  <SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
    <Durability>transient</Durability></Topic></SOW>
</AMPSConfig>"""


def logged_on(uri: str, name: str) -> AMPS.Client:
    c = AMPS.Client(name)
    c.connect(uri)
    c.logon(5000)
    return c


def stale_socket(path) -> None:
    """A socket file left behind by a process gone (bound, never unlinked)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()


@pytest.fixture
def sock_path(tmp_path):
    return tmp_path / "amps.sock"


def test_the_official_client_works_over_the_socket_and_the_admin_lists_it(tmp_path, sock_path):
    srv = ServerThread(loads_config(unix_config(
        sock_path, "<Admin><InetAddr>127.0.0.1:0</InetAddr></Admin>"), "unix.xml")).start()
    try:
        tcp_uri, unix_uri = srv.uris
        assert unix_uri == f"unix://localhost:0/amps/json?path={sock_path}"
        assert stat.S_ISSOCK(os.stat(sock_path).st_mode)
        assert stat.S_IMODE(os.stat(sock_path).st_mode) == 0o660  # FileMask, as chmod sets it
        local, remote = logged_on(unix_uri, "local"), logged_on(tcp_uri, "remote")
        got = Collector()
        remote.subscribe(got, "orders")
        local.publish("orders", json.dumps({"id": 1, "qty": 5}))
        local.flush(5000)
        assert [json.loads(d) for _, _, d, _, _ in got.wait_for(1)] == [{"id": 1, "qty": 5}]
        rows = Inbox.of(local, AMPS.Command("sow").set_topic("orders")).take()
        assert [d for kind, d in rows if kind == "sow"] == [{"id": 1, "qty": 5}]
        clients = srv.http("/amps/instance/clients.json")["amps"]["instance"]["clients"]
        peers = {c["client_name"]: c["remote_address"] for c in clients}
        assert peers["local"] == str(sock_path)
        assert peers["remote"].startswith("127.0.0.1:")
        transports = {t["id"]: t for t in
                      srv.http("/amps/instance/transports.json")["amps"]["instance"]["transports"]}
        assert transports["local"]["type"] == "amps-unix"
        assert transports["local"]["file_name"] == str(sock_path)
        console = srv.http("/")  # (the console's page: its clients' and transports' tables)
        assert f"<td>{sock_path}</td>" in console and "?path=" in console
        # disabled, then enabled again: listening anew at the same path
        srv.http("/amps/administrator/transports/local/disable")
        with pytest.raises(AMPS.AMPSException):
            logged_on(unix_uri, "refused")
        srv.http("/amps/administrator/transports/local/enable")
        assert until(lambda: next(t["enabled"] for t in srv.http("/emulator/health")["transports"]
                                  if t["name"] == "local"))
        logged_on(unix_uri, "again").close()
        local.close()
        remote.close()
    finally:
        srv.stop()
    assert not os.path.lexists(sock_path)  # removed at shutdown


def test_a_stale_socket_file_is_replaced(tmp_path, sock_path):
    stale_socket(sock_path)
    srv = ServerThread(loads_config(unix_config(sock_path), "unix.xml")).start()
    try:
        logged_on(srv.uris[1], "after-stale").close()
    finally:
        srv.stop()


def test_a_regular_file_at_the_path_is_a_config_error_and_is_kept(tmp_path, sock_path):
    sock_path.write_text("precious")
    xml = unix_config(sock_path)
    with pytest.raises(ConfigError) as info:
        loads_config(xml, "unix.xml")
    (issue,) = info.value.errors
    assert (issue.file, issue.line) == ("unix.xml", xml.splitlines().index(
        next(line for line in xml.splitlines() if "<FileName>" in line)) + 1)
    assert "not a socket" in issue.reason
    # the file appears between the config's load and the start: refused then, kept too
    sock_path.unlink()
    cfg = loads_config(xml, "unix.xml")
    sock_path.write_text("precious")
    with pytest.raises(ConfigError) as info:
        ServerThread(cfg).start()
    assert "not a socket" in str(info.value) and "unix.xml" in str(info.value)
    assert sock_path.read_text() == "precious"


def test_a_socket_another_process_listens_on_is_not_taken(tmp_path, sock_path):
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(str(sock_path))
    other.listen(1)
    try:
        with pytest.raises(ConfigError) as info:
            ServerThread(loads_config(unix_config(sock_path), "unix.xml")).start()
        assert "another process listens" in str(info.value)
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.connect(str(sock_path))  # still the other process's
        probe.close()
    finally:
        other.close()


def test_without_a_mask_the_socket_has_the_default_mode(tmp_path, sock_path):
    srv = ServerThread(loads_config(unix_config(sock_path, transport_extra=""), "u.xml")).start()
    try:
        umask = os.umask(0)
        os.umask(umask)
        assert stat.S_IMODE(os.stat(sock_path).st_mode) == 0o777 & ~umask
    finally:
        srv.stop()


def test_an_unauthenticated_user_is_refused_as_on_tcp(tmp_path, sock_path):
    srv = ServerThread(loads_config(unix_config(sock_path, NO_AUTH), "unix.xml")).start()
    try:
        c = AMPS.Client("nobody")
        c.connect(with_user(srv.uris[1], "alice", "pw"))
        with pytest.raises(AMPS.AuthenticationException):
            c.logon(5000)
        raw = RawClient.unix(str(sock_path))
        header = raw.logon("raw-alice")
        assert header["status"] == "failure" and header["reason"] == "auth failure"
        assert raw.closed_by_server()
    finally:
        srv.stop()


def test_a_malformed_frame_closes_only_that_connection(tmp_path, sock_path):
    srv = ServerThread(loads_config(unix_config(sock_path), "unix.xml")).start()
    try:
        bad = RawClient.unix(str(sock_path))
        assert bad.logon("bad")["status"] == "success"
        bad.send_raw((9).to_bytes(4, "big") + b"{not json")
        assert bad.closed_by_server()
        good = RawClient.unix(str(sock_path))
        assert good.logon("good")["status"] == "success"
        good.close()
    finally:
        srv.stop()
