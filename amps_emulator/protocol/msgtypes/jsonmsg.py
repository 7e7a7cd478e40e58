"""``json``: the type the server serves today, as a codec (the baseline, and a composite part).

Decoding is ``msgspec.json.decode`` -- the same reader the server's filter path uses -- but a
malformed body raises :class:`~.base.CodecError` instead of reading as ``None``.
"""

from __future__ import annotations

import msgspec

from .base import Capabilities, CodecError, MessageCodec, Tree

__all__ = ["JsonCodec"]

_decode = msgspec.json.decode
_encode = msgspec.json.encode


class JsonCodec(MessageCodec):
    name = "json"
    capabilities = Capabilities()

    def decode(self, body: bytes) -> Tree:
        try:
            tree: Tree = _decode(body)
        except (msgspec.DecodeError, UnicodeDecodeError, TypeError, ValueError,
                RecursionError) as e:
            raise CodecError(f"malformed JSON: {e}") from None
        return tree

    def encode(self, tree: Tree) -> bytes:
        try:
            return _encode(tree)
        except (TypeError, ValueError, OverflowError, RecursionError) as e:
            raise CodecError(f"cannot write JSON: {e}") from None
