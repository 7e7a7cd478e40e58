"""The codecs a running server reads bodies with, by message type name.

The server installs its instance's registry (:func:`install`) when it starts; the layers
that read bodies without a server at hand (the SOW topic, the fan-out, replay) ask here for
the tree of a body of a type (:func:`decode_or_none`). JSON never comes here: its path reads
bodies with msgspec directly, as it always did.

The table is per process: two servers in one process that declare the same type name with
different settings (a ``fix`` with ``FieldSeparator 124`` in one, the default in the other)
share the last one installed.
"""

from __future__ import annotations

from typing import Any

from amps_emulator.protocol.msgtypes import CodecError, MessageCodec, MessageTypeRegistry
from amps_emulator.protocol.msgtypes import build_registry as _build_registry

__all__ = ["install", "codec_for", "decode_or_none", "TreeDecoder"]

_registry: MessageTypeRegistry = _build_registry()


def install(registry: MessageTypeRegistry) -> None:
    """Bodies are read with ``registry``'s codecs from now on."""
    global _registry
    _registry = registry


def codec_for(message_type: str) -> MessageCodec:
    """The codec of ``message_type`` (``MessageTypeConfigError`` if unknown)."""
    return _registry.codec(message_type)


def decode_or_none(body: bytes, message_type: str) -> Any:
    """The field tree of ``body`` (``None``: the body is malformed for its type)."""
    try:
        return _registry.codec(message_type).decode(bytes(body))
    except CodecError:
        return None


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
