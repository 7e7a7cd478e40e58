"""binary codec: opaque bytes; what AMPS refuses on it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amps_emulator.protocol.filter import compile_filter
from amps_emulator.protocol.msgtypes import BinaryCodec, UnsupportedByType

binary = BinaryCodec()


@given(st.binary(max_size=100))
def test_no_fields_ever(body):
    assert binary.decode(body) is None
    assert binary.key_values(body, [("id",)]) == [None]
    assert not compile_filter("/id IS NOT NULL")(binary.decode(body))


def test_refused_operations():
    caps = binary.capabilities
    assert not (caps.delta or caps.views or caps.select or caps.aggregates or caps.amps_topics
                or caps.filters)
    with pytest.raises(UnsupportedByType):
        binary.merge_delta(b"\x00", b"{")
    with pytest.raises(UnsupportedByType):
        binary.encode({"a": 1})
