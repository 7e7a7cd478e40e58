"""``xml``: any XML document; fields are element paths from the root element.

Tree: ``{root_name: value}``.  An element's value is

* its text, typed as AMPS infers it (:func:`~.base.infer_scalar`; empty is NULL), when it has
  no attributes and no child elements: ``<Symbol>IBM</Symbol>`` -> ``"IBM"``;
* otherwise a ``dict``: each attribute as ``"@name"`` (so ``/Order/@id`` addresses it, as AMPS
  does), each child element by its name (an element repeated under one parent becomes a
  ``list``, read by filters with the "any element" rule), and the element's own text, if it is
  not only white space, as ``"#text"`` (addressable as ``[/Order/#text]``).

Names are kept as written (``ns:Order``; no namespace processing: AMPS documents none).
Comments and processing instructions are ignored; CDATA is text.

Safety: the body is parsed with the standard library's expat parser, and any document type
declaration is refused, so no entity can be declared, expanded or fetched (billion laughs,
external entities).  Nesting deeper than :data:`~.base.MAX_DEPTH` is refused.

Writing (views, delta results): the tree must have exactly one root key; ``None`` is an empty
element, a ``list`` repeats the element, ``"@..."`` keys become attributes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from xml.parsers import expat

from .base import (
    MAX_DEPTH,
    Capabilities,
    CodecError,
    MessageCodec,
    Tree,
    infer_scalar,
    text_or_none,
    utf8,
    value_text,
)

__all__ = ["XmlCodec"]

TEXT_KEY = "#text"


class _Refused(Exception):
    """Raised inside expat handlers to stop the parse."""


class _Element:
    __slots__ = ("name", "attrs", "children", "text")

    def __init__(self, name: str, attrs: dict[str, str]) -> None:
        self.name = name
        self.attrs = attrs
        self.children: list[tuple[str, Tree]] = []
        self.text: list[str] = []


def _refuse_doctype(*_args: object) -> None:
    raise _Refused("XML document type declarations (DTDs, entities) are refused")


def _parse(body: bytes, conv: Callable[[str], Tree]) -> Tree:
    p = expat.ParserCreate()
    p.buffer_text = True
    p.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    stack: list[_Element] = []
    result: list[tuple[str, Tree]] = []

    def start(name: str, attrs: dict[str, str]) -> None:
        if len(stack) >= MAX_DEPTH:
            raise _Refused("XML nested too deeply")
        stack.append(_Element(name, attrs))

    def end(name: str) -> None:
        el = stack.pop()
        text = "".join(el.text)
        value: Tree
        if not el.attrs and not el.children:
            value = conv(text)
        else:
            d: dict[str, Tree] = {}
            for k, v in el.attrs.items():
                d["@" + k] = conv(v)
            if text.strip():
                d[TEXT_KEY] = conv(text)
            repeated: set[str] = set()
            for cname, cval in el.children:
                if cname not in d:
                    d[cname] = cval
                elif cname in repeated:
                    prev = d[cname]
                    if isinstance(prev, list):
                        prev.append(cval)
                else:
                    repeated.add(cname)
                    d[cname] = [d[cname], cval]
            value = d
        if stack:
            stack[-1].children.append((el.name, value))
        else:
            result.append((el.name, value))

    def chars(data: str) -> None:
        if stack:
            stack[-1].text.append(data)

    p.StartElementHandler = start
    p.EndElementHandler = end
    p.CharacterDataHandler = chars
    p.StartDoctypeDeclHandler = _refuse_doctype
    p.EntityDeclHandler = _refuse_doctype
    try:
        p.Parse(bytes(body), True)
    except _Refused as e:
        raise CodecError(str(e)) from None
    except (expat.ExpatError, ValueError, LookupError, UnicodeError, RecursionError) as e:
        raise CodecError(f"malformed XML: {e}") from None
    if len(result) != 1:
        raise CodecError("an XML message has one root element")
    name, value = result[0]
    return {name: value}


# XML 1.0 names, the ASCII-centred subset plus any non-ASCII letter
_NAME_RE = re.compile(r"[A-Za-z_:\u00c0-\ufffd][\w.:\-\u00b7\u00c0-\ufffd]*")
# \r, \n, \t as references: the parser would normalise them (line ends, attribute values)
_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "\r": "&#13;", "\n": "&#10;",
            "\t": "&#9;"}
_ESC_RE = re.compile('[&<>"\r\n\t]')
# characters XML 1.0 cannot carry at all
_BAD_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def _esc(text: str) -> str:
    if _BAD_CHARS.search(text):
        raise CodecError("text with characters XML cannot carry")
    return _ESC_RE.sub(lambda m: _ESCAPES[m.group()], text)


def _name(name: str) -> str:
    if not _NAME_RE.fullmatch(name) or _BAD_CHARS.search(name):
        raise CodecError(f"{name!r} is not an XML name")
    return name


def _scalar_text(v: Tree) -> str:
    t = value_text(v)
    return "" if t is None else t


def _write(out: list[str], name: str, value: Tree, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise CodecError("tree nested too deeply for XML")
    if isinstance(value, list):
        for item in value:
            if isinstance(item, list):
                raise CodecError("XML cannot express an array of arrays")
            _write(out, name, item, depth + 1)
        return
    n = _name(name)
    if value is None:
        out.append(f"<{n}/>")
        return
    if not isinstance(value, dict):
        out.append(f"<{n}>{_esc(_scalar_text(value))}</{n}>")
        return
    attrs = []
    for k, v in value.items():
        if k.startswith("@"):
            if isinstance(v, (dict, list)):
                raise CodecError(f"attribute {k} must be a scalar")
            attrs.append(f' {_name(k[1:])}="{_esc(_scalar_text(v))}"')
    body: list[str] = []
    for k, v in value.items():
        if k == TEXT_KEY:
            if isinstance(v, (dict, list)):
                raise CodecError("element text must be a scalar")
            body.append(_esc(_scalar_text(v)))
        elif not k.startswith("@"):
            _write(body, k, v, depth + 1)
    if body:
        out.append(f"<{n}{''.join(attrs)}>{''.join(body)}</{n}>")
    else:
        out.append(f"<{n}{''.join(attrs)}/>")


class XmlCodec(MessageCodec):
    name = "xml"
    capabilities = Capabilities()

    def decode(self, body: bytes) -> Tree:
        return _parse(body, infer_scalar)

    def text_tree(self, body: bytes) -> Tree:
        return _parse(body, text_or_none)

    def encode(self, tree: Tree) -> bytes:
        if not isinstance(tree, dict) or len(tree) != 1:
            raise CodecError("an XML message needs exactly one root element")
        ((root, value),) = tree.items()
        if isinstance(value, list):
            raise CodecError("an XML message has one root element, not an array")
        out: list[str] = []
        _write(out, root, value, 0)
        return utf8("".join(out))
