"""Authentication and entitlements around the message path (issue 22; docs/design/beyond-json.md B.1,
B.4, B.6): client certificates, the JavaScript client, the Admin interface's own modules and
challenge, bad permission documents, SIGUSR1/SIGUSR2 and the authentication actions."""

from __future__ import annotations

import json
import socket
import struct

import pytest

from amps_emulator.config import loads_config
from tests.support.clients import logged_on
from tests.support.entitlements import (
    ALL,
    FILTERED,
    NO_AUTH,
    config,
    serve,
    simple_access,
    transport,
    web_config,
    with_user,
)
from tests.support.servers import ServerThread

AMPS = pytest.importorskip("AMPS")


def test_client_certificates_with_the_official_client_and_a_capath(tmp_path):
    """The official Python client presents no client certificate (it has no API for one): a
    transport with VerifyClient refuses its handshake, one without accepts it. A CAPath
    directory (OpenSSL hashed names) vouches for certificates as a CAFile does."""
    import shutil
    import ssl
    import subprocess

    from tests.support.tls import self_signed

    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command names the CAPath files")
    # the official client's TLS settings are process-wide, and OpenSSL finds a trusted
    # certificate by its subject: a name of our own, not the "localhost" other tests trust
    cert, key = self_signed(tmp_path / "server", name="entitlements-test-server")
    client_cert, client_key = self_signed(tmp_path / "client", name="alice")
    other_cert, other_key = self_signed(tmp_path / "other", name="mallory")
    ca_dir = tmp_path / "ca"
    ca_dir.mkdir()
    subject_hash = subprocess.run([openssl, "x509", "-hash", "-noout", "-in", str(client_cert)],
                                  check=True, capture_output=True, text=True).stdout.strip()
    shutil.copy(client_cert, ca_dir / f"{subject_hash}.0")
    server_tls = f"<Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>"
    checked = transport("checked", server_tls + f"<VerifyClient>true</VerifyClient><CAPath>{ca_dir}"
                        "</CAPath>").replace("<Type>tcp</Type>", "<Type>tcps</Type>")
    opened = transport("open", server_tls).replace("<Type>tcp</Type>", "<Type>tcps</Type>")
    srv = serve(tmp_path, config("", checked + opened))
    checked_uri, open_uri = srv.uris
    assert checked_uri.startswith("tcps://") and open_uri.startswith("tcps://")
    try:
        AMPS.ssl_init()  # verification stays as the process has it; our server is trusted
        AMPS.ssl_load_verify_locations(str(cert), None)
        c = logged_on(with_user(open_uri, "alice"), "open")
        c.publish("x", "{}")
        c.publish_flush(5000)
        c.disconnect()
        refused = AMPS.Client("checked")
        with pytest.raises(AMPS.AMPSException):
            refused.connect(with_user(checked_uri, "alice"))
            refused.logon(5000)  # with TLS 1.3 the refusal comes after the client's handshake

        host, port = checked_uri.split("://")[1].split("/")[0].rsplit(":", 1)

        def logon(cert_key: tuple) -> bytes:
            ctx = ssl.create_default_context(cafile=str(cert))
            ctx.load_cert_chain(str(cert_key[0]), str(cert_key[1]))
            try:
                with socket.create_connection((host, int(port)), timeout=5) as raw:
                    with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                        data = json.dumps({"c": "logon", "cid": "1", "a": "processed"}).encode()
                        s.sendall(struct.pack(">I", len(data)) + data)
                        return s.recv(4096)
            except (ssl.SSLError, ConnectionError) as exc:
                return repr(exc).encode()

        assert b'"status":"success"' in logon((client_cert, client_key))
        assert b'"status"' not in logon((other_cert, other_key))
    finally:
        srv.stop()


def test_the_javascript_client_logs_on_over_websocket_or_is_refused(tmp_path):
    from tests.support.js_client import require_js_client, run_js

    require_js_client()
    ws = transport("ws").replace("<MessageType>json</MessageType>",
                                 "<MessageType>json</MessageType><Protocol>websocket</Protocol>")
    xml = web_config(tmp_path, {"alice": FILTERED}, sow=False).replace(
        transport("json-tcp"), ws)
    srv = serve(tmp_path, xml)
    try:
        assert srv.uri.startswith("ws://")
        r = run_js("logon_credentials", srv)
        assert r == {"refused": "failure: auth failure", "connected": True, "denied": "not entitled"}
    finally:
        srv.stop()


