"""Fields mode: a compiled filter specialised for scans over many stored bodies.

The same filter generated once more (by :class:`~protocol.filter.compiler.Gen`, the code
generator of the compiled filter) reading its top-level fields from a msgspec ``Struct``
holding only those fields, as an expression that a caller's loop inlines (the SOW's LMDB
scan), so that a record costs one decode and no Python call.

Built on demand from a compiled filter by :func:`fields_filter` and cached on it (its
``fields_cache`` slot), so this module depends on :mod:`.compiler` and not the other way.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from . import ast as A
from . import pieces
from .compiler import Gen, recovery
from .runtime import HELPERS, NOT_COMPUTED, CompiledFilter

__all__ = ["FieldsFilter", "fields_filter"]


class FieldsFilter:
    """A compiled filter taken apart for a loop that evaluates it on many JSON bodies.

    For a filter (not an expression) whose identifiers all start with an object field, that
    reads no message context and that Python could compile.  The loop decodes each body with
    ``decoder`` (a msgspec ``Struct`` holding only the top-level fields the filter reads,
    ``None`` when a field is missing or ``null``, exactly what ``dict.get`` gives on the full
    decode; it raises ``msgspec.DecodeError`` (``ValidationError`` included) for a body that
    is not a JSON object or not JSON, and ``UnicodeDecodeError`` / ``TypeError`` as
    ``msgspec.json.decode`` does, and the loop must then evaluate ``fn`` on whatever it decodes
    instead), binds the struct to the local name ``_s``, runs the statements ``pre`` and
    then the Python expression ``test``, which is true iff the filter is TRUE.
    (``decoder_for(extra)``: the same with more fields decoded, for a loop whose documents
    must also carry other fields, e.g. for ordering.)

    ``test`` may raise only on a bug (the tests require it never does); the loop should
    answer such a record with ``_recover(doc)`` (a global of the built namespace: counts the
    event in ``recoveries`` and asks the reference interpreter), as the compiled filter does.

    ``build(template, names)`` compiles loop source around the filter: ``template`` is
    Python source containing a line ``<PRE>`` (replaced by ``pre``, at that line's
    indentation) and ``{test}``; ``names`` are extra globals.  Loop locals must not start
    with ``_t``, ``_v``, ``_k``, ``_path`` or ``_s`` (the generated code's names).
    """

    __slots__ = ("fn", "names", "pre", "test", "defs", "ns", "_built", "_decoders")

    def __init__(self, fn: CompiledFilter, names: tuple[str, ...], pre: list[str], test: str,
                 defs: list[str], ns: dict[str, Any]) -> None:
        self.fn = fn
        self.names = names
        self.pre = pre
        self.test = test
        self.defs = defs
        self.ns = ns
        self._built: dict[tuple[str, tuple[str, ...]], dict[str, Any]] = {}
        self._decoders: dict[tuple[str, ...], msgspec.json.Decoder[Any] | None] = {}

    @property
    def decoder(self) -> msgspec.json.Decoder[Any]:
        """The decoder of just ``names`` (one that :func:`fields_filter` returns has one)."""
        dec = self.decoder_for(())
        if dec is None:
            raise ValueError(f"msgspec cannot decode the fields {self.names!r}")
        return dec

    def decoder_for(self, extra: Iterable[str] = ()) -> msgspec.json.Decoder[Any] | None:
        """The struct decoder; ``extra``: more top-level names it must decode too (so that
        it accepts and rejects exactly the bodies a decoder of ``names`` + ``extra`` does).
        ``None`` if msgspec cannot name such fields (a quote, a backslash or a control
        character in the name)."""
        more = tuple(sorted(set(extra).difference(self.names)))
        try:
            return self._decoders[more]
        except KeyError:
            pass
        fields = [(f"f{i}", Any, None) for i in range(len(self.names))]
        fields += [(f"x{i}", Any, None) for i in range(len(more))]
        rename = {f"f{i}": n for i, n in enumerate(self.names)}
        rename.update({f"x{i}": n for i, n in enumerate(more)})
        dec: msgspec.json.Decoder[Any] | None
        try:
            struct = msgspec.defstruct("Fields", fields, rename=rename, gc=False)
            dec = msgspec.json.Decoder(struct)
        except (ValueError, TypeError):
            dec = None
        self._decoders[more] = dec
        return dec

    def build(self, template: str, names: dict[str, Any] | None = None) -> dict[str, Any]:
        """The namespace (dict) the loop source was executed in (cached per template)."""
        key = (template, tuple(sorted(names)) if names else ())
        ns = self._built.get(key)
        if ns is not None:
            return ns
        lines: list[str] = []
        for line in template.split("\n"):
            if line.strip() == "<PRE>":
                indent = line[:len(line) - len(line.lstrip())]
                lines.extend(indent + p for p in self.pre)
            else:
                lines.append(line)
        src = "\n".join(self.defs + [line.replace("{test}", self.test) for line in lines])
        ns = dict(self.ns)
        if names:
            ns.update(names)
        exec(compile(src, "<amps-filter-loop>", "exec"), ns)  # noqa: S102 - generated
        self._built[key] = ns
        return ns

    @property
    def source(self) -> str:
        return "\n".join(self.defs + self.pre + [self.test])


#: ``fields_cache`` of a callable that is not a compiled filter
_FOREIGN = object()


def fields_filter(fn: CompiledFilter) -> FieldsFilter | None:
    """The :class:`FieldsFilter` of a compiled filter, or ``None`` when it has none (computed
    once per compiled filter; ``None`` too for any other callable)."""
    ff = getattr(fn, "fields_cache", _FOREIGN)  # any callable may be handed in
    if ff is None or isinstance(ff, FieldsFilter):
        return ff
    if ff is not NOT_COMPUTED:  # not one of ours
        return None
    try:
        made = _make_fields_filter(fn)
    except (RecursionError, SyntaxError, MemoryError, ValueError, OverflowError):
        made = None
    fn.fields_cache = made
    return made


def _make_fields_filter(fn: CompiledFilter) -> FieldsFilter | None:
    root = fn.ast
    if fn.source is None or fn.value_mode or fn.uses_context:
        return None
    if pieces.heavier(root, pieces.SPLIT_WEIGHT):  # its loop: one long compile() (.pieces)
        return None
    names: dict[str, str] = {}
    for node in A.walk(root):
        if isinstance(node, A.Identifier):
            p = node.path
            if not p or type(p[0]) is not str:
                return None
            if p[0] not in names:
                names[p[0]] = f"f{len(names)}"
    if not names:
        return None
    ns: dict[str, Any] = dict(HELPERS)
    ns["_recover"] = recovery(root, False)
    gen = Gen(ns, True, "s", fields=names)
    gen.prepare(root)
    test = gen.T(root)
    # compile once here so that a failure surfaces now, not inside a scan
    compile("\n".join(gen.defs + ["def _check(_s):"] + ["    " + p for p in gen.pre]
                       + [f"    return {test}"]), "<amps-filter-loop>", "exec")
    ff = FieldsFilter(fn, tuple(names), gen.pre, test, gen.defs, ns)
    return ff if ff.decoder_for(()) is not None else None


