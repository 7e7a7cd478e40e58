"""A client's run of publishes waits in the persisted-ack FIFO as one entry
(server.services.persist_runs): released whole or in part as the safe position moves, and
failed publish by publish where a refused write cuts through it. Fake server, transport and
journal; no loop."""

from __future__ import annotations

import re
from types import SimpleNamespace

from amps_emulator.journal.api import WriteFailure
from amps_emulator.server.services.txlog import TxLog
from tests.support.fakes import connection


def _recs(*positions: int) -> list[SimpleNamespace]:
    return [SimpleNamespace(position=p) for p in positions]


def _txlog(srv, journal) -> TxLog:
    tx = TxLog(SimpleNamespace(turn=srv.turn, loop=SimpleNamespace(call_later=lambda *a: None)),
               SimpleNamespace(journal_directory="journal"))
    tx._journal = journal
    return tx


def _acks(t) -> list[tuple[str, str]]:
    """(s, status) of each persisted ack written, in order."""
    out = []
    for chunk in t.written:
        for m in re.finditer(rb'\{[^{}]*"a":"persisted"[^{}]*\}', chunk):
            s = re.search(rb'"s":(\d+)', m.group()).group(1).decode()
            status = re.search(rb'"status":"(\w+)"', m.group())
            out.append((s, status.group(1).decode() if status else ""))
    return out


def test_a_run_waits_as_one_entry_and_is_acked_as_far_as_it_is_safe() -> None:
    srv, conn, t = connection()
    journal = SimpleNamespace(durable_position=0, last_position=5)
    tx = _txlog(srv, journal)
    tx.wait_persisted_run(conn, [10, 11, 12], _recs(3, 4, 5))
    assert len(tx._persist_fifo) == 1  # one entry for the run, not one per publish
    tx._between_turns(tx._release, 4)  # (a sync destination acknowledged part of the run)
    assert _acks(t) == [("11", "success")]
    assert len(tx._persist_fifo) == 1  # the rest waits
    tx._between_turns(tx._release, 5)
    assert _acks(t) == [("11", "success"), ("12", "success")]
    assert not tx._persist_fifo


def test_a_refused_write_fails_only_its_own_publishes_of_a_run() -> None:
    srv, conn, t = connection()
    err = OSError(28, "No space left on device")
    journal = SimpleNamespace(durable_position=0, last_position=6,
                              take_write_failures=lambda: [WriteFailure(5, 5, err)])
    tx = _txlog(srv, journal)
    tx.wait_persisted_run(conn, [13, 14, 15], _recs(4, 5, 6))
    tx.wait_persisted_run(conn, [16, 17], _recs(7, 8))
    tx._write_failed()
    tx._between_turns(tx._release, 8)
    acks = _acks(t)
    assert ("14", "failure") in acks
    assert [a for a in acks if a[1] == "failure"] == [("14", "failure")]
    assert acks[-1] == ("17", "success")  # the conflated success covers the others


def test_an_unrecorded_run_waits_for_what_was_appended_before_it() -> None:
    srv, conn, t = connection()
    journal = SimpleNamespace(durable_position=0, last_position=9)
    tx = _txlog(srv, journal)
    tx.wait_persisted_run(conn, [1, 2, 3], None)
    tx._between_turns(tx._release, 8)
    assert _acks(t) == []
    tx._between_turns(tx._release, 9)
    assert _acks(t) == [("3", "success")]