def admin_get(srv: ServerThread, path: str, cred: str | None = None,
              method: str = "GET") -> tuple[int, str, bytes]:
    """Status, WWW-Authenticate header and body of one Admin request."""
    import base64
    import urllib.error
    import urllib.request

    req = urllib.request.Request(srv.admin_uri + path, method=method,
                                 data=b"" if method == "POST" else None)
    if cred is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(cred.encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers.get("WWW-Authenticate", ""), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("WWW-Authenticate", ""), exc.read()


def test_admin_has_its_own_authentication_and_entitlement_and_challenge(tmp_path):
    perms = tmp_path / "ops"
    perms.mkdir()
    (perms / "ops.json").write_text(json.dumps(
        {"logon": True, "password": "root",
         "admin": [{"topic": "/amps/instance/clients.*", "read": False, "write": False},
                   {"topic": "/amps/.*", "read": True, "write": False}]}))
    web = ("<Modules><Module><Name>ops</Name><Library>libamps_http_entitlement.so</Library>"
           "<Options><ResourceURI>file:ops/{{USER_NAME}}.json</ResourceURI></Options></Module>"
           "</Modules>")
    simple = ("<Module><Name>simple</Name><Library>libamps_simple_access_entitlement.so</Library>"
              "<Options><DeniedTopics>^secret</DeniedTopics></Options></Module></Modules>")
    admin = ('<Admin><InetAddr>127.0.0.1:0</InetAddr><WWWAuthenticate>Basic realm="ops"'
             "</WWWAuthenticate><Authentication><Module>ops</Module></Authentication>"
             "<Entitlement><Module>ops</Module></Entitlement></Admin>")
    transport_blocks = ("<Authentication><Module>amps-default-authentication-module</Module>"
                        "<Options><AllowSpoofing>true</AllowSpoofing></Options></Authentication>"
                        "<Entitlement><Module>simple</Module></Entitlement>")
    srv = serve(tmp_path, config(web.replace("</Modules>", simple) + admin,
                                 transport("json-tcp", transport_blocks)))
    try:
        # the transport's modules: anyone logs on (no document needed), secret/ refused
        c = logged_on(with_user(srv.uri, "anyone", "x"), "anyone")
        with pytest.raises(AMPS.NotEntitledException):
            c.subscribe(lambda m: None, "secret/x")
        c.publish("secret/x", "{}")  # fire and forget: dropped, counted
        c.publish_flush(5000)
        # the Admin's own modules, with the configured challenge
        status, challenge, _ = admin_get(srv, "/amps/instance/processors.json")
        assert (status, challenge) == (401, 'Basic realm="ops"')
        assert admin_get(srv, "/amps/instance/processors.json", "anyone:x")[0] == 401
        assert admin_get(srv, "/amps/instance/processors.json", "ops:wrong")[0] == 401
        status, _, body = admin_get(srv, "/amps/instance/processors.json", "ops:root")
        assert status == 200
        procs = json.loads(body)["amps"]["instance"]["processors"]
        assert {p["id"]: (p["denied_reads"], p["denied_writes"]) for p in procs}["all"] == ("1", "1")
        assert admin_get(srv, "/amps/instance/clients.json", "ops:root")[0] == 403
        assert admin_get(srv, "/emulator/reset", "ops:root", "POST")[0] == 403
        # the Admin's refusals count too: one read (clients), one write (reset)
        status, _, body = admin_get(srv, "/amps/instance/processors.json", "ops:root")
        procs = json.loads(body)["amps"]["instance"]["processors"]
        assert {p["id"]: (p["denied_reads"], p["denied_writes"]) for p in procs}["all"] == ("2", "2")
        clients = srv.call(lambda: {conn.client_name: (conn.denied_reads, conn.denied_writes)
                                    for conn in srv.server.connections})
        assert clients["anyone"] == (1, 1)
    finally:
        srv.stop()


def test_a_bad_permission_document_refuses_the_logon_with_one_log_line(tmp_path, caplog):
    import logging

    srv = serve(tmp_path, web_config(tmp_path, {"alice": {"topic": [ALL]}}, sow=False))
    perms = tmp_path / "perms"
    (perms / "broken.json").write_text('{"logon": true, "topic": [')  # unparsable
    (perms / "typed.json").write_text(json.dumps({"logon": "yes", "topic": {"topic": 1}}))
    try:
        with caplog.at_level(logging.INFO):
            for user in ("broken", "typed"):
                caplog.clear()
                with pytest.raises(AMPS.AuthenticationException):
                    logged_on(with_user(srv.uri, user), user)
                lines = [r.getMessage() for r in caplog.records if user in r.getMessage()
                         and r.levelno >= logging.WARNING]
                assert len(lines) == 1, lines
        ok = logged_on(with_user(srv.uri, "alice"), "alice")  # the server serves on
        ok.publish("x", "{}")
        ok.publish_flush(5000)
    finally:
        srv.stop()


def test_sigusr1_and_sigusr2_switch_a_server_process(tmp_path):
    """The real signals, sent to the emulator as a process (B.6 14 with kill -USR1/-USR2)."""
    import signal

    from tests.support.procserver import ProcServer

    xml = simple_access("<DeniedTopics>^secret</DeniedTopics>")
    srv = ProcServer.with_config(tmp_path, lambda data: xml)
    try:
        assert srv.proc is not None
        c = logged_on(with_user(srv.uri, "alice"), "alice")
        with pytest.raises(AMPS.NotEntitledException):
            c.subscribe(lambda m: None, "secret/a")
        for sig, refused in ((signal.SIGUSR1, False), (signal.SIGUSR2, True),
                             (signal.SIGUSR1, False)):
            srv.proc.send_signal(sig)
            # the signal is handled on the server's loop, at some point after this: ask again
            # (each subscribe is a round trip), a bounded number of times
            for _ in range(200):
                try:
                    c.subscribe(lambda m: None, "secret/a")
                    got_refused = False
                except AMPS.NotEntitledException:
                    got_refused = True
                if got_refused == refused:
                    break
            assert got_refused == refused, sig
    finally:
        srv.stop()


def test_actions_switch_authentication():
    def action(topic: str, step: str) -> str:
        return ("<Action><On><Module>amps-action-on-publish-message</Module><Options>"
                f"<Topic>{topic}</Topic><MessageType>json</MessageType></Options></On><Do>"
                f"<Module>{step}</Module></Do></Action>")

    ok = "<Authentication><Module>amps-default-authentication-module</Module></Authentication>"
    xml = config(NO_AUTH + "<Actions>" + action("control/off", "amps-action-do-disable-authentication")
                 + action("control/on", "amps-action-do-enable-authentication") + "</Actions>",
                 transport("closed") + transport("open", ok))
    srv = ServerThread(loads_config(xml, "actions.xml")).start()
    try:
        closed, opened = srv.uris
        with pytest.raises(AMPS.AuthenticationException):
            logged_on(with_user(closed, "alice", "x"), "a1")
        control = logged_on(with_user(opened, "ops", "x"), "ops")
        control.publish("control/off", "{}")
        control.publish_flush(5000)
        control.flush(5000)
        logged_on(with_user(closed, "alice", "x"), "a2").disconnect()  # accepted while off
        control.publish("control/on", "{}")
        control.publish_flush(5000)
        control.flush(5000)
        with pytest.raises(AMPS.AuthenticationException):
            logged_on(with_user(closed, "alice", "x"), "a3")
    finally:
        srv.stop()


def test_reset_entitlement_action_rereads_one_users_document_and_disconnects_them(tmp_path):
    # amps-action-do-reset-entitlement with AuthenticationId: the user's cached document is
    # dropped and that user's connections are closed; the others stay connected
    reset = ("<Actions><Action><On><Module>amps-action-on-publish-message</Module><Options>"
             "<Topic>control/reset</Topic><MessageType>json</MessageType></Options></On><Do>"
             "<Module>amps-action-do-reset-entitlement</Module><Options>"
             "<AuthenticationId>{{AMPS_DATA}}</AuthenticationId></Options></Do></Action></Actions>")
    xml = web_config(tmp_path, {"alice": {"topic": [ALL]}, "bob": {"topic": [ALL]}}, sow=False)
    srv = serve(tmp_path, xml.replace("</AMPSConfig>", reset + "</AMPSConfig>"))
    try:
        import threading

        alice = logged_on(with_user(srv.uri, "alice"), "alice")
        gone = threading.Event()
        alice.set_disconnect_handler(lambda client: gone.set())
        alice.subscribe(lambda m: None, "orders")
        (tmp_path / "perms" / "alice.json").write_text(json.dumps(
            {"logon": True, "topic": [{"topic": "orders", "read": False, "write": False}]}))
        bob = logged_on(with_user(srv.uri, "bob"), "bob")
        got = []
        bob.subscribe(lambda m: got.append(m.get_data()), "orders")
        bob.publish("control/reset", "alice")
        assert gone.wait(10), "alice was not disconnected by the reset"
        again = logged_on(with_user(srv.uri, "alice"), "alice2")
        with pytest.raises(AMPS.NotEntitledException):
            again.subscribe(lambda m: None, "orders")  # the document was read again
        bob.publish("orders", '{"n":1}')  # bob's connection and subscription go on
        bob.publish_flush(5000)
        bob.flush(5000)
        assert got == ['{"n":1}']
    finally:
        srv.stop()
