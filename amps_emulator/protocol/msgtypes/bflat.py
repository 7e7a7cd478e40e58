"""``bflat``: the BFlat binary format (public MIT-licensed reference, bflat.io), written here
from its format description.

A body is a sequence of fields.  Each field starts with a header byte:

* bit 7: the value is an array;
* bits 3-6: the value type -- 0 null, 1 UTF-8 string, 2 binary, 3 int8, 4 int16, 5 int32,
  6 int64, 7 double, 8 datetime (int64 milliseconds), 9 signed LEB128 integer;
* bits 0-2: the tag length (1-7); 0 means an unsigned LEB128 tag length follows.

Then the tag bytes, then the value: fixed-width numbers little-endian; strings and binary as
an unsigned LEB128 length and the bytes; LEB128 integers self-delimiting; null nothing.  An
array value is an unsigned LEB128 element count followed by the elements in the same encoding
(null arrays have no element bytes).

Tree: a flat ``dict`` tag -> value (BFlat has no nesting), typed as the body says; binary
values read as strings (:func:`~.base.bytes_text`), datetimes as their integer milliseconds.
A tag present more than once yields a ``list`` of its values.

Writing (as AMPS does, numbers in the most compact width): ``None`` -> null, ``bool`` -> int8
0/1, ``int`` -> the smallest of int8/16/32/64, ``float`` -> double, ``str`` -> string; a list
of scalars of one kind -> an array of that kind (integers at the widest width needed; mixed
integers and floats -> doubles).  Nested objects cannot be written.
"""

from __future__ import annotations

import struct

from .base import Capabilities, CodecError, MessageCodec, Tree, bytes_text, group_repeated, utf8

__all__ = ["BflatCodec"]

NULL, STRING, BINARY, INT8, INT16, INT32, INT64, DOUBLE, DATETIME, LEB128 = range(10)
_FIXED = {INT8: struct.Struct("<b"), INT16: struct.Struct("<h"), INT32: struct.Struct("<i"),
          INT64: struct.Struct("<q"), DOUBLE: struct.Struct("<d"), DATETIME: struct.Struct("<q")}
_MAX_LEB_BYTES = 19  # 128 bits and then some: a longer LEB128 is malformed


