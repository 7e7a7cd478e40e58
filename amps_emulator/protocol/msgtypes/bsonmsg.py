"""``bson``: one BSON document per body, read and written with pymongo's ``bson`` package.

Not the PyPI ``bson`` package (py-bson), which installs under the same import name with another
API; the registry reports a clear start-up error when pymongo's is missing.

Tree mapping (BSON carries its value types, docs/design/beyond-json.md A.3): double -> ``float``;
int32/int64 -> ``int``; string, symbol and JavaScript code -> ``str``; bool; null and
undefined -> NULL; embedded document -> ``dict``; array -> ``list``; ObjectId -> its 24-digit
hex text; UTC datetime -> milliseconds since the epoch (the int64 BSON stores, so it orders and
compares as a number whatever its range); Decimal128 -> its decimal text (exact; it still
compares as a number); binary -> string (UTF-8 when valid, else one character per byte);
regular expression -> its pattern; timestamp -> ``(time << 32) | increment``; min/max key ->
NULL; DBRef -> ``{"$ref", "$id"[, "$db"]}``.  A body that is not exactly one document
(short, trailing bytes, bad lengths) is malformed.

Writing (delta results, views): ``bson.encode`` of the tree; an integer beyond 64 bits or a
field name with a NUL cannot be written.
"""

from __future__ import annotations

from collections.abc import Mapping

import bson
from bson.codec_options import CodecOptions, DatetimeConversion
from bson.dbref import DBRef
from bson.decimal128 import Decimal128
from bson.errors import BSONError
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp

from .base import MAX_DEPTH, Capabilities, CodecError, MessageCodec, Tree, bytes_text

__all__ = ["BsonCodec"]

_OPTIONS: CodecOptions[dict[str, object]] = CodecOptions(
    document_class=dict, datetime_conversion=DatetimeConversion.DATETIME_MS)


def _norm(v: object, depth: int) -> Tree:
    """The tree for one decoded BSON value."""
    if v is None or isinstance(v, (str, bool, float)):
        return v
    if isinstance(v, int):
        return int(v)  # Int64 -> int
    if isinstance(v, Mapping):
        if depth > MAX_DEPTH:
            raise CodecError("bson message nested too deeply")
        return {str(k): _norm(x, depth + 1) for k, x in v.items()}
    if isinstance(v, list):
        if depth > MAX_DEPTH:
            raise CodecError("bson message nested too deeply")
        return [_norm(x, depth + 1) for x in v]
    if isinstance(v, (bytes, bytearray, memoryview)):  # Binary is a bytes subclass
        return bytes_text(v)
    if isinstance(v, ObjectId):
        return str(v)
    if isinstance(v, bson.DatetimeMS):
        return int(v)
    if isinstance(v, Decimal128):
        return str(v)
    if isinstance(v, Regex):
        return bytes_text(v.pattern) if isinstance(v.pattern, bytes) else str(v.pattern)
    if isinstance(v, Timestamp):
        return (v.time << 32) | v.inc
    if isinstance(v, (MinKey, MaxKey)):
        return None
    if isinstance(v, DBRef):
        ref: dict[str, Tree] = {"$ref": v.collection, "$id": _norm(v.id, depth + 1)}
        if v.database is not None:
            ref["$db"] = v.database
        return ref
    return str(v)


class BsonCodec(MessageCodec):
    name = "bson"
    capabilities = Capabilities()

    def decode(self, body: bytes) -> Tree:
        try:
            raw = bson.decode(body, _OPTIONS)
        except (BSONError, ValueError, TypeError, OverflowError, IndexError,
                RecursionError) as e:
            raise CodecError(f"malformed bson: {e}") from None
        try:
            return _norm(raw, 0)
        except RecursionError:
            raise CodecError("bson message nested too deeply") from None

    def encode(self, tree: Tree) -> bytes:
        if not isinstance(tree, dict):
            raise CodecError("a bson message is one document")
        try:
            return bson.encode(tree)
        except (BSONError, ValueError, TypeError, OverflowError, RecursionError) as e:
            raise CodecError(f"cannot write bson: {e}") from None
