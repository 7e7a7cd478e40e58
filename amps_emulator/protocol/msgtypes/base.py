"""The codec interface every AMPS message type implements, its errors, and shared helpers.

A codec turns a message body into the *field tree* the rest of the server already reads for
JSON (the filter engine, SOW keys and indexes, ``orderby``, grouping, delta merge, select
lists): ``dict`` (str keys), ``list``, ``str``, ``int``, ``float``, ``bool`` and ``None``
(NULL), exactly what ``msgspec.json.decode`` yields.  So a filter compiled once with
:func:`amps_emulator.protocol.filter.compile_filter` runs unchanged on the tree of any type.

Bodies the server passes through keep their bytes; :meth:`MessageCodec.encode` is only for
bodies the server builds itself (delta results, views, select lists, ``/AMPS/`` topics).

Errors: :class:`CodecError` is the one error :meth:`MessageCodec.decode` raises, for any
malformed body (never anything else).  :class:`UnsupportedByType` (a subclass) says that
AMPS refuses the operation for the type altogether (delta on ``binary``, a view over
``struct``...); the caller decides what AMPS does then (a delta publish is stored as the
literal message).  :class:`MessageTypeConfigError` is for configuration that cannot build a
codec, with the config file position when the caller knows it.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import TypeAlias

import msgspec

from amps_emulator.protocol.filter.values import fmt_float, resolve

__all__ = [
    "Tree", "Scalar", "Path", "CodecError", "UnsupportedByType", "MessageTypeConfigError",
    "MessageCodec", "infer_scalar", "text_or_none", "bytes_text", "merge_trees", "value_text",
    "MAX_DEPTH", "Capabilities", "utf8",
]

Scalar: TypeAlias = str | int | float | bool | None
Tree: TypeAlias = "dict[str, Tree] | list[Tree] | str | int | float | bool | None"
Path: TypeAlias = tuple[str | int, ...]

#: deepest nesting a codec builds or walks (a body nested deeper is malformed)
MAX_DEPTH = 200

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


class CodecError(ValueError):
    """A body (or tree) this message type cannot read (or write); the message says why."""


class UnsupportedByType(CodecError):
    """AMPS does not offer this operation for this message type."""


class MessageTypeConfigError(ValueError):
    """A ``MessageTypes/MessageType`` declaration that cannot be served.

    ``source`` is ``"file:line"`` when the config layer passed it, else ``None``.
    """

    def __init__(self, message: str, source: str | None = None) -> None:
        self.reason = message
        self.source = source
        super().__init__(f"{source}: {message}" if source else message)


class Capabilities:
    """What AMPS offers on a message type (A.3 of docs/design/beyond-json.md); all true for JSON."""

    __slots__ = ("filters", "delta", "views", "select", "aggregates", "amps_topics")

    def __init__(self, *, filters: bool = True, delta: bool = True, views: bool = True,
                 select: bool = True, aggregates: bool = True, amps_topics: bool = True) -> None:
        self.filters = filters
        self.delta = delta
        self.views = views
        self.select = select
        self.aggregates = aggregates
        self.amps_topics = amps_topics

    def __repr__(self) -> str:
        on = [k for k in self.__slots__ if getattr(self, k)]
        return f"Capabilities({', '.join(on)})"


class MessageCodec(ABC):
    """One AMPS message type: body bytes <-> field tree."""

    #: the AMPS type name (``MessageType`` in the config, ``mt`` at logon)
    name: str
    capabilities: Capabilities

    @abstractmethod
    def decode(self, body: bytes) -> Tree:
        """The field tree of ``body``; :class:`CodecError` if it is malformed."""

    def text_tree(self, body: bytes) -> Tree:
        """The tree with every value as the text the body spells (types that infer value types
        from text override this; SOW keys read it, docs/design/beyond-json.md A.4)."""
        return self.decode(body)

    def encode(self, tree: Tree) -> bytes:
        """A body for ``tree``; :class:`CodecError` if the type cannot express it,
        :class:`UnsupportedByType` if AMPS never builds bodies of this type."""
        raise UnsupportedByType(f"the server does not build {self.name} bodies")

    def merge_delta(self, old: bytes, delta: bytes) -> bytes:
        """The stored body after a ``delta_publish`` of ``delta`` onto ``old``.

        Default rule (the JSON one): fields of the delta replace stored fields, absent fields
        are kept, objects merge recursively.  Values keep the text the bodies spell.
        """
        if not self.capabilities.delta:
            raise UnsupportedByType(f"delta is not supported for {self.name} messages")
        return self.encode(merge_trees(self.text_tree(old), self.text_tree(delta)))

    def key_values(self, body: bytes, paths: Sequence[Path]) -> list[str | None]:
        """The text of each SOW ``Key`` field (``None`` where the body has no value)."""
        tree = self.text_tree(body)
        return [value_text(resolve(tree, p)) if isinstance(tree, (dict, list)) else None
                for p in paths]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


# ---- helpers ------------------------------------------------------------------------------

# a signed decimal integer in canonical form (so the text survives a round trip)
_CANON_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")
# the numeric-literal forms of the filter language, with a '.' or an exponent: a float
_FLOAT_FORM = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def group_repeated(fields: Iterable[tuple[str, Tree]]) -> dict[str, Tree]:
    """Name -> value for ``fields`` in order; a name given more than once maps to the list of
    its values (how tag=value types and merged composite parts address a repeated field)."""
    out: dict[str, Tree] = {}
    repeated: set[str] = set()
    for name, value in fields:
        if name not in out:
            out[name] = value
        elif name in repeated:
            prev = out[name]
            if isinstance(prev, list):
                prev.append(value)
        else:
            repeated.add(name)
            out[name] = [out[name], value]
    return out


def infer_scalar(text: str) -> Scalar:
    """AMPS's value typing for text formats (fix, nvfix, xml): ``''`` is NULL; an integer in
    canonical decimal form within 64 bits is an integer; a numeric form with a '.' or an
    exponent is a float; anything else (``007``, ``+5``, ``IBM``) stays a string -- which still
    compares as a number against a number, so only the text-keeping choice is ours."""
    if not text:
        return None
    c = text[0]
    if c.isdigit() or c in "-+.":
        if _CANON_INT.fullmatch(text):
            n = int(text)
            if _INT64_MIN <= n <= _INT64_MAX:
                return n
            return text
        if _FLOAT_FORM.fullmatch(text) and ("." in text or "e" in text or "E" in text):
            return float(text)
    return text


def text_or_none(text: str) -> Scalar:
    """The untyped reading of a text value: ``''`` is NULL, anything else the text."""
    return text if text else None


def bytes_text(b: bytes | bytearray | memoryview) -> str:
    """Text for bytes that a type carries as a string: UTF-8 when valid, else one character per
    byte (Latin-1), so every byte string maps to a string the JSON writer can encode."""
    raw = bytes(b)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def merge_trees(old: Tree, delta: Tree, depth: int = 0) -> Tree:
    """AMPS delta merge on trees: delta fields replace, absent fields stay, objects merge."""
    if not isinstance(old, dict) or not isinstance(delta, dict):
        return delta
    if depth > MAX_DEPTH:
        raise CodecError("message nested too deeply")
    out = dict(old)
    for k, v in delta.items():
        cur = out.get(k)
        if isinstance(v, dict) and isinstance(cur, dict):
            out[k] = merge_trees(cur, v, depth + 1)
        else:
            out[k] = v
    return out


def utf8(text: str) -> bytes:
    """``text`` as UTF-8; :class:`CodecError` for a string no UTF-8 body can carry."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise CodecError("text with an unpaired surrogate cannot be written") from None


_json_encode = msgspec.json.encode


def value_text(v: Tree) -> str | None:
    """The text of a key value (the rules of ``sow.keys.key_text``): ``None`` for no value."""
    if isinstance(v, str):
        return v
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return fmt_float(v)
    return _json_encode(v).decode()
