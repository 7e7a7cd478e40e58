"""A connection handles at most FRAMES_PER_PASS frames per event-loop pass (server.connection):
the rest of a large read waits in a backlog, in order, with reading paused, so that other
connections and the end of the turn get their turn. A fake loop whose passes the test runs."""

from __future__ import annotations

from amps_emulator.server.net.connection import FRAMES_PER_PASS
from tests.support.fakes import FakeLoop, connection

from .test_connection_busy import cmd


def looped():
    srv, conn, t = connection()
    srv.loop = FakeLoop()
    return srv, conn, t


def frames(prefix: str, n: int) -> bytes:
    return b"".join(cmd(f"{prefix}{i}") for i in range(n))


def test_a_large_read_is_handled_over_several_passes_in_order_with_reading_paused():
    srv, conn, t = looped()
    n = 2 * FRAMES_PER_PASS + 10
    conn.data_received(frames("a", n))
    assert srv.dispatched == [f"a{i}" for i in range(FRAMES_PER_PASS)]
    assert t.paused  # nothing more is read while a backlog waits
    assert conn.buffered_bytes() > 0  # the backlog counts against the memory budget
    srv.loop.run_pass()
    assert len(srv.dispatched) == 2 * FRAMES_PER_PASS and t.paused
    srv.loop.run_pass()
    assert srv.dispatched == [f"a{i}" for i in range(n)]
    assert not t.paused
    assert conn.buffered_bytes() == 0
    assert srv.loop.run_pass() == 0  # no pass left scheduled


def test_another_connection_is_served_between_the_passes():
    srv, busy_one, _ = looped()
    _, other, _ = connection()
    other.host = srv
    busy_one.data_received(frames("a", FRAMES_PER_PASS + 5))
    other.data_received(cmd("b"))  # a read of another socket in the same loop pass
    srv.loop.run_pass()
    assert srv.dispatched.index("b") == FRAMES_PER_PASS  # before a's remaining five
    assert srv.dispatched[-5:] == [f"a{FRAMES_PER_PASS + i}" for i in range(5)]


def test_frames_that_arrive_behind_a_backlog_wait_for_it():
    srv, conn, t = looped()
    conn.data_received(frames("a", FRAMES_PER_PASS + 3))
    conn.received([cmd("late")[4:]])  # e.g. decoded from the rest of a read, or a websocket
    assert "late" not in srv.dispatched
    srv.loop.run_pass()
    assert srv.dispatched[-4:] == [f"a{FRAMES_PER_PASS + i}" for i in range(3)] + ["late"]
    assert not t.paused


def test_a_command_going_busy_inside_a_pass_keeps_the_order_of_everything_after_it():
    srv, conn, t = looped()
    busy_at = "a10"
    srv.on_dispatch = lambda c, command: c.begin_busy() if command.cid == busy_at else None
    n = FRAMES_PER_PASS + 20
    conn.data_received(frames("a", n))
    assert srv.dispatched == [f"a{i}" for i in range(11)]
    srv.loop.run_pass()  # the backlog's frames join the stash behind the busy command
    assert srv.dispatched == [f"a{i}" for i in range(11)]
    conn.data_received(cmd("b"))  # (reading goes on while busy, up to STASH_LIMIT)
    conn.end_busy()
    srv.loop.run_pass()
    srv.loop.run_pass()
    assert srv.dispatched == [f"a{i}" for i in range(n)] + ["b"]
    assert not t.paused


def test_a_closed_connection_drops_its_backlog():
    srv, conn, _ = looped()
    conn.data_received(frames("a", FRAMES_PER_PASS + 3))
    conn.close("test")
    srv.loop.run_pass()
    assert len(srv.dispatched) == FRAMES_PER_PASS
    assert conn.buffered_bytes() == 0
