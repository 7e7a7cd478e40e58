"""Authentication and entitlements (issue 22; docs/design/beyond-json.md B.4, B.6), through the official
Python client. Permission documents come from ``file:`` ResourceURIs (the emulator's extension)
or from an in-process HTTP server thread (the corpus's web-entitlements config)."""

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
from tests.support.paths import FIXTURES
from tests.support.servers import ServerThread

AMPS = pytest.importorskip("AMPS")


def test_no_authentication_module_refuses_the_logon_and_closes(tmp_path):  # B.6 1
    srv = serve(tmp_path, config(NO_AUTH))
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
    srv = serve(tmp_path, config(NO_AUTH, transport("closed") + transport("open", ok)))
    try:
        closed, opened = srv.uris
        with pytest.raises(AMPS.AuthenticationException):
            logged_on(with_user(closed, "alice", "x"), "a").disconnect()
        c = logged_on(with_user(opened, "alice", "x"), "b")
        c.disconnect()
    finally:
        srv.stop()


def test_read_filter_and_refused_publish(tmp_path):  # B.6 5, 6
    srv = serve(tmp_path, web_config(tmp_path, {"alice": FILTERED, "admin": {
        "logon": True, "password": "root", "topic": [{"topic": ".*", "read": True, "write": True}]}}))
    try:
        with pytest.raises(AMPS.AuthenticationException):
            logged_on(with_user(srv.uri, "alice", "wrong"), "bad")
        pub = logged_on(with_user(srv.uri, "admin", "root"), "pub")
        alice = logged_on(with_user(srv.uri, "alice", "pw"), "alice")
        with pytest.raises(AMPS.NotEntitledException):
            alice.subscribe(lambda m: None, "secret")
        live = []
        alice.subscribe(lambda m: live.append(json.loads(m.get_data())), "test")
        for i, prio in enumerate((1, 2, 1)):
            pub.publish("test", json.dumps({"id": i, "priority": prio}))
        pub.publish_flush(5000)
        alice.flush(5000)
        got_sow = [json.loads(m.get_data()) for m in alice.sow("test") if m.get_command() == "sow"]
        assert sorted(d["id"] for d in got_sow) == [0, 2]
        assert [d["id"] for d in live] == [0, 2]
        with pytest.raises(AMPS.NotEntitledException):
            alice.execute(AMPS.Command("publish").set_topic("test").set_data('{"id":9}')
                          .add_ack_type("processed"))
        failed = []
        store = AMPS.Client("alice-store")
        store.set_publish_store(AMPS.MemoryPublishStore())
        store.set_failed_write_handler(lambda m, reason: failed.append(reason))
        store.connect(with_user(srv.uri, "alice", "pw"))
        store.logon(5000)
        store.publish("test", '{"id":10,"priority":1}')
        store.publish_flush(5000)
        assert failed == ["not entitled"]
        assert [d["id"] for d in (json.loads(m.get_data()) for m in pub.sow("test")
                                  if m.get_command() == "sow")] == [0, 1, 2]
        for c in (pub, alice, store):
            c.disconnect()
    finally:
        srv.stop()


def test_oof_entitlement_when_an_update_leaves_the_read_filter(tmp_path):  # B.6 7
    srv = serve(tmp_path, web_config(tmp_path, {"alice": FILTERED, "admin": {"topic": [ALL]}}))
    try:
        pub = logged_on(with_user(srv.uri, "admin"), "pub")
        alice = logged_on(with_user(srv.uri, "alice", "pw"), "alice")
        pub.publish("test", '{"id":1,"priority":1}')
        pub.publish_flush(5000)
        got = []
        alice.execute_async(AMPS.Command("sow_and_subscribe").set_topic("test").set_options("oof"),
                            lambda m: got.append((m.get_command(), m.get_reason(), m.get_data())))
        alice.flush(5000)
        pub.publish("test", '{"id":1,"priority":2}')
        pub.publish_flush(5000)
        alice.flush(5000)
        oofs = [(r, json.loads(d)) for c, r, d in got if c == "oof"]
        assert oofs == [("entitlement", {"id": 1, "priority": 1})]
    finally:
        srv.stop()


