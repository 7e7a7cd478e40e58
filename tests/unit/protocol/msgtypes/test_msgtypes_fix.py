"""fix / nvfix codecs: framing, AMPS value typing, delta merge on bytes, filters, samples."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amps_emulator.protocol.filter import compile_filter
from amps_emulator.protocol.msgtypes import CodecError, FixCodec, NvfixCodec

SOH = "\x01"
fix = FixCodec()
nvfix = NvfixCodec()


def b(text: str) -> bytes:
    return text.encode()


def test_value_typing_as_amps_infers_it():
    tree = fix.decode(b("35=D\x0138=150\x0144=24.50\x0111=007\x0158=\x0155=IBM\x01"))
    assert tree == {"35": "D", "38": 150, "44": 24.5, "11": "007", "58": None, "55": "IBM"}
    # the text of each value survives for SOW keys: 007 and 7 are different keys
    assert fix.key_values(b("11=007\x01"), [("11",)]) == ["007"]
    assert fix.key_values(b("11=7\x01"), [("11",)]) == ["7"]
    assert fix.key_values(b("58=\x01"), [("58",)]) == [None]


def test_final_separator_optional_and_empty_fields_skipped():
    assert fix.decode(b"35=D\x01\x0155=IBM") == {"35": "D", "55": "IBM"}
    assert fix.decode(b"") == {}


def test_repeated_tag_is_an_array_and_filters_see_any_element():
    tree = fix.decode(b("448=A\x01448=B\x01448=C\x01"))
    assert tree == {"448": ["A", "B", "C"]}
    assert compile_filter("/448 = 'B'")(tree)
    assert not compile_filter("/448 = 'D'")(tree)


@pytest.mark.parametrize("body", [b"35", b"35=D\x01junk\x01", b"=x\x01", b"Symbol=IBM\x01"])
def test_malformed_fix(body):
    with pytest.raises(CodecError):
        fix.decode(body)


def test_nvfix_names_and_values_with_equals():
    tree = nvfix.decode(b("messageNumber=1\x01expr=a=b\x01Symbol=IBM\x01"))
    assert tree == {"messageNumber": 1, "expr": "a=b", "Symbol": "IBM"}
    assert compile_filter("/Symbol = 'IBM' AND /messageNumber = 1")(tree)


def test_field_separator_option():
    pipe = FixCodec(field_separator=ord("|"))
    tree = pipe.decode(b"35=D|55=IBM|")
    assert compile_filter("/55 = 'IBM'")(tree)
    assert pipe.encode(tree) == b"35=D|55=IBM|"
    with pytest.raises(ValueError):
        FixCodec(field_separator=ord("="))


def test_beyond_json_scenario_4_filter_and_numeric_order():
    f = compile_filter("/35 = 'D' AND /38 > 100")
    a = fix.decode(b("35=D\x0111=A\x0138=150\x01"))
    c = fix.decode(b("35=D\x0111=B\x0138=99\x01"))
    assert f(a) and not f(c)
    assert sorted([c, a], key=lambda t: t["38"], reverse=True)[0]["11"] == "A"
    # an identifier fix can never produce is legal and does not match
    assert not compile_filter("/OrderQty > 1")(a)


def test_delta_merge_keeps_bytes_and_order():
    old = b("messageNumber=1\x01a=1\x01b=2\x01")
    merged = nvfix.merge_delta(old, b("messageNumber=1\x01b=3\x01"))
    assert merged == b("messageNumber=1\x01a=1\x01b=3\x01")
    # text kept exactly (a float spelled 3.10 stays 3.10), new tags appended in delta order
    merged = fix.merge_delta(b("35=D\x0144=1.5\x01"), b("44=3.10\x01999=x\x01"))
    assert merged == b("35=D\x0144=3.10\x01999=x\x01")
    # a repeated tag in the delta replaces all stored occurrences where the first one was
    merged = fix.merge_delta(b("1=a\x01448=A\x01448=B\x012=b\x01"), b("448=C\x01"))
    assert merged == b("1=a\x01448=C\x012=b\x01")


def test_encode_refuses_what_fix_cannot_carry():
    for tree in ({"35": {"x": 1}}, {"Symbol": "IBM"}, {"35": "a\x01b"}, [1]):
        with pytest.raises(CodecError):
            fix.encode(tree)
    with pytest.raises(CodecError):
        nvfix.encode({"a=b": 1})


def test_sample_program_bodies():
    """The bodies 60East's FIX/NVFIX builder samples publish, built by the official client."""
    AMPS = pytest.importorskip("AMPS")
    fb = AMPS.FIXBuilder()
    fb.append(0, "data")
    fb.append(1, "more data")
    fb.append(2, "123")
    body = fb.get_string().encode()
    tree = fix.decode(body)
    assert tree == {"0": "data", "1": "more data", "2": 123}
    assert dict(AMPS.FIXShredder().to_map(body.decode())) == {0: "data", 1: "more data", 2: "123"}
    nb = AMPS.NVFIXBuilder()
    nb.append("sample", "data")
    nb.append("even", "more data")
    nb.append("1", "123")
    tree = nvfix.decode(nb.get_string().encode())
    assert tree == {"sample": "data", "even": "more data", "1": 123}
    assert compile_filter("/even LIKE 'more'")(tree)
    assert nvfix.key_values(nb.get_string().encode(), [("messageNumber",)]) == [None]


# ---- properties ---------------------------------------------------------------------------

@given(st.binary(max_size=200))
def test_decode_raises_only_codec_error(body):
    for codec in (fix, nvfix):
        try:
            codec.decode(body)
            codec.text_tree(body)
        except CodecError:
            pass


_texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01"),
                 min_size=1, max_size=8)
_scalar = st.one_of(
    st.integers(-(2 ** 63), 2 ** 63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    _texts.filter(lambda s: not isinstance(fix.decode(b"1=" + s.encode()).get("1"), (int, float))),
    st.none(),
)
_value = st.one_of(_scalar, st.lists(_scalar, min_size=2, max_size=3))


@given(st.dictionaries(st.integers(0, 9999).map(str), _value, max_size=6))
def test_fix_round_trip(tree):
    assert fix.decode(fix.encode(tree)) == tree


@given(st.dictionaries(_texts.filter(lambda s: "=" not in s), _value, max_size=6))
def test_nvfix_round_trip(tree):
    assert nvfix.decode(nvfix.encode(tree)) == tree


@given(st.binary(max_size=80), st.binary(max_size=80))
def test_merge_raises_only_codec_error_and_merges_fields(old, delta):
    try:
        merged = nvfix.merge_delta(old, delta)
    except CodecError:
        return
    o, d, m = nvfix.text_tree(old), nvfix.text_tree(delta), nvfix.text_tree(merged)
    assert isinstance(o, dict) and isinstance(d, dict)
    assert m == {**o, **d}