def _uleb(buf: bytes, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    end = len(buf)
    for i in range(pos, min(end, pos + _MAX_LEB_BYTES)):
        b = buf[i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i + 1
        shift += 7
    raise CodecError("truncated or overlong LEB128 number")


def _sleb(buf: bytes, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    end = len(buf)
    for i in range(pos, min(end, pos + _MAX_LEB_BYTES)):
        b = buf[i]
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            if b & 0x40:
                value -= 1 << shift
            return value, i + 1
    raise CodecError("truncated or overlong LEB128 number")


def _enc_uleb(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _enc_sleb(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if (n == 0 and not b & 0x40) or (n == -1 and b & 0x40):
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def _one(buf: bytes, pos: int, vtype: int) -> tuple[Tree, int]:
    """One value of ``vtype`` at ``pos``: (value, next position)."""
    if vtype == NULL:
        return None, pos
    if vtype == STRING or vtype == BINARY:
        n, pos = _uleb(buf, pos)
        end = pos + n
        if end > len(buf):
            raise CodecError("bflat string runs past the end of the message")
        raw = buf[pos:end]
        if vtype == STRING:
            try:
                return raw.decode("utf-8"), end
            except UnicodeDecodeError:
                raise CodecError("bflat string is not UTF-8") from None
        return bytes_text(raw), end
    if vtype == LEB128:
        return _sleb(buf, pos)
    st = _FIXED.get(vtype)
    if st is None:
        raise CodecError(f"unknown bflat value type {vtype}")
    end = pos + st.size
    if end > len(buf):
        raise CodecError("bflat number runs past the end of the message")
    value: int | float = st.unpack_from(buf, pos)[0]
    return value, end


def _fields(body: bytes) -> list[tuple[str, Tree]]:
    buf = bytes(body)
    out: list[tuple[str, Tree]] = []
    pos = 0
    end = len(buf)
    while pos < end:
        header = buf[pos]
        is_array = bool(header & 0x80)
        vtype = (header >> 3) & 0x0F
        if vtype > LEB128:
            raise CodecError(f"unknown bflat value type {vtype}")
        tag_len = header & 0x07
        pos += 1
        if tag_len == 0:
            tag_len, pos = _uleb(buf, pos)
        if tag_len == 0 or pos + tag_len > end:
            raise CodecError("bflat tag is empty or runs past the end of the message")
        try:
            tag = buf[pos:pos + tag_len].decode("utf-8")
        except UnicodeDecodeError:
            raise CodecError("bflat tag is not UTF-8") from None
        pos += tag_len
        value: Tree
        if is_array:
            count, pos = _uleb(buf, pos)
            if vtype == NULL:
                if count > end:  # null elements take no bytes: bound the list by the body
                    raise CodecError("bflat null array longer than the message")
                value = [None] * count
            else:
                items: list[Tree] = []
                for _ in range(count):
                    if pos >= end:
                        raise CodecError("bflat array runs past the end of the message")
                    item, pos = _one(buf, pos, vtype)
                    items.append(item)
                value = items
        else:
            value, pos = _one(buf, pos, vtype)
        out.append((tag, value))
    return out


def _int_type(n: int) -> int:
    if -0x80 <= n < 0x80:
        return INT8
    if -0x8000 <= n < 0x8000:
        return INT16
    if -0x80000000 <= n < 0x80000000:
        return INT32
    if -(1 << 63) <= n < (1 << 63):
        return INT64
    return LEB128


def _scalar_type(v: Tree) -> int:
    if v is None:
        return NULL
    if isinstance(v, bool):
        return INT8
    if isinstance(v, int):
        return _int_type(v)
    if isinstance(v, float):
        return DOUBLE
    if isinstance(v, str):
        return STRING
    raise CodecError(f"bflat cannot write a nested {type(v).__name__}")


def _write_value(out: bytearray, vtype: int, v: Tree) -> None:
    if vtype == NULL:
        return
    if vtype == STRING:
        if not isinstance(v, str):
            raise CodecError("bflat string array with a non-string element")
        b = utf8(v)
        out += _enc_uleb(len(b))
        out += b
        return
    if vtype == LEB128:
        if not isinstance(v, int):
            raise CodecError("bflat integer array with a non-integer element")
        if not -(1 << 127) <= v < (1 << 127):
            raise CodecError("integer beyond 128 bits")
        out += _enc_sleb(v)
        return
    if not isinstance(v, (int, float)):
        raise CodecError("bflat number array with a non-number element")
    out += _FIXED[vtype].pack(float(v) if vtype == DOUBLE else int(v))


def _header(vtype: int, tag: bytes, is_array: bool) -> bytes:
    h = (vtype << 3) | (0x80 if is_array else 0)
    if len(tag) < 8:
        return bytes([h | len(tag)]) + tag
    return bytes([h]) + _enc_uleb(len(tag)) + tag


def _array_type(items: list[Tree]) -> int:
    kinds = {_scalar_type(x) for x in items}
    if not kinds:
        return NULL
    if kinds <= {INT8, INT16, INT32, INT64, LEB128}:
        return max(kinds)
    if kinds <= {INT8, INT16, INT32, INT64, DOUBLE}:
        return DOUBLE
    if len(kinds) == 1:
        return kinds.pop()
    raise CodecError("bflat arrays hold values of one type")


class BflatCodec(MessageCodec):
    name = "bflat"
    capabilities = Capabilities()

    def decode(self, body: bytes) -> Tree:
        return group_repeated(_fields(body))

    def encode(self, tree: Tree) -> bytes:
        if not isinstance(tree, dict):
            raise CodecError("a bflat message is a set of fields")
        out = bytearray()
        for tag, value in tree.items():
            t = utf8(tag)
            if not t:
                raise CodecError("a bflat tag cannot be empty")
            if isinstance(value, list):
                vtype = _array_type(value)
                out += _header(vtype, t, True)
                out += _enc_uleb(len(value))
                for item in value:
                    _write_value(out, vtype, item)
            else:
                vtype = _scalar_type(value)
                out += _header(vtype, t, False)
                _write_value(out, vtype, value)
        return bytes(out)