def test_write_filter_on_publish_delta_and_sow_delete(tmp_path):  # B.6 8, 9
    owner = {"topic": [{"topic": "test", "read": True, "write": "/owner = 'alice'"}]}
    srv = serve(tmp_path, web_config(tmp_path, {"alice": owner, "admin": {"topic": [ALL]}}))
    try:
        alice = logged_on(with_user(srv.uri, "alice"), "alice")
        pub = logged_on(with_user(srv.uri, "admin"), "pub")

        def publish(command: str, data: str) -> None:
            alice.execute(AMPS.Command(command).set_topic("test").set_data(data)
                          .add_ack_type("processed"))

        with pytest.raises(AMPS.NotEntitledException):
            publish("publish", '{"id":1,"owner":"bob"}')
        publish("publish", '{"id":1,"owner":"alice"}')
        with pytest.raises(AMPS.NotEntitledException):
            publish("delta_publish", '{"id":1,"x":5}')  # the merged record would match
        for i, who in ((2, "bob"), (3, "bob"), (4, "alice")):
            pub.publish("test", json.dumps({"id": i, "owner": who}))
        pub.publish_flush(5000)
        alice.sow_delete("test", "1=1")  # deletes only the records alice may write
        left = sorted(json.loads(m.get_data())["id"] for m in pub.sow("test") if m.get_command() == "sow")
        assert left == [2, 3]  # 1 and 4 were alice's
    finally:
        srv.stop()


def test_regex_subscription_skips_unentitled_topics_and_select(tmp_path):  # B.6 10, 11
    doc = {"topic": [{"topic": "orders/a", "read": True, "write": False, "select": "-/,+/id"},
                     {"topic": "orders/b", "read": False, "write": False}]}
    srv = serve(tmp_path, web_config(tmp_path, {"alice": doc, "admin": {"topic": [ALL]}}, sow=False))
    try:
        alice = logged_on(with_user(srv.uri, "alice"), "alice")
        pub = logged_on(with_user(srv.uri, "admin"), "pub")
        got = []
        alice.subscribe(lambda m: got.append((m.get_topic(), json.loads(m.get_data()))), "orders/.*")
        lit = []
        alice.subscribe(lambda m: lit.append(json.loads(m.get_data())), "orders/a")
        pub.publish("orders/b", '{"id":1,"secret":"x"}')
        pub.publish("orders/a", '{"id":2,"secret":"x"}')
        pub.publish_flush(5000)
        alice.flush(5000)
        assert lit == [{"id": 2}]
        assert [t for t, _ in got] == ["orders/a"]
        with pytest.raises(AMPS.NotEntitledException):
            alice.subscribe(lambda m: None, "orders/b")
    finally:
        srv.stop()


def test_name_takeover_only_by_the_same_user(tmp_path):  # B.6 12
    srv = serve(tmp_path, web_config(tmp_path, {"alice": {"topic": [ALL]}, "bob": {"topic": [ALL]}},
                                     sow=False))
    try:
        first = logged_on(with_user(srv.uri, "alice"), "same")
        with pytest.raises(AMPS.NameInUseException):
            logged_on(with_user(srv.uri, "bob"), "same")
        again = logged_on(with_user(srv.uri, "alice"), "same")
        again.publish("x", "{}")
        again.publish_flush(5000)
        with pytest.raises(AMPS.AMPSException):
            first.publish_flush(2000)  # the first connection was dropped
    finally:
        srv.stop()


def test_simple_access_denied_topics_and_read_only(tmp_path):  # B.6 13
    srv = serve(tmp_path, simple_access("<DeniedTopics>^secret</DeniedTopics>"))
    try:
        c = logged_on(with_user(srv.uri, "anyone"), "c")
        with pytest.raises(AMPS.NotEntitledException):
            c.subscribe(lambda m: None, "secret/x")
        c.subscribe(lambda m: None, "public/x")
    finally:
        srv.stop()
    srv = serve(tmp_path, simple_access("<GrantedPermissions>read</GrantedPermissions>"))
    try:
        c = logged_on(with_user(srv.uri, "anyone"), "c")
        c.subscribe(lambda m: None, "public/x")
        with pytest.raises(AMPS.NotEntitledException):
            c.execute(AMPS.Command("publish").set_topic("public/x").set_data("{}")
                      .add_ack_type("processed"))
    finally:
        srv.stop()


