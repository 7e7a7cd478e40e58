"""The compiled hash index rows of a run (``_speedups.hash_int_rows``) against their
pure-Python twin (``sow.index.hash_int_rows_py``), and :meth:`HashIndex.add_run` (which
uses them for a run's int fields) against :meth:`HashIndex.add` one record at a time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator.sow.index import HashIndex, hash_int_rows_py, int_run_py
from amps_emulator.sow.storage.lmdb_keys import record_keys_py
from amps_emulator.sow.storage.memory_tables import MemHashTable
from tests.support.compiled import compiled
from tests.support.compiled import speedups as _speedups

ROWERS = [pytest.param(hash_int_rows_py, id="pure"),
          pytest.param(_speedups and _speedups.hash_int_rows, id="compiled", marks=compiled)]

E = 1 << 53
_VALUES = (st.integers(min_value=-(1 << 70), max_value=1 << 70)
           | st.sampled_from([0, -1, E, -E, E + 1, -E - 1, 10**16, True, False, None, 1.0,
                              float("nan"), "5", [1]]))
_ITEMS = st.one_of(
    st.tuples(st.fixed_dictionaries({"id": _VALUES}), st.text(max_size=8)),
    st.tuples(st.fixed_dictionaries({"id": _VALUES, "x": st.integers()}),
              st.text(max_size=8)),
    st.tuples(st.just({}), st.just("k")),
    st.tuples(st.none(), st.just("k")),
    st.just(({"id": 1}, "k", 3)),
    st.just([{"id": 1}, "k"]),
)


def _expected(field: str, keyed: list) -> list[tuple[bytes, str]]:
    """The rows HashIndex.add gives one by one, up to the first item the run declines."""
    out = []
    for item in keyed:
        if type(item) is not tuple or len(item) != 2 or type(item[0]) is not dict:
            break
        v = item[0].get(field)
        if type(v) is not int or not -E <= v <= E:
            break
        p = b"N" + repr(float(v)).encode()
        out.append((bytes((len(p),)) + p, item[1]))
    return out


@pytest.mark.parametrize("rows", ROWERS)
@settings(max_examples=300, deadline=None)
@given(keyed=st.lists(_ITEMS, max_size=12))
def test_a_runs_int_rows_up_to_the_first_declined(rows: Callable, keyed: list) -> None:
    assert rows("id", keyed) == _expected("id", keyed)


COUNTERS = [pytest.param(int_run_py, id="pure"),
            pytest.param(_speedups and _speedups.int_run, id="compiled", marks=compiled)]


@pytest.mark.parametrize("count", COUNTERS)
@settings(max_examples=300, deadline=None)
@given(keyed=st.lists(_ITEMS, max_size=12))
def test_int_run_counts_the_pairs_that_get_int_rows(count: Callable, keyed: list) -> None:
    assert count("id", keyed) == len(_expected("id", keyed))


@compiled
def test_the_compiled_rows_want_their_types() -> None:
    assert _speedups is not None
    for args in (("id",), (b"id", []), ("id", ())):
        with pytest.raises(TypeError):
            _speedups.hash_int_rows(*args)
        with pytest.raises(TypeError):
            _speedups.int_run(*args)


@settings(max_examples=200, deadline=None)
@given(docs=st.lists(st.fixed_dictionaries({"id": _VALUES}) | st.just({}), max_size=12))
def test_add_run_indexes_as_add_does(docs: list[Any]) -> None:
    keyed = [(d, f"k{i}") for i, d in enumerate(docs)]
    one, run = HashIndex(["/id"], MemHashTable()), HashIndex(["/id"], MemHashTable())
    for d, k in keyed:
        one.add(d, k)
    run.add_run(keyed)
    assert run.table._d == one.table._d


# ---- record_keys: the LMDB keys of a keyed run (sow.storage.lmdb_backend.LmdbBackend.swap_plain) --

KEYERS = [pytest.param(record_keys_py, id="pure"),
          pytest.param(_speedups and _speedups.record_keys, id="compiled", marks=compiled)]


@pytest.mark.parametrize("keys_of", KEYERS)
@settings(max_examples=200, deadline=None)
@given(known=st.dictionaries(st.text(max_size=6), st.binary(min_size=9, max_size=12),
                             max_size=6),
       names=st.lists(st.text(max_size=6), max_size=12),
       seq=st.integers(min_value=0, max_value=(1 << 63)))
def test_record_keys_give_new_keys_the_next_sequences(keys_of: Callable, known: dict,
                                                      names: list, seq: int) -> None:
    lk_of = dict(known)
    keyed = [({}, n) for n in names]
    lks, last = keys_of(lk_of, keyed, seq)
    want: dict = dict(known)
    s = seq
    expect = []
    for n in names:
        if n not in want:
            s += 1
            want[n] = s.to_bytes(8, "big") + n.encode()
        expect.append(want[n])
    assert (lks, last, lk_of) == (expect, s, want)


@pytest.mark.parametrize("keys_of", KEYERS)
def test_record_keys_want_document_and_str_pairs(keys_of: Callable) -> None:
    for bad in ([({}, 5)], [({},)], [[{}, "k"]]):
        with pytest.raises(TypeError):
            keys_of({}, bad, 0)
