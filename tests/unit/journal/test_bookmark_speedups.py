"""The compiled bookmark strings of a run of journal records (``_speedups.bookmark_strs``)
against their pure-Python twin (``journal.record.bookmark_strs_py``) and each record's
``bookmark_str``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator.journal.record import JournalRecord, bookmark_strs, bookmark_strs_py
from tests.support.compiled import compiled
from tests.support.compiled import speedups as _speedups

U64 = 1 << 64
_IDS = (st.integers(min_value=0, max_value=U64 - 1)
        | st.sampled_from([0, 1, 9, 10, U64 - 1, U64, -1, 1 << 70]))


def _recs(pairs: list[tuple[int, int]]) -> list[JournalRecord]:
    return [JournalRecord(i, 1, "t", pid, seq, 1_700_000_000_000_000, "c")
            for i, (pid, seq) in enumerate(pairs, 1)]


@settings(max_examples=300, deadline=None)
@given(pairs=st.lists(st.tuples(_IDS, _IDS), max_size=10))
def test_a_runs_bookmarks_are_its_records_bookmark_strs(pairs: list[tuple[int, int]]) -> None:
    recs = _recs(pairs)
    want = [r.bookmark_str for r in recs]
    assert bookmark_strs(recs) == want
    assert bookmark_strs_py(recs) == want


@compiled
@settings(max_examples=300, deadline=None)
@given(pairs=st.lists(st.tuples(_IDS, _IDS), max_size=10))
def test_the_compiled_bookmarks_are_the_twins_or_declined(pairs: list[tuple[int, int]]
                                                          ) -> None:
    assert _speedups is not None
    recs = _recs(pairs)
    got = _speedups.bookmark_strs(recs)
    if all(0 <= x < U64 for p in pairs for x in p):
        assert got == bookmark_strs_py(recs)
    else:
        assert got is None


@compiled
def test_the_compiled_bookmarks_want_a_list_of_records() -> None:
    assert _speedups is not None
    with pytest.raises(TypeError):
        _speedups.bookmark_strs(tuple(_recs([(1, 2)])))
    with pytest.raises(AttributeError):
        _speedups.bookmark_strs([object()])
    assert _speedups.bookmark_strs([]) == []
