"""A connection before its logon (:class:`~amps_emulator.server.net.connection.Connection`):
a frame announcing more than ``logon_frame_limit`` is refused at its length prefix, unless a
logon is being decided (reading pauses until it is); output it never reads is held to the
same small size. After the logon the transport's own limits apply."""

from __future__ import annotations

from amps_emulator.protocol.codec import frame
from tests.support.fakes import connection

MiB = 1 << 20


def test_a_large_frame_before_logon_closes_at_its_length_prefix():
    _, conn, _ = connection()
    conn.data_received((8 * MiB).to_bytes(4, "big") + b'{"c":"p"}')
    assert conn.closed and conn.buffered_bytes() == 0


def test_the_same_frame_after_logon_is_taken():
    _, conn, _ = connection()
    conn.logged_on = True
    conn.data_received((8 * MiB).to_bytes(4, "big") + b'{"c":"p"}')
    # taken, and counted whole: its header is in, so its body is allocated
    assert not conn.closed and conn.buffered_bytes() == 8 * MiB


def test_frames_within_the_limit_before_logon_are_taken():
    srv, conn, _ = connection()
    conn.data_received(frame({"c": "logon", "cid": "1"}) + MiB.to_bytes(4, "big") + b"{")
    assert not conn.closed and srv.dispatched == ["1"]


def test_a_logon_being_decided_pauses_reading_instead():
    srv, conn, t = connection()

    def decide_later(c, cmd):
        if cmd.command == "logon":
            c.begin_busy()  # (what a secured server does while the modules decide)

    srv.on_dispatch = decide_later
    conn.data_received(frame({"c": "logon", "cid": "1"}) + (8 * MiB).to_bytes(4, "big"))
    assert not conn.closed and t.paused
    conn.logged_on = True  # accepted
    conn.end_busy()
    assert not t.paused
    conn.data_received(b"x" * 100)
    assert not conn.closed


def test_output_before_logon_is_held_to_the_small_limit():
    _, conn, _ = connection()
    conn.send(b"x" * (MiB // 2))
    assert not conn.closed
    conn.send(b"x" * (MiB // 2 + 1))
    assert conn.closed


def test_output_after_logon_has_the_transport_limit():
    _, conn, _ = connection()
    conn.logged_on = True
    for _ in range(4):
        conn.send(b"x" * MiB)
    assert not conn.closed


def test_frames_arriving_while_a_logon_is_decided_are_held_to_the_small_limit():
    _, conn, t = connection()
    conn.begin_busy()  # a logon being decided
    small = frame({"c": "publish", "cid": "p", "t": "x"}, b"x" * (200 << 10))
    for _ in range(5):
        conn.data_received(small)
    assert not t.paused
    conn.data_received(small)  # past 1 MiB stashed: nothing more is read until it is decided
    assert t.paused and not conn.closed
