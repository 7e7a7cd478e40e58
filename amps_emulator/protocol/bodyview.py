"""Bodies of any message type shown to people and tools: readable text and parsed fields.

The admin console, the command-line clients and the Spark sources show what a topic holds.
JSON bodies show as themselves.  For the other types:

* :func:`readable_text`: the text types (fix, nvfix, xml) as their text, a fix or nvfix
  type's field separator (``0x01`` by default) shown as ``|`` (the habit of FIX logs);
  every other type (bson, msgpack, bflat, protobuf, struct, composite, binary) as
  ``base64:`` and the bytes in Base64, so no byte is lost or hides a control character;
* :func:`fields` / :func:`fields_json`: the field tree the type's codec reads (what filters
  address), or ``None`` for a type with no fields (binary), a type this process does not know,
  or a body the type cannot read.

The codecs come from a registry: the running server's (``broker.bodies.registry``), one a tool
built from a config's ``MessageTypes`` (:func:`registry_from_config`), or by default the
predeclared types only.
"""

from __future__ import annotations

import base64
import functools
from typing import TYPE_CHECKING

import msgspec

from amps_emulator.protocol.msgtypes import (
    BinaryCodec,
    CodecError,
    FixCodec,
    JsonCodec,
    MessageCodec,
    MessageTypeConfigError,
    MessageTypeRegistry,
    NvfixCodec,
    Tree,
    XmlCodec,
    build_registry,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from amps_emulator.protocol.msgtypes import MessageTypeDecl

__all__ = ["readable_text", "fields", "fields_json", "is_text_type", "registry_from_config"]

_encode = msgspec.json.encode


@functools.lru_cache(maxsize=1)
def _predeclared() -> MessageTypeRegistry:
    """The registry of the predeclared types (what a tool without a config knows)."""
    return build_registry()


def _codec(message_type: str, registry: MessageTypeRegistry | None) -> MessageCodec | None:
    try:
        return (registry if registry is not None else _predeclared()).codec(message_type)
    except MessageTypeConfigError:
        return None


def is_text_type(message_type: str, registry: MessageTypeRegistry | None = None) -> bool:
    """Whether bodies of the type are text (json, fix, nvfix, xml and types declared on them)."""
    c = _codec(message_type, registry)
    return isinstance(c, (JsonCodec, FixCodec, NvfixCodec, XmlCodec))


def readable_text(body: bytes, message_type: str,
                  registry: MessageTypeRegistry | None = None) -> str:
    """``body`` as text a person can read (see the module's rules)."""
    raw = bytes(body)
    c = _codec(message_type, registry)
    if isinstance(c, (FixCodec, NvfixCodec)):  # the type's field separator shown as '|'
        return raw.decode("utf-8", "replace").replace(chr(c.field_separator), "|")
    if isinstance(c, (JsonCodec, XmlCodec)):
        return raw.decode("utf-8", "replace")
    return "base64:" + base64.b64encode(raw).decode("ascii")


def fields(body: bytes, message_type: str,
           registry: MessageTypeRegistry | None = None) -> Tree | None:
    """The field tree of ``body``, or ``None`` (no fields, unknown type, unreadable body)."""
    c = _codec(message_type, registry)
    if c is None or isinstance(c, BinaryCodec):
        return None
    try:
        return c.decode(bytes(body))
    except CodecError:
        return None


def fields_json(body: bytes, message_type: str,
                registry: MessageTypeRegistry | None = None) -> str | None:
    """:func:`fields` as compact JSON text (``None`` as ``None``)."""
    tree = fields(body, message_type, registry)
    return None if tree is None else _encode(tree).decode("utf-8")


def registry_from_config(decls: Sequence[MessageTypeDecl]) -> MessageTypeRegistry:
    """A registry with a config's ``MessageTypes`` declarations (``Config.message_type_decls``)."""
    return build_registry(decls)