def raw_exchange(uri: str, *commands: dict) -> bytes:
    """Send ``commands`` on a raw socket (no logon) and read until the server closes or 2 s
    pass without data."""
    host, port = uri.split("://")[1].split("/")[0].rsplit(":", 1)
    raw = socket.create_connection((host, int(port)))
    for c in commands:
        data = json.dumps(c).encode()
        raw.sendall(struct.pack(">I", len(data)) + data)
    raw.settimeout(2)
    got = b""
    try:
        while True:
            chunk = raw.recv(4096)
            if not chunk:
                break
            got += chunk
    except TimeoutError:
        got += b"<open>"
    raw.close()
    return got


def test_subscribe_before_logon(tmp_path):  # B.6 3
    default = "<Authentication><Module>amps-default-authentication-module</Module></Authentication>"
    implicit = "<Authentication><Module>amps-implicit-authentication-module</Module></Authentication>"
    sub = {"c": "subscribe", "cid": "1", "t": "x", "a": "processed"}
    srv = serve(tmp_path, config("", transport("default", default) + transport("implicit", implicit)))
    try:
        refused = raw_exchange(srv.uris[0], sub)
        assert b"logon required" in refused and not refused.endswith(b"<open>")
        served = raw_exchange(srv.uris[1], sub)
        assert b'"status":"success"' in served and served.endswith(b"<open>")
    finally:
        srv.stop()


def test_switches_and_require_username(tmp_path):  # B.6 14
    auth = ("<Authentication><Module>amps-default-authentication-module</Module><Options>"
            "<RequireUsername>true</RequireUsername><AllowSpoofing>true</AllowSpoofing></Options>"
            "</Authentication>")
    srv = serve(tmp_path, config(
        auth + "<Modules><Module><Name>simple</Name><Library>libamps_simple_access_entitlement.so"
        "</Library></Module></Modules><Entitlement><Module>simple</Module><Options>"
        "<DeniedTopics>^secret</DeniedTopics></Options></Entitlement>"))
    try:
        with pytest.raises(AMPS.AuthenticationException):
            logged_on(srv.uri, "nobody")  # no user name
        c = logged_on(with_user(srv.uri, "alice"), "alice")
        with pytest.raises(AMPS.NotEntitledException):
            c.subscribe(lambda m: None, "secret/a")
        srv.call(lambda: srv.server.switch_security(False))  # what SIGUSR1 does
        got = []
        c.subscribe(lambda m: got.append(m.get_data()), "secret/a")
        srv.call(lambda: srv.server.switch_security(True))  # SIGUSR2
        with pytest.raises(AMPS.NotEntitledException):
            c.subscribe(lambda m: None, "secret/b")
        c.publish("secret/a", '{"n":1}')  # publishing is refused again, fire and forget
        other = logged_on(with_user(srv.uri, "root"), "root")
        srv.call(lambda: srv.server.switch_security(False))
        other.publish("secret/a", '{"n":2}')
        other.publish_flush(5000)
        c.flush(5000)
        assert got == ['{"n":2}']  # the subscription made while disabled continues
        clients = srv.call(lambda: {conn.client_name: (conn.denied_reads, conn.denied_writes)
                                    for conn in srv.server.connections})
        assert clients["alice"] == (2, 1)
        assert srv.server.broker.denied == {"reads": 2, "writes": 1}
    finally:
        srv.stop()


ADMIN_ALL = [{"topic": ".*", "read": True, "write": True}]


