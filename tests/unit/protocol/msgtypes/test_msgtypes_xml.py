"""xml codec: element paths, @attributes, typing, safety against entities, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amps_emulator.protocol.filter import compile_filter
from amps_emulator.protocol.msgtypes import CodecError, XmlCodec

xml = XmlCodec()


def test_paths_attributes_and_typing():
    tree = xml.decode(b'<?xml version="1.0"?><Order id="5" update="full">'
                      b"<Symbol>IBM</Symbol><Qty>150</Qty><Px>24.50</Px><Note/></Order>")
    assert tree == {"Order": {"@id": 5, "@update": "full", "Symbol": "IBM", "Qty": 150,
                              "Px": 24.5, "Note": None}}
    assert compile_filter("/Order/@update = 'full' AND /Order/Qty > 100")(tree)
    assert compile_filter("/Order/@id = 5")(tree)
    assert not compile_filter("/Order/@update = 'partial'")(tree)


def test_sample_xml_key_and_scenario_6():
    body = b"<hi><messageNumber>1</messageNumber><t>v</t></hi>"
    assert xml.key_values(body, [("hi", "messageNumber")]) == ["1"]
    assert compile_filter("/hi/t = 'v'")(xml.decode(body))


def test_repeated_elements_text_and_whitespace():
    tree = xml.decode(b"<a>\n  <b>1</b>\n  <b>2</b>\n  <c x='1'>t</c>\n</a>")
    assert tree == {"a": {"b": [1, 2], "c": {"@x": 1, "#text": "t"}}}
    assert compile_filter("/a/b = 2")(tree)
    assert compile_filter("[/a/c/#text] = 't'")(tree)


@pytest.mark.parametrize("body", [
    b'<!DOCTYPE r [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]><r>&b;</r>',
    b'<!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]><r>&x;</r>',
    b'<!DOCTYPE r SYSTEM "http://example.invalid/r.dtd"><r/>',
    b"<r>&undefined;</r>", b"<a><b></a>", b"", b"<a/><b/>", b"not xml",
    b"<a>" * 300 + b"</a>" * 300,
])
def test_refused_and_malformed(body):
    with pytest.raises(CodecError):
        xml.decode(body)


def test_delta_merge_keeps_text():
    merged = xml.merge_delta(b"<hi><messageNumber>1</messageNumber><px>1.50</px><t>v</t></hi>",
                             b"<hi><px>2.10</px><n a='x'/></hi>")
    assert xml.text_tree(merged) == {"hi": {"messageNumber": "1", "px": "2.10", "t": "v",
                                            "n": {"@a": "x"}}}


def test_encode_refuses():
    for tree in ({"a": 1, "b": 2}, {"a b": 1}, {"a": [[1]]}, {"a": "\x00"}, 5):
        with pytest.raises(CodecError):
            xml.encode(tree)


@given(st.binary(max_size=200))
def test_decode_raises_only_codec_error(body):
    try:
        xml.decode(body)
    except CodecError:
        pass


@given(st.text(max_size=60))
def test_decode_raises_only_codec_error_on_text(text):
    try:
        xml.decode(("<r a='1'>" + text + "</r>").encode("utf-8", "surrogatepass"))
    except CodecError:
        pass


# trees in decode's image: element dicts always have a child element
_names = st.sampled_from(["a", "b", "Order", "x-y", "n.1", "ns:e"])
_text = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=8).filter(
    lambda s: s.strip() == s and isinstance(xml.decode(b"<r>" + s.replace("&", "&amp;").replace(
        "<", "&lt;").encode() + b"</r>")["r"], str))
_scalar = st.one_of(st.none(), st.integers(-(2 ** 63), 2 ** 63 - 1),
                    st.floats(allow_nan=False, allow_infinity=False), _text)


def _elements(inner):
    attrs = st.dictionaries(_names.map(lambda n: "@" + n), _scalar.filter(lambda v: v is not None),
                            max_size=2)
    children = st.dictionaries(_names, st.one_of(inner, st.lists(inner, min_size=2, max_size=3)),
                               min_size=1, max_size=3)
    return st.builds(lambda a, c: {**a, **c}, attrs, children)


_trees = st.recursive(_scalar, _elements, max_leaves=10)


@given(_names, _trees)
def test_round_trip(root, value):
    tree = {root: value}
    assert xml.decode(xml.encode(tree)) == tree
