"""``MessageTypes/MessageType``: the declarations the codec registry is built from.

Each element becomes a :class:`protocol.msgtypes.MessageTypeDecl` carrying its file:line, and
the registry is built here once (:func:`protocol.msgtypes.build_registry`), so that every
declaration the emulator cannot serve -- a custom ``.so`` ``Module``
(:func:`protocol.msgtypes.refuse_custom_module`), a composite over an unknown part, a
separator out of range, a ``.proto`` that does not compile, protobuf without its libraries --
is a config error with its position, at ``--verify-config`` as at start-up. The server
builds its own registry from the same declarations (:attr:`Config.message_type_decls`).
"""

from __future__ import annotations

import functools

from amps_emulator.protocol.msgtypes import (
    MessageTypeConfigError,
    MessageTypeDecl,
    MessageTypeRegistry,
    build_registry,
)

from .schema import Ctx
from .xmlload import Node

__all__ = ["read_message_types"]

_SEPARATORS = {"FieldSeparator": "field_separator", "HeaderSeparator": "header_separator",
               "MessageSeparator": "message_separator"}
#: AMPSVersionCompliance values: AMPS 2.X's tags, 4.X's (the default), 5.X's unified ones
_COMPLIANCE = ("2", "4", "5")
_NOTED = {
    "EarlyTerminationOptimization": "the emulator's JSON reader keeps the last value of a "
                                    "duplicated field",
}


def _decl(node: Node, ctx: Ctx) -> MessageTypeDecl | None:
    name: str | None = None
    module: str | None = None
    seps: dict[str, int] = {}
    parts: list[str] = []
    proto_paths: list[str] = []
    proto_file: str | None = None
    proto_type: str | None = None
    fields: list[str] = []
    options: str | None = None
    compliance: int | None = None
    ok = True
    for c in node.children:
        tag, text = c.tag, c.text
        if tag == "Name":
            name = text
        elif tag == "Module":
            module = text
        elif tag in _SEPARATORS:
            try:
                seps[_SEPARATORS[tag]] = int(text, 10)
            except ValueError:
                ctx.err(c, f"<{tag}> must be a decimal ASCII code, not {text!r}")
                ok = False
        elif tag == "MessageType":
            if not text:
                ctx.err(c, "a nested <MessageType> names a part type")
                ok = False
            parts.append(text)
        elif tag == "ProtoPath":
            proto_paths.append(text)
        elif tag == "ProtoFile":
            proto_file = text
        elif tag == "Type":
            proto_type = text
        elif tag == "Field":
            fields.append(text)
        elif tag == "Options":
            options = text
        elif tag == "AMPSVersionCompliance":
            if text not in _COMPLIANCE:
                ctx.err(c, f"<AMPSVersionCompliance> must be 2, 4 or 5, not {text!r}")
                ok = False
                continue
            compliance = int(text)
            if compliance == 2:
                ctx.warn(c, "<AMPSVersionCompliance>2: AMPS 2.X's FIX tags are not documented; "
                            "/AMPS/SOWStats is written with the 4.X tags")
        elif tag in _NOTED:
            ctx.warn(c, f"<{tag}> is ignored: {_NOTED[tag]}")
        else:
            ctx.err(c, f"unknown element <{tag}> in <MessageType>")
            ok = False
    if not name:
        ctx.err(node, "<MessageType> needs a <Name>")
        return None
    if not ok:
        return None
    return MessageTypeDecl(
        name=name, module=module, parts=tuple(parts), proto_paths=tuple(proto_paths),
        proto_file=proto_file, proto_type=proto_type, fields=tuple(fields), options=options,
        version_compliance=compliance, source=f"{node.file}:{node.line}", **seps)


def read_message_types(root: Node, ctx: Ctx) -> tuple[MessageTypeDecl, ...]:
    """Every ``MessageTypes/MessageType`` of the config, checked by building the registry;
    each declaration that cannot be served is an error at its element."""
    decls: list[MessageTypeDecl] = []
    nodes: list[Node] = []
    for section in root.children:
        if section.tag != "MessageTypes":
            continue
        for mt in section.children:
            if mt.tag != "MessageType":
                ctx.err(mt, f"unknown element <{mt.tag}> in <MessageTypes>")
                continue
            d = _decl(mt, ctx)
            if d is not None:
                decls.append(d)
                nodes.append(mt)
    reg = MessageTypeRegistry()
    kept: list[MessageTypeDecl] = []
    for d, n in zip(decls, nodes, strict=True):
        try:
            reg.declare(d)
        except MessageTypeConfigError as e:
            ctx.err(n, e.reason)
            continue
        kept.append(d)
    return tuple(kept)


@functools.lru_cache(maxsize=8)
def registry_for_config_file(path: str) -> MessageTypeRegistry:
    """A registry with the ``MessageTypes`` of the AMPS config file at ``path`` (loaded and
    checked once per process; a bad config raises ``ConfigError`` naming file and line)."""
    from amps_emulator.config.loader import load_config

    return build_registry(load_config(path).message_type_decls)
