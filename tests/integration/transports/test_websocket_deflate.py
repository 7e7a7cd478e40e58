"""``PerMessageDeflate`` on a websocket transport (RFC 7692): negotiated with a client that
offers it unless the transport says ``disabled``, seen from the ``websockets`` package's
client (its ``connect`` offers the extension, as browsers do) and from the official
JavaScript client on a WebSocket that offers it (``tests/js/deflate_shim.js``); the inflated
size of a client's message counts against ``MaxFrameSize`` (``MaxFrameSizeBeforeLogon``
before the logon), so a small compressed frame cannot make the server hold a large message."""

from __future__ import annotations

import json
import socket

import pytest
from websockets.client import ClientProtocol
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory, PerMessageDeflate
from websockets.frames import CloseCode
from websockets.http11 import Response
from websockets.sync.client import connect
from websockets.uri import parse_uri

from tests.support.js_client import require_js_client, run_js
from tests.support.paths import JS_DIR
from tests.support.servers import start_server

CONFIG = """<AMPSConfig>
  <Name>ws-deflate</Name>
  <Transports>
    <Transport><Name>deflate</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <MessageType>json</MessageType><Protocol>websocket</Protocol>
      <MaxFrameSize>64KB</MaxFrameSize></Transport>
    <Transport><Name>guarded</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <MessageType>json</MessageType><Protocol>websocket</Protocol>
      <MaxFrameSize>1MB</MaxFrameSize><MaxFrameSizeBeforeLogon>16KB</MaxFrameSizeBeforeLogon></Transport>
    <Transport><Name>plain</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <MessageType>json</MessageType><Protocol>websocket</Protocol>
      <PerMessageDeflate>disabled</PerMessageDeflate></Transport>
  </Transports>
  <SOW>
    <Topic><Name>ws-sow</Name><MessageType>json</MessageType><Key>/id</Key>
      <Durability>transient</Durability></Topic>
  </SOW>
</AMPSConfig>"""


@pytest.fixture(scope="module")
def srv():
    s = start_server(CONFIG, "ws-deflate.xml")
    yield s
    s.stop()


def uri(srv, name: str) -> str:
    (port,) = [ls.port for ls in srv.server.listeners if ls.name == name]
    return f"ws://127.0.0.1:{port}/amps/json"


def command(ws, header: dict, body: bytes = b"") -> None:
    """One AMPS command in the WebSocket framing: a part count, the header, the body."""
    parts = [json.dumps(header).encode(), *([body] if body else [])]
    ws.send(len(parts).to_bytes(4, "little"))
    ws.send(parts[0].decode())
    for p in parts[1:]:
        ws.send(p.decode())


def test_the_websockets_client_gets_permessage_deflate_unless_disabled(srv):
    with connect(uri(srv, "deflate")) as ws:  # offers permessage-deflate (its default)
        assert "permessage-deflate" in ws.response.headers.get("Sec-WebSocket-Extensions", "")
        assert [type(e) for e in ws.protocol.extensions] == [PerMessageDeflate]
        ws.send("text")
        command(ws, {"c": "logon", "cid": "l", "client_name": "deflate-py", "a": "processed"})
        assert json.loads(ws.recv(timeout=10))["status"] == "success"
        note = "compressible " * 400  # a 5 KB body, well compressed
        command(ws, {"c": "publish", "t": "ws-sow"}, json.dumps({"id": 1, "note": note}).encode())
        command(ws, {"c": "sow", "cid": "q", "t": "ws-sow", "a": "processed"})
        got = []
        while not any(m.startswith('{"c":"group_end"') for m in got):
            got.append(ws.recv(timeout=10))
        assert json.dumps({"id": 1, "note": note}) in got
    with connect(uri(srv, "plain")) as ws:  # PerMessageDeflate disabled: offered, not negotiated
        assert "Sec-WebSocket-Extensions" not in ws.response.headers
        assert ws.protocol.extensions == []
        ws.send("text")
        command(ws, {"c": "logon", "cid": "l", "client_name": "plain-py", "a": "processed"})
        assert json.loads(ws.recv(timeout=10))["status"] == "success"


