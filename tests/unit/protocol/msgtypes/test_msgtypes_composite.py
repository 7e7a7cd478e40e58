"""composite-local / composite-global codecs: framing, /0/field, part-wise delta merge."""

from __future__ import annotations

import array
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amps_emulator.protocol.filter import compile_filter
from amps_emulator.protocol.msgtypes import (
    CodecError,
    MessageTypeDecl,
    UnsupportedByType,
    build_registry,
)
from amps_emulator.protocol.msgtypes.composite import join_parts, split_parts

reg = build_registry([
    MessageTypeDecl("composite-json-binary", module="composite-local", parts=("json", "binary")),
    MessageTypeDecl("cg", module="composite-global", parts=("json", "json")),
    MessageTypeDecl("cl-fix-xml", module="composite-local", parts=("nvfix", "xml")),
])
local = reg.codec("composite-json-binary")
glob = reg.codec("cg")


def sample_body(count: int) -> bytes:
    """What 60East's CompositeMessagePublisher sends (its array.tostring() is tobytes() now)."""
    data = array.array("d", [1.0, 1.0])
    for d in range(2, 50):
        data.append(float(d + data[d - 2]))
    doc = {"binary_type": "double", "size": len(data), "number": count, "message": "Hi, world!"}
    return join_parts([json.dumps(doc).encode(), data.tobytes()])


def test_sample_programs_filter_selects_3_6_9():
    f = compile_filter("/0/number % 3 == 0")
    got = [n for n in range(1, 10) if f(local.decode(sample_body(n)))]
    assert got == [3, 6, 9]
    tree = local.decode(sample_body(3))
    assert set(tree) == {"0"}  # the binary part gives nothing
    parts, rest = split_parts(sample_body(3))
    assert len(parts) == 2 and len(parts[1]) == 400 and rest == b""
    assert local.key_values(sample_body(4), [("0", "number")]) == ["4"]


def test_official_builder_framing_agrees():
    AMPS = pytest.importorskip("AMPS")
    b = AMPS.CompositeMessageBuilder()
    b.append('{"id":7}')
    b.append("raw")
    assert local.decode(b.get_data()) == {"0": {"id": 7}}
    assert split_parts(b.get_data())[0] == [b'{"id":7}', b"raw"]


def test_delta_empty_part_keeps_stored_part():
    old = join_parts([b'{"id":1,"a":1}', b"\x00" * 8])
    merged = local.merge_delta(old, join_parts([b'{"id":1,"a":2,"b":3}', b""]))
    assert split_parts(merged)[0] == [b'{"id":1,"a":2,"b":3}', b"\x00" * 8]
    merged = local.merge_delta(old, join_parts([b"", b"\x01"]))
    assert split_parts(merged)[0] == [b'{"id":1,"a":1}', b"\x01"]


def test_global_merges_parts_at_root():
    tree = glob.decode(join_parts([b'{"m":"a","x":1}', b'{"m":"b"}']))
    assert tree == {"m": ["a", "b"], "x": 1}
    assert compile_filter("/m = 'b'")(tree)
    with pytest.raises(UnsupportedByType):
        glob.merge_delta(b"", b"")
    with pytest.raises(UnsupportedByType):
        glob.encode(tree)


def test_other_part_types_and_encode():
    c = reg.codec("cl-fix-xml")
    body = join_parts([b"a=1\x01", b"<r><s>x</s></r>"])
    assert c.decode(body) == {"0": {"a": 1}, "1": {"r": {"s": "x"}}}
    assert c.decode(c.encode(c.decode(body))) == c.decode(body)
    with pytest.raises(CodecError):
        c.encode({"2": {}})


@pytest.mark.parametrize("body", [b"\x00\x00", b"\x00\x00\x00\x05abc"])
def test_truncated_frames(body):
    with pytest.raises(CodecError):
        local.decode(body)


@given(st.binary(max_size=120))
def test_decode_raises_only_codec_error(body):
    for codec in (local, glob, reg.codec("cl-fix-xml")):
        try:
            codec.decode(body)
        except CodecError:
            pass


@given(st.lists(st.binary(max_size=20), max_size=5), st.binary(max_size=10))
def test_framing_round_trip(parts, rest):
    body = join_parts(parts)
    assert split_parts(body) == (parts, b"")
    if rest:
        assert split_parts(join_parts(parts, join_parts([rest])), len(parts)) == (
            parts, join_parts([rest]))


_json = st.dictionaries(st.text(max_size=3), st.one_of(st.integers(-5, 5), st.text(max_size=3)),
                        max_size=3)


@given(_json)
def test_round_trip(doc):
    tree = {"0": doc}
    assert local.decode(local.encode(tree)) == tree
