"""``composite-local`` and ``composite-global``: a body made of parts, each a 4-byte big-endian
length followed by that many bytes, parsed by the declared part types in order.

Bytes after the declared parts (further frames) are unparsed payload: kept, never read.  A
frame whose length runs past the end of the body makes the body malformed.  A body with fewer
parts than declared simply lacks the missing ones.

* ``composite-local``: the tree is ``{"0": part0, "1": part1, ...}``, so ``/0/id`` is field
  ``id`` of the first part.  A part its type cannot parse (a ``binary`` part, a malformed
  one) contributes nothing.  Delta merge works part by part: an empty part in the delta keeps
  the stored part, a part whose type merges deltas is merged, any other part is replaced.
* ``composite-global``: every parsable part's fields at the root; a name present in several
  parts becomes an array of their values (``/m`` -> ``["a", "b"]``).  AMPS offers neither
  delta nor views on it, and aggregation cannot project it (User Guide, composite types), so
  an aggregated query or subscription on it is refused.  A select list would have to write a
  composite-global body too, which nothing of 60East's describes: refused as well
  (``invalid options``) rather than answered with the unselected message.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from .base import Capabilities, CodecError, MessageCodec, Tree, UnsupportedByType, group_repeated

__all__ = ["CompositeLocalCodec", "CompositeGlobalCodec", "split_parts", "join_parts"]

_LEN = struct.Struct(">I")


def split_parts(body: bytes, count: int | None = None) -> tuple[list[bytes], bytes]:
    """``(parts, rest)``: the first ``count`` (all if ``None``) frames of ``body`` and the bytes
    after them; :class:`CodecError` if a frame runs past the end."""
    buf = bytes(body)
    parts: list[bytes] = []
    pos = 0
    end = len(buf)
    while pos < end and (count is None or len(parts) < count):
        if pos + 4 > end:
            raise CodecError("composite part length runs past the end of the message")
        (n,) = _LEN.unpack_from(buf, pos)
        pos += 4
        if pos + n > end:
            raise CodecError("composite part runs past the end of the message")
        parts.append(buf[pos:pos + n])
        pos += n
    return parts, buf[pos:]


def join_parts(parts: Sequence[bytes], rest: bytes = b"") -> bytes:
    out = bytearray()
    for p in parts:
        if len(p) > 0xFFFFFFFF:
            raise CodecError("composite part longer than 4 GiB")
        out += _LEN.pack(len(p))
        out += p
    out += rest
    return bytes(out)


class _Composite(MessageCodec):
    def __init__(self, name: str, parts: Sequence[MessageCodec]) -> None:
        if not parts:
            raise ValueError("a composite message type needs at least one part type")
        self.name = name
        self.parts = tuple(parts)

    def _part_trees(self, body: bytes, text: bool) -> list[Tree]:
        """Each declared part's tree; ``None`` for a missing or unparsable part."""
        raw, _rest = split_parts(body, len(self.parts))
        out: list[Tree] = []
        for codec, part in zip(self.parts, raw, strict=False):  # a body may lack parts
            try:
                out.append(codec.text_tree(part) if text else codec.decode(part))
            except CodecError:
                out.append(None)
        return out


class CompositeLocalCodec(_Composite):
    capabilities = Capabilities(amps_topics=False)

    def _tree(self, body: bytes, text: bool) -> Tree:
        return {str(i): t for i, t in enumerate(self._part_trees(body, text)) if t is not None}

    def decode(self, body: bytes) -> Tree:
        return self._tree(body, False)

    def text_tree(self, body: bytes) -> Tree:
        return self._tree(body, True)

    def encode(self, tree: Tree) -> bytes:
        if not isinstance(tree, dict):
            raise CodecError("a composite-local message is a set of numbered parts")
        extra = set(tree) - {str(i) for i in range(len(self.parts))}
        if extra:
            raise CodecError(f"{self.name} has no part {sorted(extra)[0]!r}")
        out = []
        for i, codec in enumerate(self.parts):
            sub = tree.get(str(i))
            out.append(b"" if sub is None else codec.encode(sub))
        return join_parts(out)

    def merge_delta(self, old: bytes, delta: bytes) -> bytes:
        n = len(self.parts)
        old_parts, old_rest = split_parts(old, n)
        new_parts, new_rest = split_parts(delta, n)
        out: list[bytes] = []
        for i, codec in enumerate(self.parts):
            o = old_parts[i] if i < len(old_parts) else b""
            d = new_parts[i] if i < len(new_parts) else b""
            if not d:
                out.append(o)
            elif not o or not codec.capabilities.delta:
                out.append(d)
            else:
                try:
                    out.append(codec.merge_delta(o, d))
                except CodecError:
                    out.append(d)  # an unparsable stored or delta part: the delta replaces it
        return join_parts(out, new_rest or old_rest)


class CompositeGlobalCodec(_Composite):
    capabilities = Capabilities(delta=False, views=False, select=False, aggregates=False,
                                amps_topics=False)

    def _tree(self, body: bytes, text: bool) -> Tree:
        return group_repeated(item for t in self._part_trees(body, text) if isinstance(t, dict)
                              for item in t.items())

    def decode(self, body: bytes) -> Tree:
        return self._tree(body, False)

    def text_tree(self, body: bytes) -> Tree:
        return self._tree(body, True)

    def encode(self, tree: Tree) -> bytes:
        raise UnsupportedByType("AMPS builds no composite-global bodies (no views, no delta)")
