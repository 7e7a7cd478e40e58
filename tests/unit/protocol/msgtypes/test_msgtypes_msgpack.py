"""msgpack codec: one map per body, bin/ext as strings, non-string keys, round trip."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from amps_emulator.protocol.filter import compile_filter
from amps_emulator.protocol.msgtypes import CodecError, MsgpackCodec

mp = MsgpackCodec()
enc = msgspec.msgpack.encode


def test_types_carried_and_bin_ext_as_strings():
    body = enc({"a": {"b": [1, 2.5, None, True]}, "bin": b"xy", "bad": b"\xff",
                "ext": msgspec.msgpack.Ext(5, b"e"), 7: "seven"})
    tree = mp.decode(body)
    assert tree == {"a": {"b": [1, 2.5, None, True]}, "bin": "xy", "bad": "\xff", "ext": "e",
                    "7": "seven"}
    assert compile_filter("/a/b = 2.5 AND /bin = 'xy' AND /7 = 'seven'")(tree)


@pytest.mark.parametrize("body", [enc([1, 2]), enc(5), enc({"a": 1}) + b"\x00", b"", b"\xc1"])
def test_not_one_map(body):
    with pytest.raises(CodecError):
        mp.decode(body)


def test_delta_merge_is_recursive():
    merged = mp.merge_delta(enc({"id": 1, "o": {"a": 1, "b": 2}, "l": [1]}),
                            enc({"o": {"b": 3}, "l": [2, 3]}))
    assert mp.decode(merged) == {"id": 1, "o": {"a": 1, "b": 3}, "l": [2, 3]}


def test_encode_refuses_big_integers():
    with pytest.raises(CodecError):
        mp.encode({"a": 1 << 70})


@given(st.binary(max_size=200))
def test_decode_raises_only_codec_error(body):
    try:
        mp.decode(body)
    except CodecError:
        pass


_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 63), 2 ** 64 - 1),
                     st.floats(allow_nan=False), st.text(max_size=8))
_values = st.recursive(_scalars, lambda i: st.one_of(st.lists(i, max_size=3),
                                                     st.dictionaries(st.text(max_size=4), i,
                                                                     max_size=3)),
                       max_leaves=10)


@given(st.dictionaries(st.text(max_size=4), _values, max_size=5))
def test_round_trip(tree):
    assert mp.decode(mp.encode(tree)) == tree
