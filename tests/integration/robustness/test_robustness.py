"""Bad input on raw sockets: it never crashes the server nor disturbs other clients."""

from __future__ import annotations

import json
import os
import random
import socket
import threading
import time

import AMPS
import pytest

from tests.support.raw import RawClient


@pytest.fixture
def raw(server):
    made = []

    def make() -> RawClient:
        r = RawClient(server.port)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def test_raw_logon_ack_shape(raw):
    r = raw()
    h = r.logon("raw-1")
    from amps_emulator.protocol.bookmarks import publisher_id_for

    assert h == {"c": "ack", "cid": "l0", "a": "processed", "status": "success",
                 "version": "5.3.4.0", "client_name": "raw-1", "s": 0,
                 "bookmark": f"{publisher_id_for('raw-1')}|0|"}


def test_command_before_logon_is_refused(raw):
    r = raw()
    r.send({"c": "subscribe", "t": "x", "cid": "s1", "a": "processed"})
    h, _ = r.recv_frame()
    assert h["status"] == "failure" and h["reason"] == "logon required" and h["cid"] == "s1"


def test_client_raises_logon_required(server):
    c = AMPS.Client("never-logged-on")
    c.connect(server.uri)
    try:
        with pytest.raises(AMPS.LogonRequiredException):
            c.subscribe(lambda m: None, "x", timeout=5000)
    finally:
        c.close()


def test_unknown_command_and_malformed_header_get_failure_acks(raw):
    r = raw()
    r.logon("raw-2")
    r.send({"c": "frobnicate", "cid": "u1", "a": "processed"})
    h, _ = r.recv_frame()
    assert (h["cid"], h["status"], h["reason"]) == ("u1", "failure", "unknown command")
    r.send_raw(_frame(b'{"c":"p","cid":"m1","a":processed}'))
    h, _ = r.recv_frame()
    assert (h["cid"], h["status"], h["reason"]) == ("m1", "failure", "header malformed")
    r.send({"c": "flush", "cid": "f1", "a": "processed"})
    h, _ = r.recv_frame()
    assert (h["cid"], h["status"]) == ("f1", "success")


def _frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def test_garbage_and_huge_length_prefix_do_not_disturb_other_clients(server, raw, client_factory,
                                                                     collector):
    good_sub, good_pub = client_factory(), client_factory()
    got = collector()
    good_sub.subscribe(got, "steady", timeout=5000)
    stop = threading.Event()
    sent = [0]

    def publish_steadily() -> None:
        while not stop.is_set() and sent[0] < 3000:
            good_pub.publish("steady", '{"i":%d}' % sent[0])
            sent[0] += 1

    t = threading.Thread(target=publish_steadily)
    t.start()
    try:
        huge = raw()
        huge.send_raw((2 * 1024 ** 3).to_bytes(4, "big") + b'{"c":"logon"' + b"x" * 1000)
        assert huge.closed_by_server()
        rnd = random.Random(1234)
        for _ in range(20):
            g = raw()
            try:
                g.send_raw(os.urandom(rnd.randint(1, 4000)) if rnd.random() < 0.5
                           else _frame(os.urandom(rnd.randint(1, 200))))
            except OSError:
                pass
        no_header = raw()
        no_header.send_raw(_frame(b"this is not a header"))
        assert no_header.closed_by_server()
    finally:
        stop.set()
        t.join()
    good_pub.flush(10000)
    items = got.wait_for(sent[0])
    assert [json.loads(d)["i"] for _, _, d, _, _ in items] == list(range(sent[0]))
    assert server.call(lambda: len(server.server.connections)) >= 2


def test_silent_client_is_disconnected_after_two_intervals(raw):
    r = raw()
    r.send({"c": "heartbeat", "o": "start,1"})
    r.logon("silent")
    started = time.monotonic()
    frames = []
    while True:
        f = r.recv_frame(timeout=10)
        if f is None:
            break
        frames.append(f[0])
    waited = time.monotonic() - started
    assert {"c": "heartbeat"} in frames  # the server heartbeated first
    assert 1.5 <= waited <= 5.0


def test_heartbeats_keep_an_idle_official_client_alive(client_factory):
    c = client_factory(logon=False)
    dropped = threading.Event()
    c.set_disconnect_handler(lambda client: dropped.set())
    c.set_heartbeat(1, 3)
    c.logon(5000)
    assert not dropped.wait(5.0), "idle client with heartbeats was disconnected"
    c.publish("alive", "{}")
    c.flush(5000)


SLOW_CONFIG = """<AMPSConfig>
  <Name>slow</Name>
  <Transports>
    <Transport>
      <Name>json-tcp</Name>
      <Type>tcp</Type>
      <InetAddr>127.0.0.1:0</InetAddr>
      <MessageType>json</MessageType>
      <Protocol>amps</Protocol>
      <ClientOutboundLimit>2MB</ClientOutboundLimit>
    </Transport>
  </Transports>
</AMPSConfig>
"""


def test_slow_consumer_is_disconnected_and_others_keep_going(collector):
    from amps_emulator.config import loads_config
    from tests.support.servers import ServerThread

    srv = ServerThread(loads_config(SLOW_CONFIG, "slow.xml")).start()
    try:
        slow = RawClient(srv.port)
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.logon("slow-reader")
        slow.send({"c": "subscribe", "t": "firehose", "cid": "s", "sub_id": "s", "a": "processed"})
        assert slow.recv_frame()[0]["status"] == "success"
        fast = AMPS.Client("fast-reader")
        fast.connect(srv.uri)
        fast.logon(5000)
        got = collector()
        fast.subscribe(got, "firehose", timeout=5000)
        pub = AMPS.Client("firehose-publisher")
        pub.connect(srv.uri)
        pub.logon(5000)
        body = '{"pad":"' + "x" * 1000 + '"}'
        n = 20000  # ~20 MB: far beyond the 2 MB limit plus what kernel buffers absorb
        for i in range(n):
            pub.publish("firehose", body)
            if i % 1000 == 999:  # pace to the fast reader so only the stalled one falls behind
                assert len(got.wait_for(i + 1, timeout=30)) == i + 1
        pub.flush(30000)
        assert len(got.wait_for(n, timeout=30)) == n
        # Checked before the slow socket is read at all: the server dropped it on its own.
        names = srv.call(lambda: sorted(c.client_name for c in srv.server.connections))
        assert names == ["fast-reader", "firehose-publisher"]
        assert slow.closed_by_server(), "the slow consumer was not disconnected"
        pub.close()
        fast.close()
        slow.close()
    finally:
        srv.stop()
