"""struct codec: Field specs, layout, refusals."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amps_emulator.protocol.filter import compile_filter
from amps_emulator.protocol.msgtypes import (
    CodecError,
    MessageTypeConfigError,
    StructCodec,
    UnsupportedByType,
)

FIELDS = ["/id = i", "/px = d", "/sym = 8s", "4x", "/be = >H", "/pos/x = f", "/ok = ?"]
codec = StructCodec("quote", FIELDS)


def test_layout_and_filter():
    body = (struct.pack("<id8s", 7, 24.5, b"IBM") + b"\0" * 4 + struct.pack(">H", 513)
            + struct.pack("<f?", 1.5, True))
    assert codec.size == len(body)
    tree = codec.decode(body)
    assert tree == {"id": 7, "px": 24.5, "sym": "IBM", "be": 513, "pos": {"x": 1.5}, "ok": True}
    assert compile_filter("/sym = 'IBM' AND /pos/x > 1 AND /be = 513")(tree)
    assert codec.encode(tree) == body


@pytest.mark.parametrize("spec", [["/a = 2i"], ["/a = z"], ["a"], ["/a = i", "/a = i"],
                                  ["/a = i", "/a/b = i"], ["4x"], ["/a = 4x"]])
def test_bad_field_specs(spec):
    with pytest.raises(MessageTypeConfigError):
        StructCodec("s", spec)


def test_refusals():
    with pytest.raises(CodecError):
        codec.decode(b"\x00")
    with pytest.raises(UnsupportedByType):
        codec.merge_delta(b"", b"")
    for tree in ({"id": "x"}, {"id": 1 << 40, "px": 1.0, "sym": "", "be": 1, "pos": {"x": 1.0},
                               "ok": True}):
        with pytest.raises(CodecError):
            codec.encode(tree)


@given(st.binary(max_size=60))
def test_decode_raises_only_codec_error(body):
    try:
        codec.decode(body)
    except CodecError:
        pass


@given(st.integers(-(2 ** 31), 2 ** 31 - 1), st.floats(allow_nan=False),
       st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)),
               max_size=2),
       st.integers(0, 65535), st.sampled_from([0.0, 1.5, -2.25]), st.booleans())
def test_round_trip(i, d, s, h, f, ok):
    tree = {"id": i, "px": d, "sym": s, "be": h, "pos": {"x": f}, "ok": ok}
    assert codec.decode(codec.encode(tree)) == tree
