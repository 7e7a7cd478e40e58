"""bflat codec, written from the public format description (bflat.io, MIT reference)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amps_emulator.protocol.filter import compile_filter
from amps_emulator.protocol.msgtypes import BflatCodec, CodecError

bf = BflatCodec()


def field(vtype: int, tag: bytes, value: bytes, array: bool = False) -> bytes:
    return bytes([(0x80 if array else 0) | (vtype << 3) | len(tag)]) + tag + value


def test_hand_built_body():
    body = (field(1, b"sym", b"\x03IBM")                      # string
            + field(3, b"q8", b"\xfe")                         # int8 -2
            + field(5, b"qty", struct.pack("<i", 150))         # int32
            + field(7, b"px", struct.pack("<d", 24.5))         # double
            + field(9, b"big", b"\xc0\xbb\x78")                # sLEB128 -123456
            + field(0, b"n", b"")                              # null
            + field(2, b"raw", b"\x02\x00\xff")                # binary
            + field(8, b"ts", struct.pack("<q", 1700000000000))  # datetime ms
            + field(4, b"arr", b"\x02" + struct.pack("<hh", 1, -1), array=True)
            + field(1, b"tags", b"\x02\x01a\x02bc", array=True))
    tree = bf.decode(body)
    assert tree == {"sym": "IBM", "q8": -2, "qty": 150, "px": 24.5, "big": -123456, "n": None,
                    "raw": "\x00\xff", "ts": 1700000000000, "arr": [1, -1], "tags": ["a", "bc"]}
    assert compile_filter("/sym = 'IBM' AND /qty > 100 AND /arr = -1 AND /big < 0")(tree)


def test_long_tag_uses_leb128_length():
    tag = b"averylongtagname"
    body = bytes([1 << 3]) + bytes([len(tag)]) + tag + b"\x01x"
    assert bf.decode(body) == {"averylongtagname": "x"}
    assert bf.encode({"averylongtagname": "x"}) == body


def test_most_compact_integer_width():
    assert bf.encode({"a": 1}) == field(3, b"a", b"\x01")
    assert bf.encode({"a": 300}) == field(4, b"a", struct.pack("<h", 300))
    assert bf.encode({"a": 1 << 40}) == field(6, b"a", struct.pack("<q", 1 << 40))


@pytest.mark.parametrize("body", [b"\x0b", field(1, b"s", b"\x05ab"), field(5, b"i", b"\x01"),
                                  bytes([0x50 | 1]) + b"t", field(1, b"s", b"\x01\xff"),
                                  field(4, b"a", b"\x05\x00", array=True)])
def test_malformed(body):
    with pytest.raises(CodecError):
        bf.decode(body)


def test_encode_refuses_nesting_and_mixed_arrays():
    for tree in ({"a": {"b": 1}}, {"a": [1, "x"]}, {"": 1}, [1]):
        with pytest.raises(CodecError):
            bf.encode(tree)


@given(st.binary(max_size=200))
def test_decode_raises_only_codec_error(body):
    try:
        bf.decode(body)
    except CodecError:
        pass


_ints = st.integers(-(2 ** 127), 2 ** 127 - 1)
_floats = st.floats(allow_nan=False)
_strs = st.text(max_size=8)
_value = st.one_of(st.none(), _ints, _floats, _strs,
                   st.lists(_ints, max_size=3), st.lists(_floats, max_size=3),
                   st.lists(_strs, max_size=3))


@given(st.dictionaries(st.text(min_size=1, max_size=10), _value, max_size=6))
def test_round_trip(tree):
    assert bf.decode(bf.encode(tree)) == tree
