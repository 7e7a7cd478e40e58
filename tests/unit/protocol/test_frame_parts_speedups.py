"""A fan-out delivery's frame from its shared header parts (``protocol.codec.frame_parts``):
the compiled ``_speedups.frame_parts`` against its pure-Python twin, and both against a
frame of the joined header."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator.protocol.codec import frame_parts_py, frame_raw
from tests.support.compiled import compiled
from tests.support.compiled import speedups as _speedups

PARTS = [pytest.param(frame_parts_py, id="pure"),
         pytest.param(_speedups and _speedups.frame_parts, id="compiled", marks=compiled)]


@pytest.mark.parametrize("frame_parts", PARTS)
@settings(max_examples=200, deadline=None)
@given(head=st.binary(max_size=80), sids=st.binary(max_size=40), tail=st.binary(max_size=80),
       body=st.binary(max_size=3000))
def test_the_frame_is_the_joined_headers(frame_parts, head, sids, tail, body) -> None:
    assert frame_parts(head, sids, tail, body) == frame_raw(head + sids + tail, body)


@pytest.mark.parametrize("frame_parts", PARTS)
def test_any_bytes_like_part_and_nothing_else(frame_parts) -> None:
    assert frame_parts(bytearray(b"{"), memoryview(b'"s"'), b"}", b"") == frame_raw(b'{"s"}')
    with pytest.raises(TypeError):
        frame_parts(b"{", "s", b"}", b"")
    with pytest.raises(TypeError):
        frame_parts(b"{", b"s", b"}")
