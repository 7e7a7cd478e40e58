"""Declarative reading of an element's children, with every problem located and collected.

A section is described by a :class:`Spec`: which child elements it knows (each an
:class:`Elem`, several tags may share one attribute to express AMPS synonyms such as
``Topic`` for ``Name``) and which real AMPS elements it tolerates but ignores. :func:`read`
walks the children once and reports, without stopping:

* unknown elements as errors, with a "did you mean" hint (element names are case-sensitive);
* ignored-but-real AMPS elements as one warning each;
* invalid values, duplicates and missing required elements as errors.

The :class:`Ctx` carries the error and warning lists for the whole load plus the few facts
that later sections need (known message types, the emulator SOW directory).

Why not ``msgspec.convert`` straight from dicts: its errors carry a JSON path, not the file
and line of the element, and the AMPS format needs synonyms, repeated elements and
"warn and ignore" semantics; so values are parsed field by field here and the frozen
structs in :mod:`config.model` are built directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigIssue
from .values import suggest
from .xmlload import Node

MISSING: Any = object()

#: message types AMPS loads by default
BUILTIN_MESSAGE_TYPES = ("json", "fix", "nvfix", "xml", "bflat", "msgpack", "bson", "binary")


class Ctx:
    """Error/warning sink and shared facts for one load."""

    #: sequence number placing an issue after every element (no element to anchor it)
    LAST = 1 << 62

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self._errors: list[tuple[int, int, ConfigIssue]] = []
        self._warnings: list[tuple[int, int, ConfigIssue]] = []
        self.message_types: list[str] = list(BUILTIN_MESSAGE_TYPES)
        self.sow_directory: str | None = None
        #: <Protocols>/<Protocol> names -> the protocol module each is built on
        self.protocols: dict[str, str] = {}
        #: <Modules>/<Module> names -> the library file name each loads
        self.module_libraries: dict[str, str] = {}

    # the xmlload.Issues protocol
    def error(self, file: str, line: int, reason: str, seq: int = 0) -> None:
        self._errors.append((seq, len(self._errors), ConfigIssue(file, line, reason)))

    def err(self, node: Node, reason: str) -> None:
        self.error(node.file, node.line, reason, node.seq)

    def warn(self, node: Node, reason: str) -> None:
        self.warn_at(node.file, node.line, reason, node.seq)

    def warn_at(self, file: str, line: int, reason: str, seq: int = LAST) -> None:
        self._warnings.append((seq, len(self._warnings), ConfigIssue(file, line, reason)))

    @property
    def errors(self) -> list[ConfigIssue]:
        """Every error so far, in document order."""
        return [issue for _, _, issue in sorted(self._errors)]

    @property
    def warnings(self) -> list[ConfigIssue]:
        """Every warning so far, in document order."""
        return [issue for _, _, issue in sorted(self._warnings)]

    def message_type(self, text: str) -> str:
        """Validate a MessageType name against the built-in and declared message types."""
        name = text.strip()
        if name in self.message_types:
            return name
        hint = suggest(name, self.message_types)
        extra = f"; did you mean {hint!r}?" if hint else ""
        raise ValueError(
            f"unknown message type {name!r} (known: {', '.join(self.message_types)}){extra}"
        )


@dataclass(frozen=True)
class Elem:
    """One known child element.

    ``parse`` turns the element's text into a value (raising ``ValueError``); ``node`` instead
    receives the element itself (for structured children) and returns a value or ``MISSING``
    after reporting its own errors. ``multiple`` collects every occurrence into a list.
    """

    attr: str
    parse: Callable[[str], Any] | None = None
    node: Callable[[Node, Ctx], Any] | None = None
    required: bool = False
    multiple: bool = False


@dataclass(frozen=True)
class Spec:
    elems: Mapping[str, Elem]
    ignored: frozenset[str] = field(default_factory=frozenset)
    #: optional explanation appended to the warning for specific ignored elements
    ignore_notes: Mapping[str, str] = field(default_factory=dict)

    def primary_tag(self, attr: str) -> str:
        return next(tag for tag, e in self.elems.items() if e.attr == attr)


@dataclass
class Read:
    values: dict[str, Any]
    nodes: dict[str, Node]
    ok: bool

    def get(self, attr: str, default: Any = None) -> Any:
        return self.values.get(attr, default)


def label(node: Node) -> str:
    """``<Transport> 'json-tcp'``: the element and, when it has one, its Name."""
    for tag in ("Name", "Topic"):
        c = node.child(tag)
        if c is not None and not c.children and c.text:
            return f"<{node.tag}> {c.text!r}"
    return f"<{node.tag}>"


def unknown_element(ctx: Ctx, child: Node, where: str, known: Iterable[str]) -> None:
    known = list(known)
    hint = suggest(child.tag, known)
    if hint is not None and hint.lower() == child.tag.lower():
        extra = f"; element names are case-sensitive, did you mean <{hint}>?"
    elif hint is not None:
        extra = f"; did you mean <{hint}>?"
    else:
        extra = ""
    ctx.err(child, f"unknown element <{child.tag}> in {where}{extra}")


def ignored_element(ctx: Ctx, child: Node, where: str, note: str = "") -> None:
    child.ignored = True
    extra = f" ({note})" if note else ""
    ctx.warn(child, f"<{child.tag}> in {where} is not supported by the emulator and is ignored{extra}")


def leaf_text(child: Node, ctx: Ctx, where: str) -> str | Any:
    """The text of a value element, or MISSING (reported) if it is empty or has children.

    An element that references an unset ``${VARIABLE}`` gives MISSING without a message here:
    the unset variable itself is reported once by :func:`config.xmlload.report_missing_env`.
    """
    if child.missing_env:
        return MISSING
    if child.children:
        ctx.err(child, f"<{child.tag}> in {where} must hold a value, not elements")
        return MISSING
    if not child.text:
        ctx.err(child, f"empty <{child.tag}> in {where}")
        return MISSING
    return child.text


def check_no_text(node: Node, ctx: Ctx, where: str | None = None) -> bool:
    if node.text:
        ctx.err(node, f"unexpected text {node.text[:40]!r} in {where or label(node)}")
        return False
    return True


def read(node: Node, spec: Spec, ctx: Ctx, where: str | None = None) -> Read:
    """Read ``node``'s children according to ``spec``."""
    where = where or label(node)
    values: dict[str, Any] = {}
    nodes: dict[str, Node] = {}
    attempted: set[str] = set()
    ok = check_no_text(node, ctx, where)
    for child in node.children:
        elem = spec.elems.get(child.tag)
        if elem is None:
            if child.tag in spec.ignored:
                ignored_element(ctx, child, where, spec.ignore_notes.get(child.tag, ""))
            else:
                unknown_element(ctx, child, where, [*spec.elems, *spec.ignored])
                ok = False
            continue
        if not elem.multiple and elem.attr in nodes:
            first = nodes[elem.attr]
            same = "" if first.tag == child.tag else f" (its synonym <{first.tag}>)"
            ctx.err(child, f"duplicate <{child.tag}> in {where}{same}: already given at "
                           f"{first.file}:{first.line}")
            ok = False
            continue
        attempted.add(elem.attr)
        nodes.setdefault(elem.attr, child)
        if elem.node is not None:
            value = elem.node(child, ctx)
        else:
            text = leaf_text(child, ctx, where)
            if text is MISSING:
                value = MISSING
            else:
                try:
                    value = elem.parse(text) if elem.parse is not None else text
                except ValueError as e:
                    ctx.err(child, f"invalid <{child.tag}> in {where}: {e}")
                    value = MISSING
        if value is MISSING:
            ok = False
            continue
        if elem.multiple:
            values.setdefault(elem.attr, []).append(value)
        else:
            values[elem.attr] = value
    for attr in {e.attr for e in spec.elems.values() if e.required}:
        if attr not in attempted:
            ctx.err(node, f"{where} is missing required element <{spec.primary_tag(attr)}>")
            ok = False
    return Read(values, nodes, ok)


