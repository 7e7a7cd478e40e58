"""``fix`` and ``nvfix``: ``tag=value`` fields split by a separator byte.

* ``fix``: tags are decimal numbers (``35=D``), addressed ``/35``; an identifier such as
  ``/OrderQty`` is legal in a filter and simply never matches.
* ``nvfix``: a tag is any bytes but ``=`` and the separator (``messageNumber=1``).

Framing (``MessageType`` options, decimal ASCII codes): ``FieldSeparator`` (default 1, SOH)
ends each field; ``HeaderSeparator`` (default 2) and ``MessageSeparator`` (default 3 here;
AMPS states none) matter only to the legacy ``fix``/``nvfix`` protocols, not to a body carried
by the ``amps`` protocol, and are kept for that layer.  A final separator is optional; empty
fields (two separators in a row) are skipped.  A field without ``=`` is malformed.

Tree: a flat ``dict`` tag -> value in body order.  A tag present more than once (FIX repeating
groups) yields a ``list`` of its values in order, which filters read with the "any element"
rule.  Values are typed as AMPS infers them (:func:`~.base.infer_scalar`): ``38=150`` is an
integer, ``44=24.50`` a float, ``11=007`` a string, ``58=`` NULL.

Delta merge works on the fields' bytes: a tag in the delta replaces the stored tag's value in
place (all its occurrences when repeated: the delta's occurrences go where the first stored
one was), new tags are appended in delta order.  Values keep their exact text.
"""

from __future__ import annotations

from collections.abc import Iterator

from .base import (
    Capabilities,
    CodecError,
    MessageCodec,
    Tree,
    bytes_text,
    group_repeated,
    infer_scalar,
    text_or_none,
    utf8,
    value_text,
)

__all__ = ["FixCodec", "NvfixCodec", "DEFAULT_FIELD_SEPARATOR", "DEFAULT_HEADER_SEPARATOR",
           "DEFAULT_MESSAGE_SEPARATOR"]

DEFAULT_FIELD_SEPARATOR = 1
DEFAULT_HEADER_SEPARATOR = 2
DEFAULT_MESSAGE_SEPARATOR = 3


def _check_separator(code: int, what: str) -> int:
    if not 0 <= code <= 255:
        raise ValueError(f"{what} must be a byte value 0-255, got {code}")
    if code == ord("="):
        raise ValueError(f"{what} cannot be '=' (61)")
    return code


class _TagValueCodec(MessageCodec):
    capabilities = Capabilities()
    numeric_tags = False

    def __init__(self, field_separator: int = DEFAULT_FIELD_SEPARATOR,
                 header_separator: int = DEFAULT_HEADER_SEPARATOR,
                 message_separator: int = DEFAULT_MESSAGE_SEPARATOR) -> None:
        self.field_separator = _check_separator(field_separator, "FieldSeparator")
        self.header_separator = _check_separator(header_separator, "HeaderSeparator")
        self.message_separator = _check_separator(message_separator, "MessageSeparator")
        self._sep = bytes([self.field_separator])

    # -- reading ----------------------------------------------------------------------------

    def fields(self, body: bytes) -> list[tuple[bytes, bytes]]:
        """The body's ``(tag, value)`` byte pairs in order; :class:`CodecError` if malformed."""
        out = []
        numeric = self.numeric_tags
        for field in bytes(body).split(self._sep):
            if not field:
                continue
            tag, eq, value = field.partition(b"=")
            if not eq:
                raise CodecError(f"{self.name} field without '=': {bytes_text(field[:40])!r}")
            if not tag:
                raise CodecError(f"{self.name} field with an empty tag")
            if numeric and not tag.isdigit():
                raise CodecError(f"fix tags are numbers: {bytes_text(tag[:40])!r}")
            out.append((tag, value))
        return out

    def _tree(self, body: bytes, typed: bool) -> Tree:
        return group_repeated(self._pairs(body, typed))

    def _pairs(self, body: bytes, typed: bool) -> Iterator[tuple[str, Tree]]:
        conv = infer_scalar if typed else text_or_none
        numeric = self.numeric_tags
        sep = chr(self.field_separator)
        # one text conversion for the whole body (separators and '=' are single bytes < 0x80
        # or Latin-1 code points, so they split the text exactly where they split the bytes)
        for field in bytes_text(body).split(sep):
            if not field:
                continue
            tag, eq, raw = field.partition("=")
            if not eq or not tag or (numeric and not (tag.isascii() and tag.isdigit())):
                self.fields(body)  # raises the precise CodecError
                raise CodecError(f"malformed {self.name} field")  # (mixed-encoding body)
            yield tag, conv(raw)

    def decode(self, body: bytes) -> Tree:
        return self._tree(body, True)

    def text_tree(self, body: bytes) -> Tree:
        return self._tree(body, False)

    # -- writing ----------------------------------------------------------------------------

    def _tag_bytes(self, tag: str) -> bytes:
        b = utf8(tag)
        if not b or b"=" in b or self._sep in b:
            raise CodecError(f"{tag!r} cannot be a {self.name} tag")
        if self.numeric_tags and not b.isdigit():
            raise CodecError(f"{tag!r} cannot be a fix tag (tags are numbers)")
        return b

    def _value_bytes(self, value: Tree) -> bytes:
        if isinstance(value, (dict, list)):
            raise CodecError(f"{self.name} values are scalars, not {type(value).__name__}")
        text = value_text(value)
        b = b"" if text is None else utf8(text)
        if self._sep in b:
            raise CodecError(f"a {self.name} value cannot contain the field separator")
        return b

    def encode(self, tree: Tree) -> bytes:
        if not isinstance(tree, dict):
            raise CodecError(f"a {self.name} message is a set of fields, not {type(tree).__name__}")
        parts: list[bytes] = []
        sep = self._sep
        for tag, value in tree.items():
            t = self._tag_bytes(tag)
            for v in value if isinstance(value, list) else [value]:
                parts.append(t + b"=" + self._value_bytes(v) + sep)
        return b"".join(parts)

    def merge_delta(self, old: bytes, delta: bytes) -> bytes:
        old_fields = self.fields(old)
        new_fields = self.fields(delta)
        by_tag: dict[bytes, list[bytes]] = {}
        for tag, value in new_fields:
            by_tag.setdefault(tag, []).append(value)
        sep = self._sep
        out: list[bytes] = []
        placed: set[bytes] = set()
        for tag, value in old_fields:
            values = by_tag.get(tag)
            if values is None:
                out.append(tag + b"=" + value + sep)
            elif tag not in placed:
                placed.add(tag)
                out.extend(tag + b"=" + v + sep for v in values)
        for tag, value in new_fields:
            if tag not in placed:
                out.append(tag + b"=" + value + sep)
        return b"".join(out)


class FixCodec(_TagValueCodec):
    """``fix``: numeric tags. ``version_compliance``: the type's ``AMPSVersionCompliance``,
    which decides the tags of the ``/AMPS/SOWStats`` messages written in it (4: AMPS 4.X's,
    the default; 5: the tags unified with ``/AMPS/ClientStatus``)."""

    name = "fix"
    numeric_tags = True
    version_compliance = 4


class NvfixCodec(_TagValueCodec):
    """``nvfix``: named tags."""

    name = "nvfix"
