"""The positions of records replicated here from one instance (journal.identity.Arrivals), kept
as runs of consecutive positions, answer as the plain ascending list of them does: the end of
the run a position is in, the last arrival before a position, the first after one, after
retention trimmed the head."""

from __future__ import annotations

from bisect import bisect_left

from hypothesis import given
from hypothesis import strategies as st

from amps_emulator.journal.identity import Arrivals, SequenceIndex

# groups of (gap before, length): each group is noted at once (a run a link appended)
groups = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5)), max_size=12)


def _model_run_end(got: list[int], position: int) -> int | None:
    if position not in got:
        return None
    end = position
    while end + 1 in got:
        end += 1
    return end


@given(groups, st.integers(0, 60), st.booleans())
def test_runs_answer_as_the_list_of_positions_does(gs, trim_at, as_list):
    arrivals = Arrivals()
    got: list[int] = []
    pos = 1
    for gap, n in gs:
        pos += gap
        run = range(pos, pos + n)
        arrivals.add_all(list(run) if as_list else run)
        got += run
        pos += n
    arrivals.trim(trim_at)
    got = got[bisect_left(got, trim_at):]
    assert bool(arrivals) == bool(got)
    for p in range(0, pos + 3):
        assert arrivals.run_end(p) == _model_run_end(got, p), p
        before = [g for g in got if g < p]
        assert arrivals.last_before(p) == (before[-1] if before else None), p
        after = [g for g in got if g > p]
        assert arrivals.first_after(p) == (after[0] if after else None), p


def test_a_run_noted_at_once_is_one_entry():
    index = SequenceIndex()
    index.arrived_run("A", range(1, 1001))
    index.arrived_run("A", range(1001, 2001))  # (adjacent: the same run)
    assert index.arrival_run("A", 5) == 2000
    assert len(index._arrivals["A"].starts) == 1
