"""Persisted acks a sync's end releases between turns (server.txlog ``_between_turns``): what
the release queues goes out at once to a connection that had nothing queued; a connection with
output queued this turn keeps its acks behind that output until the end of the turn. Fake
server and transports, no journal, no loop."""

from __future__ import annotations

from types import SimpleNamespace

from amps_emulator.server.services.txlog import TxLog
from tests.support.fakes import connection


def test_acks_released_between_turns_go_out_at_once_unless_output_is_queued() -> None:
    srv_a, quiet, quiet_t = connection()
    srv_b, queued, queued_t = connection()
    tx = TxLog(SimpleNamespace(turn=srv_a.turn), None)
    queued.send(b"queued this turn")
    tx._persist_fifo.extend([(1, quiet, 3, None), (2, queued, 7, None), (3, quiet, 4, None),
                             (9, quiet, 5, None)])  # (9: not durable yet)
    tx._between_turns(tx._release, 3)
    assert len(quiet_t.written) == 1  # one conflated ack, at once
    assert b'"s":4' in quiet_t.written[0] and b"persisted" in quiet_t.written[0]
    assert queued_t.written == []  # behind what was queued, at the end of the turn
    srv_b.flush()
    assert queued_t.written[0].startswith(b"queued this turn") and b'"s":7' in queued_t.written[0]
    tx._release(9)  # within a turn: nothing goes out before the turn's end
    assert len(quiet_t.written) == 1
    srv_a.flush()
    assert len(quiet_t.written) == 2 and b'"s":5' in quiet_t.written[1]