def test_file_documents_are_read_again_after_reset(tmp_path):
    # Admin has no block of its own: it uses the instance's (the amps-admin transport's
    # resolution), so the reset is made by a user whose document grants admin writes
    xml = web_config(tmp_path, {"alice": {"topic": [ALL]},
                                "ops": {"password": "root", "admin": ADMIN_ALL}},
                     sow=False).replace(
        "</AMPSConfig>", "<Admin><InetAddr>127.0.0.1:0</InetAddr></Admin></AMPSConfig>")
    srv = serve(tmp_path, xml)
    try:
        c = logged_on(with_user(srv.uri, "alice"), "alice")
        c.subscribe(lambda m: None, "orders")
        c.disconnect()
        (tmp_path / "perms" / "alice.json").write_text(json.dumps(
            {"logon": True, "topic": [{"topic": "orders", "read": False, "write": False}]}))
        assert admin_status(srv, "/emulator/reset", "ops:root", "POST") == 200
        c = logged_on(with_user(srv.uri, "alice"), "alice2")
        with pytest.raises(AMPS.NotEntitledException):
            c.subscribe(lambda m: None, "orders")
        procs = admin_json(srv, "/amps/instance/processors.json", "ops:root")
        procs = procs["amps"]["instance"]["processors"]
        assert {p["id"]: p["denied_reads"] for p in procs}["all"] == "1"
    finally:
        srv.stop()


def test_admin_without_its_own_blocks_uses_the_instance_modules(tmp_path):
    # User Guide, Securing AMPS: the Admin interface is the special amps-admin transport; with
    # no module of its own it uses the instance's. alice may log on but has no admin entry.
    xml = web_config(tmp_path, {"alice": {"topic": [ALL]},
                                "ops": {"password": "root",
                                        "admin": [{"topic": "/amps/.*", "read": True,
                                                   "write": False}]}},
                     sow=False).replace(
        "</AMPSConfig>", "<Admin><InetAddr>127.0.0.1:0</InetAddr></Admin></AMPSConfig>")
    srv = serve(tmp_path, xml)
    try:
        assert admin_status(srv, "/amps/instance/processors.json") == 401
        assert admin_status(srv, "/amps/instance/processors.json", "ops:wrong") == 401
        assert admin_status(srv, "/amps/instance/processors.json", "alice:any") == 403
        assert admin_status(srv, "/amps/instance/processors.json", "ops:root") == 200
        assert admin_status(srv, "/emulator/reset", "ops:root", "POST") == 403
    finally:
        srv.stop()


def test_admin_without_any_block_asks_nothing(tmp_path):
    # no Authentication/Entitlement anywhere: the default modules accept anyone
    srv = serve(tmp_path, config("<Admin><InetAddr>127.0.0.1:0</InetAddr></Admin>"))
    try:
        assert admin_status(srv, "/amps/instance/processors.json") == 200
        assert admin_status(srv, "/emulator/reset", None, "POST") == 200
    finally:
        srv.stop()


def admin_json(srv: ServerThread, path: str, cred: str) -> dict:
    import base64
    import urllib.request

    req = urllib.request.Request(srv.admin_uri + path)
    req.add_header("Authorization", "Basic " + base64.b64encode(cred.encode()).decode())
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