# --- small parser combinators -------------------------------------------------------------

def positive(parse: Callable[[str], Any], what: str = "value") -> Callable[[str], Any]:
    def p(text: str) -> Any:
        v = parse(text)
        if v <= 0:
            raise ValueError(f"{what} must be greater than zero, got {text.strip()!r}")
        return v
    return p


def at_least(parse: Callable[[str], Any], minimum: float, shown: str) -> Callable[[str], Any]:
    def p(text: str) -> Any:
        v = parse(text)
        if v < minimum:
            raise ValueError(f"{text.strip()!r} is below the minimum of {shown}")
        return v
    return p


def each(parse: Callable[[str], Any], split: Callable[[str], tuple[str, ...]]) -> Callable[[str], tuple]:
    def p(text: str) -> tuple:
        return tuple(parse(item) for item in split(text))
    return p


def text(value: str) -> str:
    return value


def children_texts(node: Node, ctx: Ctx, child_tag: str, parse: Callable[[str], Any] = text,
                   *, where: str | None = None) -> tuple | Any:
    """A container of repeated value elements (``HashIndex/Key``, ``Projection/Field``)."""
    where = where or f"<{node.tag}>"
    ok = check_no_text(node, ctx, where)
    out = []
    for child in node.children:
        if child.tag != child_tag:
            unknown_element(ctx, child, where, [child_tag])
            ok = False
            continue
        t = leaf_text(child, ctx, where)
        if t is MISSING:
            ok = False
            continue
        try:
            out.append(parse(t))
        except ValueError as e:
            ctx.err(child, f"invalid <{child_tag}> in {where}: {e}")
            ok = False
    if ok and not out:
        ctx.err(node, f"{where} must contain at least one <{child_tag}>")
        ok = False
    return tuple(out) if ok else MISSING
