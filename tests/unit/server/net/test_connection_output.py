"""A connection's output accounting (server.connection): the bytes pending are what is queued
plus what the transport still holds, checked against the outbound limit and the memory
budget's marks, although a send reads the transport's buffer size only when its estimate (the
size after the last write, which draining only shrinks) reaches a threshold. A fake server and
transport; no sockets, no loop."""

from __future__ import annotations

from types import SimpleNamespace

from amps_emulator.server.net.connection import BUDGET_STEP, Connection
from tests.support.fakes import FakeServer, FakeTransport


class BufferingTransport(FakeTransport):
    """A transport whose socket takes nothing until :meth:`drain`."""

    def __init__(self) -> None:
        super().__init__()
        self.held = 0
        self.size_reads = 0

    def write(self, data):
        super().write(data)
        self.held += len(data)

    def get_write_buffer_size(self):
        self.size_reads += 1
        return self.held

    def drain(self) -> None:
        self.held = 0


class CountingServer(FakeServer):
    def __init__(self) -> None:
        super().__init__()
        self.memory_checks = 0

    def check_memory(self):
        self.memory_checks += 1
        return True


def _conn(limit: int) -> tuple[CountingServer, Connection, BufferingTransport]:
    srv = CountingServer()
    conn = Connection(srv, SimpleNamespace(max_frame=1 << 20, out_limit=limit,
                                           logon_frame_limit=1 << 20, throttled=0))
    t = BufferingTransport()
    conn.connection_made(t)
    conn.logged_on = True  # (the outbound limit, not the one before logon)
    return srv, conn, t


def test_what_the_transport_holds_counts_toward_the_slow_client_limit() -> None:
    srv, conn, t = _conn(1000)
    conn.send(b"x" * 900)
    srv.flush()  # the socket takes none of it
    conn.send(b"x" * 50)
    assert not conn.closed
    conn.send(b"x" * 100)  # 900 held + 150 queued
    assert conn.closed


def test_a_transport_that_drained_since_its_last_write_is_not_taken_for_full() -> None:
    srv, conn, t = _conn(1000)
    conn.send(b"x" * 900)
    srv.flush()
    t.drain()  # the socket took it all after the write
    conn.send(b"x" * 600)  # over the limit with the size after the write, not with the real one
    assert not conn.closed
    conn.send(b"x" * 500)
    assert conn.closed  # 1,100 queued


def test_sends_far_from_any_threshold_do_not_ask_the_transport() -> None:
    srv, conn, t = _conn(1 << 30)
    reads = t.size_reads
    for _ in range(1000):
        conn.send(b"x" * 100)
    assert t.size_reads == reads
    srv.flush()
    assert t.size_reads == reads + 1  # once a write: what it holds now


def test_the_memory_budget_is_asked_at_each_step_of_growth_counting_the_transport() -> None:
    srv, conn, t = _conn(1 << 30)
    conn.send(b"x" * (BUDGET_STEP - 10))
    srv.flush()  # held by the transport now
    assert srv.memory_checks == 0
    conn.send(b"x" * 20)  # queued + held passes the first mark
    assert srv.memory_checks == 1
    conn.send(b"x" * (BUDGET_STEP // 2))
    assert srv.memory_checks == 1  # the next mark is a step further
    conn.send(b"x" * BUDGET_STEP)
    assert srv.memory_checks == 2
    srv.flush()
    t.drain()  # the socket took everything
    conn.send(b"x" * 10)
    srv.flush()  # the next write finds the transport below a step: the first mark again
    assert srv.memory_checks == 2
    conn.send(b"x" * BUDGET_STEP)
    assert srv.memory_checks == 3


def test_held_output_of_a_busy_connection_is_counted_too() -> None:
    srv, conn, t = _conn(1000)
    conn.send(b"x" * 500)
    srv.flush()
    conn.begin_busy()
    conn.send(b"x" * 400)  # held back: 900 pending
    assert not conn.closed
    conn.send(b"x" * 200)
    assert conn.closed


def test_before_logon_the_smaller_limit_holds_and_after_it_the_outbound_one() -> None:
    srv, conn, t = _conn(1 << 22)
    conn.logged_on = False
    conn.send(b"x" * 1000)  # (measured: the first send sets the threshold)
    assert not conn.closed
    conn.logged_on = True
    conn.send(b"x" * (1 << 21))  # over the limit before logon, well within the outbound one
    assert not conn.closed
    srv2, early, _ = _conn(1 << 22)
    early.logged_on = False
    early.send(b"x" * ((1 << 20) + 1))
    assert early.closed


def test_persisted_acks_mark_the_connection_for_the_turns_writes_once() -> None:
    """The persisted acks of a run of publishes, released one by one, make one conflated ack
    and one entry in the turn's writes (not one per publish); after that write, the next
    one marks it again."""
    srv, conn, t = _conn(1 << 20)
    for seq in range(1, 1001):
        conn.note_persisted(seq)
    assert srv.turn.dirty_clients == [conn]
    conn.flush_output()
    data = b"".join(t.written)
    assert data.count(b'"persisted"') == 1 and b'"s":1000' in data
    conn.note_persisted(1001)
    conn.note_persisted(1000)  # (an older one changes nothing)
    assert srv.turn.dirty_clients == [conn, conn]
    conn.flush_output()
    data = b"".join(t.written)
    assert data.count(b'"persisted"') == 2 and b'"s":1001' in data