class PermissionServer:
    """An HTTP server thread answering ``/<user>.json`` with a permission document for
    falken:joshua (Basic authentication), 401 otherwise; it records the headers it saw."""

    DOC = {"logon": True, "replication-logon": True,
           "admin": [{"topic": "/amps/.*", "read": True, "write": False}],
           "topic": [{"topic": "orders", "read": "/qty > 10", "write": True},
                     {"topic": "private/.*", "read": False, "write": False},
                     {"topic": ".*", "read": True, "write": True}]}

    def __init__(self) -> None:
        import base64
        import http.server
        import threading

        seen = self.seen = []
        good = "Basic " + base64.b64encode(b"falken:joshua").decode()
        doc = json.dumps(self.DOC).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append((self.path, dict(self.headers)))
                if self.headers.get("Authorization") != good or self.path != "/falken.json":
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="AMPS Authentication"')
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(doc)))
                self.end_headers()
                self.wfile.write(doc)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def admin_status(srv: ServerThread, path: str, cred: str | None = None, method: str = "GET") -> int:
    import base64
    import urllib.error
    import urllib.request

    req = urllib.request.Request(srv.admin_uri + path, method=method,
                                 data=b"" if method == "POST" else None)
    if cred is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(cred.encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            assert exc.headers.get("WWW-Authenticate", "").startswith("Basic")
        return exc.code


def test_the_corpus_web_entitlements_config_against_an_http_server():  # B.6 4
    fixture = FIXTURES / "configs" / "ok-web-entitlements.xml"
    perms = PermissionServer()
    text = (fixture.read_text().replace("localhost:8080", f"127.0.0.1:{perms.port}")
            .replace("<InetAddr>9007<", "<InetAddr>127.0.0.1:0<")
            .replace("localhost:8085", "127.0.0.1:0"))
    srv = ServerThread(loads_config(text, str(fixture))).start()
    try:
        with pytest.raises(AMPS.AuthenticationException):
            logged_on(with_user(srv.uri, "falken", "tictactoe"), "wrong")
        with pytest.raises(AMPS.AuthenticationException):
            logged_on(with_user(srv.uri, "mallory", "joshua"), "other")
        c = logged_on(with_user(srv.uri, "falken", "joshua"), "falken")
        assert perms.seen[-1][1].get("x-origin") == "AMPS"
        got = []
        c.subscribe(lambda m: got.append(json.loads(m.get_data())["qty"]), "orders")
        with pytest.raises(AMPS.NotEntitledException):
            c.subscribe(lambda m: None, "private/x")
        for qty in (5, 50):
            c.publish("orders", json.dumps({"qty": qty}))
        c.publish_flush(5000)
        c.flush(5000)
        assert got == [50]
        c.disconnect()
        # the Admin interface logs on through its own blocks (the same module here)
        assert admin_status(srv, "/amps/instance/processors.json") == 401
        assert admin_status(srv, "/amps/instance/processors.json", "falken:tictactoe") == 401
        assert admin_status(srv, "/amps/instance/processors.json", "falken:joshua") == 200
        assert admin_status(srv, "/emulator/reset", "falken:joshua", "POST") == 403  # read only
        perms.close()  # the HTTP server is down: the logon fails (connection refused)
        with pytest.raises(AMPS.AuthenticationException):
            logged_on(with_user(srv.uri, "falken", "joshua"), "down")
    finally:
        srv.stop()
        perms.close()


def test_queues_read_is_consume_and_ack_write_is_publish(tmp_path):
    doc = {"topic": [{"topic": "work", "read": True, "write": False}]}
    xml = web_config(tmp_path, {"worker": doc, "admin": {"topic": [ALL]}}, sow=False).replace(
        "</AMPSConfig>",
        f"<TransactionLog><JournalDirectory>{tmp_path}/journal</JournalDirectory><Topic><Name>work</Name>"
        "<MessageType>json</MessageType></Topic></TransactionLog>"
        "<SOW><Queue><Name>work</Name><MessageType>json</MessageType></Queue></SOW></AMPSConfig>")
    srv = serve(tmp_path, xml)
    try:
        pub = logged_on(with_user(srv.uri, "admin"), "pub")
        worker = logged_on(with_user(srv.uri, "worker"), "worker")
        with pytest.raises(AMPS.NotEntitledException):
            worker.execute(AMPS.Command("publish").set_topic("work").set_data('{"n":0}')
                           .add_ack_type("processed"))
        pub.publish("work", '{"n":1}')
        pub.publish_flush(5000)
        got = []
        for m in worker.execute(AMPS.Command("subscribe").set_topic("work")):
            got.append(json.loads(m.get_data()))
            m.ack()
            break
        assert got == [{"n": 1}]
        worker.flush(5000)
    finally:
        srv.stop()


def test_a_regex_sow_query_reads_only_entitled_topics_through_their_filters(tmp_path):
    doc = {"topic": [{"topic": "orders/a", "read": "/qty > 10", "write": False},
                     {"topic": "orders/b", "read": False, "write": False}]}
    topics = "".join(f"<Topic><Name>orders/{t}</Name><MessageType>json</MessageType><Key>/id</Key>"
                     "<Durability>transient</Durability></Topic>" for t in "abc")
    xml = web_config(tmp_path, {"alice": doc, "admin": {"topic": [ALL]}}, sow=False).replace(
        "</AMPSConfig>", f"<SOW>{topics}</SOW></AMPSConfig>")
    srv = serve(tmp_path, xml)
    try:
        pub = logged_on(with_user(srv.uri, "admin"), "pub")
        for t in "abc":
            for i, qty in enumerate((5, 50)):
                pub.publish(f"orders/{t}", json.dumps({"id": i, "qty": qty}))
        pub.publish_flush(5000)
        alice = logged_on(with_user(srv.uri, "alice"), "alice")
        got = [(m.get_topic(), json.loads(m.get_data())["qty"])
               for m in alice.sow("orders/.*") if m.get_command() == "sow"]
        assert got == [("orders/a", 50)]  # b refused, c not in the document: skipped
        with pytest.raises(AMPS.NotEntitledException):
            alice.sow("orders/b")
    finally:
        srv.stop()


def test_entitlement_timeout_disconnects_a_user_whose_document_changed(tmp_path):
    import threading

    xml = web_config(tmp_path, {"alice": {"topic": [ALL]}, "bob": {"topic": [ALL]}}, sow=False)
    xml = xml.replace("</ResourceURI></Options>",
                      "</ResourceURI><EntitlementTimeout>200ms</EntitlementTimeout></Options>")
    srv = serve(tmp_path, xml)
    try:
        gone = threading.Event()
        alice = AMPS.Client("alice")
        alice.set_disconnect_handler(lambda client: gone.set())
        alice.connect(with_user(srv.uri, "alice"))
        alice.logon(5000)
        bob = logged_on(with_user(srv.uri, "bob"), "bob")
        (tmp_path / "perms" / "alice.json").write_text(json.dumps({"logon": True, "topic": []}))
        assert gone.wait(10)
        bob.publish("x", "{}")
        bob.publish_flush(5000)  # bob's document did not change: still connected
    finally:
        srv.stop()


def test_actions_switch_entitlement():
    def action(topic: str, step: str) -> str:
        return ("<Action><On><Module>amps-action-on-publish-message</Module><Options>"
                f"<Topic>{topic}</Topic><MessageType>json</MessageType></Options></On><Do><Module>{step}</Module></Do></Action>")

    xml = simple_access("<DeniedTopics>^secret</DeniedTopics>").replace(
        "</AMPSConfig>", "<Actions>" + action("control/off", "amps-action-do-disable-entitlement")
        + action("control/on", "amps-action-do-enable-entitlement") + "</Actions></AMPSConfig>")
    srv = ServerThread(loads_config(xml, "actions.xml")).start()
    try:
        c = logged_on(with_user(srv.uri, "alice"), "alice")
        with pytest.raises(AMPS.NotEntitledException):
            c.subscribe(lambda m: None, "secret/a")
        c.publish("control/off", "{}")
        c.subscribe(lambda m: None, "secret/a")
        c.publish("control/on", "{}")
        with pytest.raises(AMPS.NotEntitledException):
            c.subscribe(lambda m: None, "secret/b")
    finally:
        srv.stop()


def test_client_certificates_accepted_and_refused(tmp_path):
    import ssl

    from tests.support.tls import self_signed

    cert, key = self_signed(tmp_path / "server")
    client_cert, client_key = self_signed(tmp_path / "client", name="alice")
    other_cert, other_key = self_signed(tmp_path / "other", name="mallory")
    tls = (f"<Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>"
           f"<VerifyClient>true</VerifyClient><CAFile>{client_cert}</CAFile>")
    tcps = transport("tls", tls).replace("<Type>tcp</Type>", "<Type>tcps</Type>")
    srv = serve(tmp_path, config("", tcps))
    host, port = srv.uri.split("://")[1].split("/")[0].rsplit(":", 1)

    def logon(cert_key: tuple | None) -> bytes:
        ctx = ssl.create_default_context(cafile=str(cert))
        if cert_key is not None:
            ctx.load_cert_chain(str(cert_key[0]), str(cert_key[1]))
        try:  # with TLS 1.3 the server's refusal arrives after the client's handshake
            with socket.create_connection((host, int(port)), timeout=5) as raw:
                with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                    data = json.dumps({"c": "logon", "cid": "1", "a": "processed"}).encode()
                    s.sendall(struct.pack(">I", len(data)) + data)
                    return s.recv(4096)
        except (ssl.SSLError, ConnectionError) as exc:
            return repr(exc).encode()

    try:
        assert b'"status":"success"' in logon((client_cert, client_key))
        # no certificate, or one the CAFile does not vouch for: the handshake fails, no ack
        assert b'"status"' not in logon(None)
        assert b'"status"' not in logon((other_cert, other_key))
    finally:
        srv.stop()
