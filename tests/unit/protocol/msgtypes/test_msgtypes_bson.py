"""bson codec (pymongo's bson): typed values, BSON-only types as text/numbers, round trip."""

from __future__ import annotations

import datetime

import bson
import pytest
from bson.binary import Binary
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.objectid import ObjectId
from hypothesis import given
from hypothesis import strategies as st

from amps_emulator.protocol.filter import compile_filter
from amps_emulator.protocol.msgtypes import CodecError, build_registry

codec = build_registry().codec("bson")


def test_is_pymongos_bson():
    assert hasattr(bson, "decode") and hasattr(bson, "encode")


def test_types_carried_and_bson_types_mapped():
    oid = ObjectId("0123456789abcdef01234567")
    when = datetime.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.UTC)
    body = bson.encode({"a": {"b": [1, 2.5, None, True]}, "big": Int64(1 << 40), "oid": oid,
                        "t": when, "d": Decimal128("12.50"), "bin": Binary(b"xy", 0),
                        "raw": Binary(b"\xff", 5)})
    tree = codec.decode(body)
    assert tree == {"a": {"b": [1, 2.5, None, True]}, "big": 1 << 40,
                    "oid": "0123456789abcdef01234567", "t": 1704164645678, "d": "12.50",
                    "bin": "xy", "raw": "\xff"}
    assert compile_filter("/a/b = 2.5 AND /big > 1000 AND /d > 12 AND /t > 0")(tree)
    assert codec.key_values(body, [("oid",), ("big",)]) == ["0123456789abcdef01234567",
                                                            str(1 << 40)]


@pytest.mark.parametrize("body", [b"", b"\x05\x00\x00\x00", bson.encode({"a": 1}) + b"\x00",
                                  b"\x05\x00\x00\x00\x01", b"\xff\xff\xff\x7f\x00"])
def test_malformed(body):
    with pytest.raises(CodecError):
        codec.decode(body)


def test_delta_merge_is_recursive():
    merged = codec.merge_delta(bson.encode({"id": 1, "o": {"a": 1, "b": 2}, "l": [1]}),
                               bson.encode({"o": {"b": 3}, "l": [2, 3]}))
    assert codec.decode(merged) == {"id": 1, "o": {"a": 1, "b": 3}, "l": [2, 3]}


@pytest.mark.parametrize("tree", [{"a": 1 << 70}, {"a\x00b": 1}, [1, 2], {"s": "\ud800"}])
def test_encode_refuses_what_bson_cannot_carry(tree):
    with pytest.raises(CodecError):
        codec.encode(tree)


@given(st.binary(max_size=300))
def test_decode_raises_only_codec_error(body):
    try:
        codec.decode(body)
    except CodecError:
        pass


@given(st.binary(max_size=60))
def test_decode_of_a_framed_document_raises_only_codec_error(inner):
    # a valid length prefix and terminator around arbitrary element bytes reaches the parser
    body = (len(inner) + 5).to_bytes(4, "little") + inner + b"\x00"
    try:
        codec.decode(body)
    except CodecError:
        pass


_keys = st.text(max_size=4).filter(lambda k: "\x00" not in k)
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 63), 2 ** 63 - 1),
                     st.floats(allow_nan=False), st.text(max_size=8))
_values = st.recursive(_scalars, lambda i: st.one_of(st.lists(i, max_size=3),
                                                     st.dictionaries(_keys, i, max_size=3)),
                       max_leaves=10)


@given(st.dictionaries(_keys, _values, max_size=5))
def test_round_trip(tree):
    assert codec.decode(codec.encode(tree)) == tree
