"""``msgpack``: one MessagePack map per body (decoded with msgspec).

Tree mapping (AMPS User Guide): nil -> NULL, bool, int, float, str, array -> ``list``, map ->
``dict``; ``bin`` and ``ext`` values become strings (:func:`~.base.bytes_text`: UTF-8 when
valid, else one character per byte).  Map keys that are not strings (integers, bin) are read
as their text, so ``{1: "x"}`` is addressed ``/1``.  A body that is not one map (an array, a
scalar, trailing bytes) is malformed.

Writing: ``msgspec.msgpack.encode`` of the tree (integers beyond 64 bits cannot be written).
"""

from __future__ import annotations

import msgspec

from .base import MAX_DEPTH, Capabilities, CodecError, MessageCodec, Tree, bytes_text, value_text

__all__ = ["MsgpackCodec"]

_encode = msgspec.msgpack.encode


def _ext(code: int, data: memoryview) -> str:
    return bytes_text(data)


_decoder = msgspec.msgpack.Decoder(ext_hook=_ext)


def _key(k: object) -> str:
    if isinstance(k, str):
        return k
    if isinstance(k, (bytes, bytearray, memoryview)):
        return bytes_text(k)
    if k is None or isinstance(k, (bool, int, float)):
        t = value_text(k)
        return "" if t is None else t
    raise CodecError(f"a msgpack map key of type {type(k).__name__} cannot name a field")


def _norm(v: object, depth: int) -> Tree:
    """The tree for a decoded value: only bytes and non-string keys need converting."""
    if isinstance(v, dict):
        if depth > MAX_DEPTH:
            raise CodecError("msgpack message nested too deeply")
        out: dict[str, Tree] = {}
        for k, x in v.items():
            out[_key(k)] = _norm(x, depth + 1)
        return out
    if isinstance(v, list):
        if depth > MAX_DEPTH:
            raise CodecError("msgpack message nested too deeply")
        return [_norm(x, depth + 1) for x in v]
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes_text(v)
    if v is None or isinstance(v, (str, bool, int, float)):
        return v
    raise CodecError(f"unexpected msgpack value {type(v).__name__}")


class MsgpackCodec(MessageCodec):
    name = "msgpack"
    capabilities = Capabilities()

    def decode(self, body: bytes) -> Tree:
        try:
            raw = _decoder.decode(body)
        except (msgspec.DecodeError, ValueError, TypeError, OverflowError, RecursionError) as e:
            raise CodecError(f"malformed msgpack: {e}") from None
        if not isinstance(raw, dict):
            raise CodecError("a msgpack message is one map")
        try:
            return _norm(raw, 0)
        except RecursionError:
            raise CodecError("msgpack message nested too deeply") from None

    def encode(self, tree: Tree) -> bytes:
        try:
            return _encode(tree)
        except (TypeError, ValueError, OverflowError, RecursionError) as e:
            raise CodecError(f"cannot write msgpack: {e}") from None
