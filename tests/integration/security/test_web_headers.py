"""The web-entitlements module's ``HTTPHeader`` tokens, through the official Python client: the
permission request of a logon carries the logon's correlation id, client name, message type,
user, connection name and remote address where the config's headers name them (Configuration
Reference, web-entitlements options), and a correlation id cannot add a header line."""

from __future__ import annotations

import base64
import http.server
import json
import threading

import AMPS
import pytest

from amps_emulator.config import loads_config
from tests.support.entitlements import with_user
from tests.support.raw import RawClient
from tests.support.servers import ServerThread

DOC = json.dumps({"logon": True, "topic": [{"topic": ".*", "read": True, "write": True}]}).encode()


class Recorder:
    """An HTTP server answering every GET with a permission document; it keeps the headers."""

    def __init__(self) -> None:
        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(dict(self.headers))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(DOC)))
                self.end_headers()
                self.wfile.write(DOC)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


HEADERS = {
    "x-tracking-id": "{{CORRELATION_ID}}", "x-corr": "{{AMPS_CORRELATION_ID}}",
    "x-client": "{{AMPS_CLIENT_NAME}}", "x-type": "{{AMPS_MESSAGE_TYPE}}",
    "x-user": "{{AMPS_USER_NAME}}", "x-legacy-user": "{{USER_NAME}}",
    "x-conn": "{{AMPS_CONNECTION_NAME}}", "x-from": "{{AMPS_REMOTE_ADDRESS}}",
    "x-token": "Bearer {{AMPS_PASSWORD}}", "x-origin": "AMPS",
}


@pytest.fixture
def setup():
    perms = Recorder()
    headers = "".join(f"<HTTPHeader>{k}: {v}</HTTPHeader>" for k, v in HEADERS.items())
    xml = f"""<AMPSConfig><Name>hdr</Name>
<Modules><Module><Name>web</Name><Library>libamps_http_entitlement.so</Library><Options>
  <ResourceURI>http://127.0.0.1:{perms.port}/{{{{USER_NAME}}}}.json</ResourceURI>{headers}
</Options></Module></Modules>
<Authentication><Module>web</Module></Authentication>
<Entitlement><Module>web</Module></Entitlement>
<Transports><Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
  <MessageType>json</MessageType><Protocol>amps</Protocol></Transport></Transports>
</AMPSConfig>"""
    srv = ServerThread(loads_config(xml, "hdr.xml")).start()
    yield srv, perms
    srv.stop()
    perms.close()


def _logon(srv, user: str, name: str, correlation: str) -> AMPS.Client:
    c = AMPS.Client(name)
    c.set_logon_correlation_data(correlation)
    c.connect(with_user(srv.uri, user, "s3cret"))
    c.logon(5000)
    return c


def test_http_headers_carry_the_logons_tokens(setup):
    srv, perms = setup
    c = _logon(srv, "falken", "falken-app", "corr-42")
    try:
        h = perms.seen[-1]
        assert h["x-tracking-id"] == "corr-42" and h["x-corr"] == "corr-42"
        assert (h["x-client"], h["x-type"]) == ("falken-app", "json")
        assert h["x-user"] == h["x-legacy-user"] == "falken"
        assert h["x-conn"].startswith("hdr-json-tcp-")
        host, _, port = h["x-from"].rpartition(":")
        assert host == "127.0.0.1" and port.isdigit()
        assert h["x-token"] == "Bearer s3cret" and h["x-origin"] == "AMPS"
        assert h["Authorization"] == "Basic " + base64.b64encode(b"falken:s3cret").decode()
    finally:
        c.close()


def test_a_correlation_id_cannot_add_a_header(setup):
    srv, perms = setup
    # (the official client does not escape a correlation id: a raw peer sends it JSON-escaped)
    raw = RawClient(srv.port)
    try:
        raw.send({"c": "logon", "cid": "1", "client_name": "mallory-app", "user_id": "mallory",
                  "pw": "s3cret", "a": "processed", "mt": "json",
                  "correlation_id": "x\r\nX-Injected: yes"})
        header, _ = raw.recv_frame()
        assert header.get("status") == "success"
        h = perms.seen[-1]
        assert h["x-tracking-id"] == "xX-Injected: yes"
        assert "X-Injected" not in h
    finally:
        raw.close()
