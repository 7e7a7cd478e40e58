"""The end of an event-loop turn (server.turn.Turn): its stages, the clients' writes, and the
callbacks that wait for it (``after``). A fake loop whose passes the test runs."""

from __future__ import annotations

from typing import Any

from amps_emulator.server.core.turn import Turn
from tests.support.fakes import FakeLoop


class Writer:
    closed = False

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def flush_output(self) -> None:
        self.log.append("write")


def bound() -> tuple[Turn, FakeLoop, list[str]]:
    turn, loop = Turn(), FakeLoop()
    turn.bind(loop)  # type: ignore[arg-type]
    log: list[str] = []
    turn.stage("journal", lambda: log.append("stage"))
    return turn, loop, log


def test_after_runs_in_the_pass_after_the_end_of_the_turn():
    turn, loop, log = bound()
    w: Any = Writer(log)
    turn.after(lambda: log.append("next pass"))  # requests the end of the turn itself
    turn.dirty(w)
    assert loop.run_pass() == 1  # the end of the turn, only
    assert log == ["stage", "write"]
    assert loop.run_pass() == 1
    assert log == ["stage", "write", "next pass"]
    assert loop.run_pass() == 0


def test_a_callback_queued_during_a_pass_waits_for_that_turns_end():
    """A connection's frames past its budget: the turn their pass requested ends (the journal
    write, the sync's start, the acks) before the next pass of them, not after it."""
    turn, loop, log = bound()

    def a_pass(n: int) -> None:
        if n < 3:  # (a connection defers the frames past its budget first)
            turn.after(lambda: a_pass(n + 1))
        log.append(f"pass {n}")
        turn.request()  # its frames produced work for the end of the turn

    a_pass(1)
    while loop.run_pass():
        pass
    assert log == ["pass 1", "stage", "pass 2", "stage", "pass 3", "stage"]
