"""Registry: predeclared types, declarations from config values, refusals with file:line."""

from __future__ import annotations

import pytest

from amps_emulator.protocol.msgtypes import (
    PREDECLARED,
    FixCodec,
    MessageTypeConfigError,
    MessageTypeDecl,
    build_registry,
    refuse_custom_module,
)


def test_predeclared_types_served():
    reg = build_registry()
    for name in PREDECLARED:
        assert reg.codec(name).name == name
    assert "nvfix" in reg and "nope" not in reg


def test_redeclared_fix_separator_and_named_module():
    reg = build_registry([MessageTypeDecl("fix", field_separator=124),
                          MessageTypeDecl("pipe-nvfix", module="nvfix", field_separator=124)])
    fix = reg.codec("fix")
    assert isinstance(fix, FixCodec) and fix.decode(b"35=D|") == {"35": "D"}
    assert reg.codec("pipe-nvfix").name == "pipe-nvfix"
    assert reg.codec("pipe-nvfix").decode(b"a=1|") == {"a": 1}


def test_custom_module_refused_with_position():
    decl = MessageTypeDecl("mine", module="my-module", source="amps.xml:42")
    with pytest.raises(MessageTypeConfigError) as e:
        build_registry([decl])
    assert e.value.source == "amps.xml:42" and str(e.value).startswith("amps.xml:42: ")
    assert "cannot load" in str(refuse_custom_module(decl))


@pytest.mark.parametrize("decl, words", [
    (MessageTypeDecl("p", module="protobuf", proto_paths=(";no-such-dir",),
                     proto_file="a.proto", proto_type="ns.M", source="c.xml:3"),
     "is not a directory"),
    (MessageTypeDecl("p", module="protobuf", source="c.xml:3"), "ProtoPath, ProtoFile, Type"),
    (MessageTypeDecl("s", module="struct", source="c.xml:3"), "needs Field"),
    (MessageTypeDecl("s", module="struct", fields=("/a = q9",), source="c.xml:3"), "struct item"),
    (MessageTypeDecl("c", module="composite-local", parts=("later",), source="c.xml:3"),
     "unknown message type"),
    (MessageTypeDecl("c", module="composite-local", source="c.xml:3"), "nested"),
    (MessageTypeDecl("j", module="json", field_separator=1, source="c.xml:3"), "fix and nvfix"),
    (MessageTypeDecl("f", module="fix", field_separator=61, source="c.xml:3"), "'='"),
])
def test_config_errors(decl, words):
    with pytest.raises(MessageTypeConfigError) as e:
        build_registry([decl])
    assert words in str(e.value) and e.value.source == "c.xml:3"


def test_bson_is_served_by_pymongos_bson():
    import bson

    body = bson.encode({"a": 1})
    assert build_registry().codec("bson").decode(body) == {"a": 1}


def test_composite_parts_must_be_declared_first():
    reg = build_registry([MessageTypeDecl("pipe", module="nvfix", field_separator=124),
                          MessageTypeDecl("c", module="composite-local", parts=("pipe", "json"))])
    assert reg.codec("c").decode(b"\x00\x00\x00\x04a=1|") == {"0": {"a": 1}}
    with pytest.raises(MessageTypeConfigError, match="twice"):
        build_registry([MessageTypeDecl("x", module="json"), MessageTypeDecl("x", module="json")])


def test_the_modules_refused_as_view_types_are_the_codecs_without_views(tmp_path):
    from amps_emulator.protocol.msgtypes import BUILTIN_MODULES, VIEWLESS_MODULES

    (tmp_path / "r.proto").write_text('syntax = "proto2";\nmessage R { optional string k = 1; }\n')
    reg = build_registry([
        MessageTypeDecl("c-local", module="composite-local", parts=("json",)),
        MessageTypeDecl("c-global", module="composite-global", parts=("json",)),
        MessageTypeDecl("pb", module="protobuf", proto_paths=(str(tmp_path),),
                        proto_file="r.proto", proto_type="R"),
        MessageTypeDecl("st", module="struct", fields=("/k = 4s",))])
    by_module = {"composite-local": "c-local", "composite-global": "c-global", "protobuf": "pb",
                 "struct": "st"}
    without_views = {m for m in BUILTIN_MODULES
                     if not reg.codec(by_module.get(m, m)).capabilities.views}
    assert without_views == set(VIEWLESS_MODULES)
