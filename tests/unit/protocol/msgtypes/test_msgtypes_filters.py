"""The same compiled filters, unchanged, over the decoded body of every message type."""

from __future__ import annotations

import struct

import msgspec
import pytest

from amps_emulator.protocol.filter import compile_filter, evaluate_expression
from amps_emulator.protocol.msgtypes import MessageTypeDecl, build_registry
from amps_emulator.protocol.msgtypes.composite import join_parts

reg = build_registry([
    MessageTypeDecl("cl", module="composite-local", parts=("json", "binary")),
    MessageTypeDecl("quote", module="struct", fields=("/Symbol = 8s", "/Qty = i", "/Px = d")),
])
DOC = {"Symbol": "IBM", "Qty": 150, "Px": 24.5, "Side": "B"}

BODIES = {
    "json": msgspec.json.encode(DOC),
    "nvfix": b"Symbol=IBM\x01Qty=150\x01Px=24.5\x01Side=B\x01",
    "xml": b"<Order side='B'><Symbol>IBM</Symbol><Qty>150</Qty><Px>24.50</Px></Order>",
    "msgpack": msgspec.msgpack.encode(DOC),
    "bflat": reg.codec("bflat").encode(DOC),
    "cl": join_parts([msgspec.json.encode(DOC), b"\x00\x01"]),
    "quote": struct.pack("<8sid", b"IBM", 150, 24.5),
}
PREFIX = {"xml": "/Order", "cl": "/0"}


@pytest.mark.parametrize("mt", sorted(BODIES))
def test_filter_runs_unchanged(mt):
    p = PREFIX.get(mt, "")
    tree = reg.codec(mt).decode(BODIES[mt])
    assert compile_filter(f"{p}/Symbol = 'IBM' AND {p}/Qty > 100 AND {p}/Px BETWEEN 20 AND 25")(tree)
    assert not compile_filter(f"{p}/Qty > 150")(tree)
    assert compile_filter(f"{p}/Symbol LIKE '^IB' AND {p}/Missing IS NULL")(tree)
    assert evaluate_expression(f"{p}/Qty * {p}/Px", tree) == 3675.0


def test_fix_scenario_from_beyond_json():
    tree = reg.codec("fix").decode(b"35=D\x0111=A\x0138=150\x01")
    assert compile_filter("/35 = 'D' AND /38 > 100")(tree)


def test_xml_attribute_identifier():
    tree = reg.codec("xml").decode(BODIES["xml"])
    assert compile_filter("/Order/@side = 'B'")(tree)