class RawDeflatePeer:
    """The websockets client protocol on a plain socket offering permessage-deflate, counting
    the bytes it puts on the wire."""

    def __init__(self, url: str) -> None:
        wsuri = parse_uri(url)
        self.sock = socket.create_connection((wsuri.host, wsuri.port), timeout=10)
        self.ws = ClientProtocol(wsuri, extensions=[ClientPerMessageDeflateFactory()], max_size=None)
        self.sent = 0
        self.ws.send_request(self.ws.connect())
        self.flush()
        ev = self.next_event()
        assert isinstance(ev, Response) and ev.status_code == 101, ev
        assert [type(e) for e in self.ws.extensions] == [PerMessageDeflate]

    def flush(self) -> None:
        data = b"".join(self.ws.data_to_send())
        self.sent += len(data)
        if data:
            try:
                self.sock.sendall(data)
            except OSError:
                pass

    def next_event(self):
        while True:
            for ev in self.ws.events_received():
                return ev
            data = self.sock.recv(65536)
            self.ws.receive_data(data) if data else self.ws.receive_eof()
            if not data:
                return None

    def close_code(self) -> int | None:
        """The code of the server's close frame (None: it closed without one)."""
        while self.next_event() is not None:
            pass
        return None if self.ws.close_rcvd is None else self.ws.close_rcvd.code


@pytest.mark.parametrize("fragments", [1, 4], ids=["one-frame", "fragmented"])
def test_a_message_inflating_past_max_frame_size_closes_the_connection(srv, fragments):
    """128 KiB of zeros is a few hundred bytes deflated: the server counts the inflated size
    against the transport's 64 KB MaxFrameSize and closes with 1009 (message too big)."""
    peer = RawDeflatePeer(uri(srv, "deflate"))
    peer.ws.send_text(b"text")
    peer.flush()
    chunk = bytes(128 * 1024 // fragments)
    for i in range(fragments):
        last = i == fragments - 1
        if i == 0:
            peer.ws.send_binary(chunk, fin=last)
        else:
            peer.ws.send_continuation(chunk, fin=last)
        peer.flush()
    assert peer.sent < 4096  # what the client wrote: far less than the limit
    assert peer.close_code() == CloseCode.MESSAGE_TOO_BIG
    peer.sock.close()
    with connect(uri(srv, "deflate")) as ws:  # the server serves the next client as before
        ws.send("text")
        command(ws, {"c": "logon", "cid": "l", "client_name": "after-bomb", "a": "processed"})
        assert json.loads(ws.recv(timeout=10))["status"] == "success"


def test_the_javascript_client_over_a_deflated_websocket(srv, tmp_path):
    """The official client's own code, on a WebSocket that offers permessage-deflate as a
    browser does: the server negotiates it, and publish, filter, flush and sow work."""
    require_js_client()
    report = tmp_path / "extensions.txt"
    env = {"NODE_OPTIONS": f"--require {JS_DIR / 'deflate_shim.js'}", "DEFLATE_SHIM_REPORT": str(report)}
    r = run_js("pubsub_filter", srv, env=env, uri=uri(srv, "deflate"))
    assert r["got"] == [{"topic": "ws-orders", "data": {"qty": 20}},
                        {"topic": "ws-orders", "data": {"qty": 11}}]
    r = run_js("flush_then_sow", srv, env=env, uri=uri(srv, "deflate"))
    assert r == {"groups": 1, "count": 20, "ids": list(range(5, 25)), "keyed": True}
    negotiated = report.read_text().splitlines()
    assert len(negotiated) == 3 and all(n.startswith("permessage-deflate") for n in negotiated), negotiated
    report.unlink()
    run_js("pubsub_filter", srv, env=env, uri=uri(srv, "plain"))
    assert report.read_text().splitlines() == ["", ""]  # offered, not negotiated


def test_before_the_logon_a_message_inflates_no_further_than_the_logon_limit(srv):
    """MaxFrameSizeBeforeLogon is 16 KB: 128 KiB of zeros (a few hundred bytes deflated) is
    refused with 1009 before the logon, as inflating it would pass that limit; after the
    logon the same size is a publish like any other (MaxFrameSize 1 MB)."""
    peer = RawDeflatePeer(uri(srv, "guarded"))
    peer.ws.send_text(b"text")
    peer.ws.send_binary((2).to_bytes(4, "little"))
    peer.ws.send_text(json.dumps({"c": "publish", "t": "ws-sow"}).encode())
    peer.ws.send_text(json.dumps({"id": 7, "pad": "0" * (128 * 1024)}).encode())
    peer.flush()
    assert peer.sent < 4096
    assert peer.close_code() == CloseCode.MESSAGE_TOO_BIG
    peer.sock.close()
    with connect(uri(srv, "guarded")) as ws:
        ws.send("text")
        command(ws, {"c": "logon", "cid": "l", "client_name": "guarded-py", "a": "processed"})
        assert json.loads(ws.recv(timeout=10))["status"] == "success"
        command(ws, {"c": "publish", "t": "ws-sow", "cid": "p", "a": "processed"},
                json.dumps({"id": 7, "pad": "0" * (128 * 1024)}).encode())
        assert json.loads(ws.recv(timeout=10))["status"] == "success"
