"""The codecs one running server reads and writes bodies with, by topic key or type name.

A :class:`Bodies` belongs to one server: the composition root builds it from the config's
``MessageTypes`` (:func:`msgtypes.build_registry`) and hands it to what reads bodies (the
broker carries it for the fan-out, the message path, replay and conflation; the SOW gets the
registry and gives each typed topic its codec). Two servers in one process that declare the
same type name with different settings (a ``fix`` with ``FieldSeparator 124`` in one, the
default in the other) each read with their own. Nothing here is module state.

JSON keeps its own path: a topic key without a type (:func:`topics.qualify`) is read with
msgspec directly, as it always was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from amps_emulator.protocol.msgtypes import CodecError, MessageCodec, MessageTypeRegistry
from amps_emulator.protocol.topics import TYPE_SEP, type_of

__all__ = ["Bodies", "TreeDecoder", "decode_json"]

_json_decode = msgspec.json.decode
_json_encode = msgspec.json.encode


def decode_json(body: bytes) -> Any:
    """The tree of a JSON body (``None``: not JSON, or nested too deep to read)."""
    try:
        return _json_decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None


def decode_json_run(bodies: list) -> list[Any]:
    """:func:`decode_json` of each body (one call while every body is JSON)."""
    try:
        return list(map(_json_decode, bodies))
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return [decode_json(b) for b in bodies]


class Bodies:
    """One server's body readers and writers (see the module docstring)."""

    __slots__ = ("registry",)

    def __init__(self, registry: MessageTypeRegistry) -> None:
        self.registry = registry

    def codec(self, message_type: str) -> MessageCodec:
        """The codec of ``message_type`` (``MessageTypeConfigError`` if unknown)."""
        return self.registry.codec(message_type)

    def decode_typed(self, body: bytes, message_type: str) -> Any:
        """The field tree of ``body`` of ``message_type`` (``None``: malformed for it)."""
        if message_type == "json":
            return decode_json(body)
        try:
            return self.registry.codec(message_type).decode(bytes(body))
        except CodecError:
            return None

    def decode(self, body: bytes, topic: str) -> Any:
        """The tree of ``body`` published to the topic key ``topic``: JSON, or the codec of
        the topic's type (``None``: malformed for its type)."""
        if TYPE_SEP not in topic:
            return decode_json(body)
        return self.decode_typed(body, type_of(topic))

    def encoder(self, topic: str) -> Callable[[Any], bytes]:
        """What writes a body the server builds (a select list, a delta, a view record) for
        the topic key ``topic`` (the writer may raise :class:`CodecError`)."""
        if TYPE_SEP not in topic:
            return _json_encode
        return self.registry.codec(type_of(topic)).encode


class TreeDecoder:
    """A codec behind the ``decode(bytes)`` interface the SOW scans use (msgspec's)."""

    __slots__ = ("codec",)

    def __init__(self, codec: MessageCodec) -> None:
        self.codec = codec

    def decode(self, body: bytes) -> Any:
        """The tree (``None`` for a body malformed for the type, as JSON's scans read it)."""
        try:
            return self.codec.decode(bytes(body))
        except CodecError:
            return None
