"""protobuf codec: the user's .proto compiled at start-up, AMPS field addressing, delta (v2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amps_emulator.protocol.filter import compile_filter
from amps_emulator.protocol.msgtypes import (
    CodecError,
    MessageTypeConfigError,
    MessageTypeDecl,
    UnsupportedByType,
    build_registry,
)

pytest.importorskip("grpc_tools")

COMMON = """syntax = "proto2";
package common;
message Person { required string customer_id = 1; optional int32 personID = 2; }
"""

ORDERS2 = """syntax = "proto2";
package shop;
import "lib/common.proto";
enum Side { BUY = 1; SELL = 2; }
message Order {
  required string id = 1;
  optional int64 qty = 2;
  optional double px = 3;
  optional Side side = 4;
  optional string venue = 5 [default = "XNYS"];
  optional common.Person person = 6;
  repeated string tags = 7;
  optional bytes blob = 8;
  map<string, int32> legs = 9;
  oneof payload { string note = 10; common.Person payer = 11; }
}
"""

ORDERS3 = """syntax = "proto3";
package shop3;
message Order { string id = 1; int64 qty = 2; optional double px = 3; repeated int32 fills = 4; }
"""


@pytest.fixture(scope="module")
def protos(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("protos")
    (d / "lib").mkdir()
    (d / "lib" / "common.proto").write_text(COMMON)
    (d / "orders.proto").write_text(ORDERS2)
    (d / "orders3.proto").write_text(ORDERS3)
    (d / "broken.proto").write_text('syntax = "proto3";\nmessage X {\n  int32 a = ;\n}\n')
    return d


@pytest.fixture(scope="module")
def reg(protos):
    return build_registry([
        MessageTypeDecl("orders", module="protobuf", proto_paths=(f";{protos}",),
                        proto_file="orders.proto", proto_type="shop.Order"),
        MessageTypeDecl("orders-aliased", module="protobuf",
                        proto_paths=(f"archive;{protos}", f";{protos}"),
                        proto_file="archive/orders.proto", proto_type="shop.Order"),
        MessageTypeDecl("orders3", module="protobuf", proto_paths=(str(protos),),
                        proto_file="orders3.proto", proto_type="shop3.Order"),
    ])


def _order(reg, **fields):
    return reg.codec("orders").encode(fields)


def test_field_addressing_as_amps_documents(reg):
    c = reg.codec("orders")
    body = c.encode({"id": "A1", "qty": 150, "px": 2.5, "side": "SELL",
                     "person": {"customer_id": "42", "personID": 1001}, "tags": ["x", "y"],
                     "blob": "raw", "legs": {"l1": 3}, "payer": {"customer_id": "7"}})
    tree = c.decode(body)
    assert tree == {"id": "A1", "qty": 150, "px": 2.5, "side": "SELL", "venue": "XNYS",
                    "person": {"customer_id": "42", "personID": 1001}, "tags": ["x", "y"],
                    "blob": "raw", "legs": {"l1": 3}, "payer": {"customer_id": "7"}}
    for flt in ("/person/personID > 1000", "/side = 'SELL'", "/qty > 100", "/tags = 'y'",
                "/payer/customer_id = '42' OR /payer IS NOT NULL", "/note IS NULL",
                "/venue = 'XNYS'", "/legs/l1 = 3"):
        assert compile_filter(flt)(tree), flt
    assert c.key_values(body, [("id",), ("person", "personID")]) == ["A1", "1001"]


def test_an_alias_maps_the_proto_file_and_imports(reg):
    body = _order(reg, id="B", qty=1)
    assert reg.codec("orders-aliased").decode(body)["id"] == "B"


def test_proto2_delta_merges_only_fields_set(reg):
    c = reg.codec("orders")
    old = c.encode({"id": "A", "qty": 10, "px": 1.5, "tags": ["a", "b"],
                    "person": {"customer_id": "1", "personID": 5}, "legs": {"x": 1, "y": 2}})
    delta = c.encode({"id": "A", "qty": 20, "tags": ["c"], "person": {"customer_id": "1",
                                                                       "personID": 6},
                      "legs": {"y": 3}})
    assert c.decode(c.merge_delta(old, delta)) == {
        "id": "A", "qty": 20, "px": 1.5, "venue": "XNYS", "tags": ["c"],
        "person": {"customer_id": "1", "personID": 6}, "legs": {"x": 1, "y": 3}}
    assert c.capabilities.delta and not c.capabilities.select and not c.capabilities.views


def test_proto3_reads_defaults_and_has_no_delta(reg):
    c = reg.codec("orders3")
    body = c.encode({"id": "Z"})
    assert c.decode(body) == {"id": "Z", "qty": 0}
    assert compile_filter("/qty = 0 AND /px IS NULL")(c.decode(body))
    with pytest.raises(UnsupportedByType):
        c.merge_delta(body, body)
    assert c.capabilities.select and not c.capabilities.aggregates
    assert not c.capabilities.amps_topics


def test_a_bad_proto_fails_with_file_line_and_why(protos):
    with pytest.raises(MessageTypeConfigError) as e:
        build_registry([MessageTypeDecl("x", module="protobuf", proto_paths=(str(protos),),
                                        proto_file="broken.proto", proto_type="X",
                                        source="amps.xml:12")])
    msg = str(e.value)
    assert msg.startswith("amps.xml:12: ") and "broken.proto:3:" in msg and "Expected" in msg


@pytest.mark.parametrize("file, type_name, words", [
    ("orders.proto", "shop.Nope", "is not a message"),
    ("missing.proto", "shop.Order", "missing.proto"),
])
def test_unknown_type_or_file(protos, file, type_name, words):
    with pytest.raises(MessageTypeConfigError, match=words):
        build_registry([MessageTypeDecl("x", module="protobuf", proto_paths=(str(protos),),
                                        proto_file=file, proto_type=type_name)])


def test_encode_refuses_unknown_fields(reg):
    with pytest.raises(CodecError):
        reg.codec("orders").encode({"nope": 1})
    with pytest.raises(CodecError):
        reg.codec("orders").encode({"side": "SIDEWAYS"})


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=200))
def test_decode_raises_only_codec_error(reg, body):
    for name in ("orders", "orders3"):
        try:
            reg.codec(name).decode(body)
        except CodecError:
            pass


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(id_=st.text(max_size=6), qty=st.integers(-(2 ** 63), 2 ** 63 - 1),
       px=st.floats(allow_nan=False), tags=st.lists(st.text(max_size=3), max_size=3),
       side=st.sampled_from(["BUY", "SELL"]))
def test_round_trip(reg, id_, qty, px, tags, side):
    c = reg.codec("orders")
    tree = {"id": id_, "qty": qty, "px": px, "side": side, "venue": "XNYS"}
    if tags:
        tree["tags"] = tags
    assert c.decode(c.encode(tree)) == tree


def _varint(n: int) -> bytes:
    out = b""
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([low])
        out += bytes([low | 0x80])


_wire_fields = st.lists(st.tuples(st.integers(1, 12), st.sampled_from([0, 1, 2, 5]),
                                  st.integers(0, 2 ** 64 - 1), st.binary(max_size=12)),
                        max_size=8)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields=_wire_fields)
def test_well_framed_wire_fields_raise_only_codec_error(reg, fields):
    # valid tags and lengths reach the field readers (strings that are not UTF-8, values of
    # the wrong wire type, unknown enum numbers); decode and delta merge stay CodecError-only
    body = b""
    for num, wire, n, blob in fields:
        body += _varint(num << 3 | wire)
        body += {0: _varint(n), 1: n.to_bytes(8, "little"), 5: (n & 0xFFFFFFFF).to_bytes(4, "little"),
                 2: _varint(len(blob)) + blob}[wire]
    for name in ("orders", "orders3"):
        c = reg.codec(name)
        try:
            c.decode(body)
            if c.capabilities.delta:
                c.merge_delta(body, body)
        except CodecError:
            pass


def test_encode_refuses_values_out_of_range(reg):
    with pytest.raises(CodecError):
        reg.codec("orders").encode({"id": "x", "person": {"customer_id": "1", "personID": 1 << 40}})
