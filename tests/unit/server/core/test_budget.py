"""The one memory budget (:mod:`amps_emulator.server.core.budget`): holders of any kind
register, a check over the limit closes the largest until the total fits, closed holders
count nothing."""

from __future__ import annotations

import logging

from amps_emulator.server.core.budget import MemoryBudget


class Holder:
    def __init__(self, name: str, held: int) -> None:
        self.name = name
        self.held = held
        self.closed = False
        self.why: str | None = None

    def budget_bytes(self) -> int:
        return self.held

    def describe(self) -> str:
        return self.name

    def close(self, why: str, abort: bool = False) -> None:
        self.closed = True
        self.why = why
        self.held = 0


def test_within_the_limit_nobody_is_closed():
    budget = MemoryBudget(100)
    a, b = Holder("a", 40), Holder("b", 60)
    budget.add(a)
    budget.add(b)
    assert budget.check() and budget.held() == 100 and not (a.closed or b.closed)


def test_over_the_limit_the_largest_holders_are_closed_until_it_fits(caplog):
    budget = MemoryBudget(100)
    small, middle, large = Holder("small", 30), Holder("middle", 50), Holder("large", 70)
    for h in (small, middle, large):
        budget.add(h)
    with caplog.at_level(logging.WARNING, logger="amps_emulator.server"):
        assert not budget.check()
    assert large.closed and middle.closed is False and small.closed is False
    assert large.why is not None and large.why.startswith("slow client")
    assert [r.getMessage() for r in caplog.records if "large" in r.getMessage()]
    assert budget.held() == 80


def test_any_kind_of_holder_counts_and_leaves():
    budget = MemoryBudget(100)
    conn, upgrading = Holder("connection", 60), Holder("websocket in its upgrade", 60)
    budget.add(conn)
    budget.add(upgrading)
    assert budget.held() == 120 and len(budget) == 2
    budget.discard(upgrading)  # (its bytes now counted by the connection it became)
    assert budget.check() and len(budget) == 1


def test_a_closed_holder_counts_nothing():
    budget = MemoryBudget(10)
    gone = Holder("gone", 1000)
    gone.closed = True
    budget.add(gone)
    assert budget.held() == 0 and budget.check()
