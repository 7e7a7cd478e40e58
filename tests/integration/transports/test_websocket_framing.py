"""The WebSocket framing seen from a bare peer (:class:`tests.support.ws.WsPeer`: the
websockets package's sans-IO client on a plain socket, no Node needed): the message layout the
JavaScript client expects, and bad input closing only that client."""

from __future__ import annotations

import json
import socket

from amps_emulator.config import loads_config
from tests.support.servers import ServerThread
from tests.support.ws import WsPeer

CONFIG = """<AMPSConfig>
  <Name>ws-framing</Name>
  <Transports>
    <Transport><Name>ws</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <MessageType>json</MessageType><Protocol>websocket</Protocol>
      <MaxFrameSize>64KB</MaxFrameSize><ClientOutboundLimit>1MB</ClientOutboundLimit></Transport>
  </Transports>
  <SOW><Topic><Name>recs</Name><MessageType>json</MessageType><Key>/id</Key>
    <Durability>transient</Durability></Topic></SOW>
</AMPSConfig>"""


def _server() -> ServerThread:
    return ServerThread(loads_config(CONFIG, "ws.xml")).start()


def test_messages_laid_out_as_the_javascript_client_reads_them():
    srv = _server()
    try:
        peer = WsPeer(srv.port)
        peer.logon("layout")
        peer.command({"c": "subscribe", "t": "recs", "sub_id": "s1", "cid": "c1", "a": "processed"})
        assert peer.header()["a"] == "processed"
        for i in range(3):
            peer.command({"c": "p", "t": "recs"}, json.dumps({"id": i}))
        peer.command({"c": "p", "t": "plain"}, "")  # no subscriber: nothing comes of it
        peer.command({"c": "flush", "cid": "f1", "a": "processed"})
        for i in range(3):
            h = peer.header()
            assert h["c"] == "p" and h["sids"] == "s1" and "l" not in h
            assert json.loads(peer.message()) == {"id": i}  # the body, one message
        assert peer.header()["cid"] == "f1"
        # a sow batch: the header says how many header/body pairs follow
        peer.command({"c": "sow", "t": "recs", "cid": "q", "query_id": "q", "bs": 2,
                      "a": "processed,completed"})
        assert peer.header()["a"] == "processed"
        assert peer.header()["c"] == "group_begin"
        ids = []
        while (h := peer.header())["c"] == "sow":
            for _ in range(h["bs"]):
                rec = peer.header()
                assert set(rec) >= {"k", "l"}
                ids.append(json.loads(peer.message())["id"])
        assert h["c"] == "group_end" and sorted(ids) == [0, 1, 2]
        assert peer.header()["a"] == "completed"
        # a publish with an empty body: "l":0 and no body message
        peer.command({"c": "subscribe", "t": "empty", "sub_id": "s2", "cid": "c2", "a": "processed"})
        assert peer.header()["a"] == "processed"
        peer.command({"c": "p", "t": "empty"}, "")
        peer.command({"c": "flush", "cid": "f2", "a": "processed"})
        assert peer.header() | {"bm": None} == {"c": "p", "t": "empty", "sids": "s2", "l": 0, "bm": None}
        assert peer.header()["cid"] == "f2"
    finally:
        srv.stop()


def test_bad_framing_closes_only_that_client():
    srv = _server()
    try:
        bad_mode = WsPeer(srv.port, mode="hello")
        assert bad_mode.closed_by_server() and bad_mode.closed_code == 1002
        no_count = WsPeer(srv.port)
        no_count.text('{"c":"logon","cid":"l"}')  # a header where the part count belongs
        assert no_count.closed_by_server() and no_count.closed_code == 1002
        too_big = WsPeer(srv.port)
        too_big.logon("big")
        too_big.command({"c": "p", "t": "recs"}, json.dumps({"id": 1, "pad": "x" * 70_000}))
        assert too_big.closed_by_server() and too_big.closed_code == 1009
        ok = WsPeer(srv.port)
        ok.logon("still-served")
        ok.command({"c": "bogus", "cid": "b", "a": "processed"})
        assert ok.header()["status"] == "failure"  # a bad command is answered, not fatal
        names = srv.call(lambda: sorted(c.client_name for c in srv.server.connections))
        assert names == ["still-served"]
    finally:
        srv.stop()


def test_a_mode_message_of_binary_garbage_gets_its_close_frame():
    srv = _server()
    try:
        garbage = WsPeer(srv.port, mode=None)
        garbage.binary(bytes(range(128, 256)))  # quoted in the close reason, 3 bytes each
        assert garbage.closed_by_server() and garbage.closed_code == 1002
        ok = WsPeer(srv.port)
        ok.logon("after-garbage")
    finally:
        srv.stop()


def test_slow_websocket_consumer_is_disconnected():
    srv = _server()
    try:
        slow = WsPeer(srv.port, rcvbuf=4096)
        slow.logon("slow")
        slow.command({"c": "subscribe", "t": "firehose", "sub_id": "s", "cid": "s", "a": "processed"})
        assert slow.header()["status"] == "success"
        pub = WsPeer(srv.port)
        pub.logon("pub")
        body = json.dumps({"pad": "x" * 1000})
        for _ in range(8000):  # ~8 MB against a 1 MB limit plus kernel buffers
            pub.command({"c": "p", "t": "firehose"}, body)
        pub.command({"c": "flush", "cid": "f", "a": "processed"})
        assert pub.header()["cid"] == "f"
        names = srv.call(lambda: sorted(c.client_name for c in srv.server.connections))
        assert names == ["pub"]
        assert slow.closed_by_server()
    finally:
        srv.stop()


def test_upgrade_on_a_wrong_path_is_refused():
    srv = _server()
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
            s.sendall(b"GET /amps/xml HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                      b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                      b"Sec-WebSocket-Version: 13\r\n\r\n")
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 404"), reply[:80]
        assert b"/amps/json" in reply
    finally:
        srv.stop()
