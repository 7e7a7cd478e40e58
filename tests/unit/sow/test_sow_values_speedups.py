"""The compiled stored-value builder (``_speedups.sow_values``) against its pure-Python twin
(``sow.record.sow_values_py``), and both against ``sow.record.encode_record`` (the layout
every reader decodes), for records without expiration or headers; and the refusals of
arguments the compiled one cannot take."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator.sow.record import VERSION, Record, decode_record, encode_record, sow_values_py
from tests.support.compiled import compiled
from tests.support.compiled import speedups as _speedups

BUILDERS = [pytest.param(sow_values_py, id="pure"),
            pytest.param(_speedups and _speedups.sow_values, id="compiled", marks=compiled)]

_record = st.tuples(
    st.binary(max_size=300),
    st.one_of(st.just(""), st.text(max_size=40), st.text(min_size=220, max_size=300)),
    st.integers(0, (1 << 64) - 1),
    st.floats(allow_nan=False),
)


@pytest.mark.parametrize("build", BUILDERS)
@settings(max_examples=200, deadline=None)
@given(records=st.lists(_record, max_size=8), view=st.booleans())
def test_each_value_is_the_encoded_record(build, records, view) -> None:
    bodies = [memoryview(b) if view else b for b, *_ in records]
    out = build(VERSION, bodies, [r[1] for r in records], [r[2] for r in records],
                [r[3] for r in records])
    assert all(type(v) is bytes for v in out)
    expected = [encode_record(Record("k", body, bm, ts, None, pos)) for body, bm, pos, ts
                in records]
    assert out == expected
    for v, (body, bm, pos, ts) in zip(out, records, strict=True):
        back = decode_record("k", v)
        assert (back.data, back.bookmark, back.position, back.timestamp, back.expiration) == \
            (body, bm, pos, ts, None)


@compiled
@pytest.mark.parametrize("args, error", [
    ((VERSION, [b"x"], [""], [-1], [1.0]), OverflowError),  # a position below 0
    ((VERSION, [b"x"], [""], [1 << 64], [1.0]), OverflowError),
    ((VERSION, [b"x"], [b"bm"], [1], [1.0]), TypeError),  # a bookmark not a str
    ((VERSION, [b"x"], ["\ud800"], [1], [1.0]), UnicodeEncodeError),  # a lone surrogate
    ((VERSION, [b"x"], [""], [1], ["now"]), TypeError),
    ((VERSION, [123], [""], [1], [1.0]), TypeError),  # a body that is no buffer
    ((VERSION, [b"x", b"y"], [""], [1], [1.0]), ValueError),  # lists of other lengths
    ((VERSION, (b"x",), ("",), (1,), (1.0,)), TypeError),  # not lists
])
def test_the_compiled_builder_refuses_what_it_cannot_store(args, error) -> None:
    assert _speedups is not None
    with pytest.raises(error):
        _speedups.sow_values(*args)
