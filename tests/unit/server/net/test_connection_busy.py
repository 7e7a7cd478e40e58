"""A connection with a command in progress (server.connection): later frames are stashed and
dispatched in order when it ends, other output is held and written after the command's own,
heartbeats are not held. A fake server and transport; no sockets, no loop."""

from __future__ import annotations

from types import SimpleNamespace

from amps_emulator.protocol.codec import frame
from amps_emulator.server.net.connection import STASH_LIMIT, Connection
from tests.support.fakes import FakeServer, FakeTransport, connection


def cmd(cid: str) -> bytes:
    return frame({"c": "publish", "cid": cid, "t": "x"}, b"{}")


def test_frames_arriving_while_busy_are_dispatched_in_order_when_it_ends():
    srv, conn, _ = connection()

    def on_dispatch(c, command):
        if command.cid == "q":
            c.begin_busy()  # "q" continues in later steps

    srv.on_dispatch = on_dispatch
    conn.data_received(cmd("a") + cmd("q") + cmd("b"))
    conn.data_received(cmd("c"))
    assert srv.dispatched == ["a", "q"]
    conn.end_busy()
    assert srv.dispatched == ["a", "q", "b", "c"]
    assert not conn.busy


def test_a_stashed_command_may_itself_go_busy():
    srv, conn, _ = connection()
    srv.on_dispatch = lambda c, command: c.begin_busy() if command.cid.startswith("q") else None
    conn.data_received(cmd("q1") + cmd("q2") + cmd("x"))
    conn.end_busy()
    assert srv.dispatched == ["q1", "q2"]  # x waits for q2
    conn.end_busy()
    assert srv.dispatched == ["q1", "q2", "x"]


def test_output_is_held_until_the_command_ends_except_its_own_and_heartbeats():
    srv, conn, t = connection()
    conn.send(b"before")
    conn.begin_busy()
    conn.send(b"delivery-1")  # e.g. a publish to one of its subscriptions
    conn.send_direct(b"query-records")
    conn.heartbeat.start(1.0, 0.0)
    conn.heartbeat.sent(-10.0)  # a heartbeat is due
    srv.loop = SimpleNamespace(call_later=lambda *a: None)
    conn.beats.tick()
    srv.flush()
    assert b"".join(t.written).startswith(b"before")
    assert b"query-records" in b"".join(t.written) and b"heartbeat" in b"".join(t.written)
    assert b"delivery-1" not in b"".join(t.written)
    conn.send(b"delivery-2")
    conn.end_busy()
    srv.flush()
    out = b"".join(t.written)
    assert out.index(b"query-records") < out.index(b"delivery-1") < out.index(b"delivery-2")


def test_reading_pauses_when_the_stash_is_large_and_resumes_after():
    srv, conn, t = connection()
    conn.logged_on = True  # (before a logon the stash is held to the small limit)
    conn.begin_busy()
    big = frame({"c": "publish", "cid": "big", "t": "x"}, b"x" * (STASH_LIMIT // 4))
    for _ in range(3):
        conn.data_received(big)
    assert not t.paused
    conn.data_received(big + big)
    assert t.paused
    conn.end_busy()
    assert not t.paused and len(srv.dispatched) == 5


def test_held_output_counts_toward_the_slow_client_limit():
    srv = FakeServer()
    conn = Connection(srv, SimpleNamespace(max_frame=1 << 20, out_limit=1000,
                                           logon_frame_limit=1 << 20, throttled=0))
    conn.connection_made(FakeTransport())
    conn.begin_busy()
    conn.send(b"x" * 600)
    assert not conn.closed
    conn.send(b"x" * 600)
    assert conn.closed  # a client that cannot keep up is dropped, held bytes included

