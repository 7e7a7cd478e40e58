"""``struct``: a fixed binary layout declared by ordered ``Field`` elements.

Each ``Field`` is ``/name = spec`` (the leading ``/`` optional; ``/a/b`` nests), where ``spec``
is one Python ``struct`` item: ``b B h H i I l L q Q`` integers (``l``/``L`` are 4 bytes),
``f d e`` floats, ``?`` a boolean, ``c`` one byte, ``Ns`` an N-byte string, optionally
preceded by a byte order ``<`` (little-endian, the default), ``>``/``!`` (big-endian) or
``=``.  Padding ``Nx`` is a ``Field`` of its own, without a name (``4x`` or ``= 4x``).  No
alignment is added between fields.

Tree: ``dict`` of the declared names; strings and ``c`` bytes read as text with trailing NUL
bytes removed (:func:`~.base.bytes_text`).  A body whose length is not exactly the layout's
size is malformed.  AMPS offers no delta, views, select lists, aggregated subscriptions or
``/AMPS/`` topics on struct types.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable

from .base import Capabilities, CodecError, MessageCodec, MessageTypeConfigError, Tree, bytes_text

__all__ = ["StructCodec", "StructField", "parse_field"]

_SPEC = re.compile(r"\s*([<>!=]?)\s*([0-9]*)\s*([bBhHiIlLqQfde?csx])\s*")
_FIELD = re.compile(r"\s*(/?[^=\s][^=]*?)?\s*=\s*(.+?)\s*")
_BYTE_ORDER = {"": "<", "<": "<", ">": ">", "!": ">", "=": "<"}


class StructField:
    """One declared field: its path (empty for padding) and its ``struct`` format."""

    __slots__ = ("path", "fmt", "kind", "text")

    def __init__(self, path: tuple[str, ...], fmt: struct.Struct, kind: str, text: str) -> None:
        self.path = path
        self.fmt = fmt
        self.kind = kind
        self.text = text


def parse_field(text: str) -> StructField:
    """A ``Field`` element's text; :class:`MessageTypeConfigError` if it is not one."""
    m = _FIELD.fullmatch(text)
    if m is None:
        # padding alone: "4x"
        s = _SPEC.fullmatch(text)
        if s is None or s.group(3) != "x":
            raise MessageTypeConfigError(f"struct Field {text!r} is not '/name = spec'")
        return StructField((), struct.Struct("<" + s.group(2) + "x"), "x", text)
    name = (m.group(1) or "").strip()
    s = _SPEC.fullmatch(m.group(2))
    if s is None:
        raise MessageTypeConfigError(f"struct Field {text!r}: {m.group(2)!r} is not a struct item")
    order, count, code = s.groups()
    if code == "x":
        if name:
            raise MessageTypeConfigError(f"struct Field {text!r}: padding has no name")
        return StructField((), struct.Struct("<" + count + "x"), "x", text)
    if count and code != "s":
        raise MessageTypeConfigError(f"struct Field {text!r}: one value per field ({count}{code})")
    path = tuple(p for p in name.lstrip("/").split("/"))
    if not name or not all(path):
        raise MessageTypeConfigError(f"struct Field {text!r} needs a field name")
    fmt = {"l": "i", "L": "I"}.get(code, code)
    return StructField(path, struct.Struct(_BYTE_ORDER[order] + count + fmt), code, text)


class StructCodec(MessageCodec):
    capabilities = Capabilities(delta=False, views=False, select=False, aggregates=False,
                                amps_topics=False)

    def __init__(self, name: str, fields: Iterable[str | StructField]) -> None:
        self.name = name
        self.fields = tuple(f if isinstance(f, StructField) else parse_field(f) for f in fields)
        if not any(f.path for f in self.fields):
            raise MessageTypeConfigError(f"struct message type {name!r} declares no Field")
        seen: set[tuple[str, ...]] = set()
        for f in self.fields:
            if not f.path:
                continue
            n = len(f.path)
            if any(p[:n] == f.path or f.path[:len(p)] == p for p in seen):
                raise MessageTypeConfigError(f"struct Field {f.text!r} repeats or nests in a field")
            seen.add(f.path)
        self.size = sum(f.fmt.size for f in self.fields)

    def decode(self, body: bytes) -> Tree:
        buf = bytes(body)
        if len(buf) != self.size:
            raise CodecError(f"{self.name} messages are {self.size} bytes, got {len(buf)}")
        out: dict[str, Tree] = {}
        pos = 0
        for f in self.fields:
            if f.path:
                v = f.fmt.unpack_from(buf, pos)[0]
                value: Tree
                if isinstance(v, bytes):
                    value = bytes_text(v.rstrip(b"\0"))
                else:
                    value = v
                d = out
                for step in f.path[:-1]:
                    nxt = d.setdefault(step, {})
                    assert isinstance(nxt, dict)  # built only here, from checked paths
                    d = nxt
                d[f.path[-1]] = value
            pos += f.fmt.size
        return out

    def encode(self, tree: Tree) -> bytes:
        if not isinstance(tree, dict):
            raise CodecError(f"a {self.name} message is a set of fields")
        out = bytearray()
        for f in self.fields:
            if not f.path:
                out += f.fmt.pack()
                continue
            v: Tree = tree
            for step in f.path:
                v = v.get(step) if isinstance(v, dict) else None
            if v is None:
                raise CodecError(f"{self.name} message has no value for {'/'.join(f.path)}")
            where = "/".join(f.path)
            try:
                if f.kind in "sc":
                    if not isinstance(v, str):
                        raise CodecError(f"{where} is text")
                    b = v.encode("utf-8")
                    if len(b) > f.fmt.size or (f.kind == "c" and len(b) != 1):
                        raise CodecError(f"{where} does not fit {f.fmt.size} bytes")
                    out += f.fmt.pack(b)
                elif f.kind == "?":
                    if not isinstance(v, bool):
                        raise CodecError(f"{where} is a boolean")
                    out += f.fmt.pack(v)
                elif f.kind in "fde":
                    if isinstance(v, bool) or not isinstance(v, (int, float)):
                        raise CodecError(f"{where} is a number")
                    out += f.fmt.pack(float(v))
                else:
                    if isinstance(v, bool) or not isinstance(v, int):
                        raise CodecError(f"{where} is an integer")
                    out += f.fmt.pack(v)
            except (struct.error, OverflowError, UnicodeEncodeError) as e:
                raise CodecError(f"{where}: {e}") from None
        return bytes(out)
