"""``Protocols/Protocol``: a named customisation of a protocol module, and the options of the
``websocket`` module (Configuration Reference, "Websocket Options"):

* ``HTTPHeader`` (repeatable): a header added to the upgrade's response, checked as an Admin
  ``Header`` is (:func:`~config.httpd.headers.parse_header`);
* ``WWWAuthenticate``: the upgrade must carry credentials; ``Basic realm="..."`` is served (the
  ``Authorization: Basic`` credentials are checked by the transport's modules). ``Negotiate``
  cannot be verified by the emulator's modules: warned about, and the upgrade is not challenged;
* ``TrustedAdmin`` (default false): an upgrade carrying a valid Admin session cookie logs on as
  that Admin user.

The options of another module, and unknown ones, are warned about and ignored.
"""

from __future__ import annotations

from typing import Any

from ..instance_sections import BUILTIN_PROTOCOLS, PROTOCOL_SYNONYMS
from ..model import ProtocolDef
from ..schema import Ctx, ignored_element, label, unknown_element
from ..units import parse_bool
from ..xmlload import Node
from .headers import MAX_HEADERS, header_value, parse_header

__all__ = ["read_protocols", "websocket_options"]

_OTHER_MODULE_NOTE = "only the websocket module's options are implemented"


def websocket_options(node: Node, ctx: Ctx) -> dict[str, Any]:
    """The websocket options of the ``Protocol`` ``node`` as :class:`ProtocolDef` fields
    (every problem reported; a bad option is left out)."""
    where = label(node)
    out: dict[str, Any] = {}
    headers: list[tuple[str, str]] = []
    seen: dict[str, Node] = {}
    for opt in node.children:
        if opt.tag in ("Name", "Module"):
            continue
        if opt.tag not in ("HTTPHeader", "WWWAuthenticate", "TrustedAdmin"):
            ignored_element(ctx, opt, where, "not a websocket protocol option")
            continue
        if opt.children or not opt.text:
            ctx.err(opt, f"<{opt.tag}> in {where} must hold a value")
            continue
        if opt.tag != "HTTPHeader" and opt.tag in seen:
            first = seen[opt.tag]
            ctx.err(opt, f"duplicate <{opt.tag}> in {where}: already given at {first.file}:{first.line}")
            continue
        seen.setdefault(opt.tag, opt)
        try:
            if opt.tag == "HTTPHeader":
                if len(headers) == MAX_HEADERS:
                    raise ValueError(f"at most {MAX_HEADERS} headers")
                headers.append(parse_header(opt.text))
            elif opt.tag == "TrustedAdmin":
                out["trusted_admin"] = parse_bool(opt.text)
            else:
                out["www_authenticate"] = _challenge(opt, ctx, where)
        except ValueError as exc:
            ctx.err(opt, f"invalid <{opt.tag}> in {where}: {exc}")
    if headers:
        out["http_headers"] = tuple(headers)
    return out


def _challenge(opt: Node, ctx: Ctx, where: str) -> str | None:
    """A ``WWWAuthenticate`` the emulator serves (Basic), else None after a warning."""
    value = header_value(opt.text)
    scheme, _, params = value.partition(" ")
    if scheme.lower() != "basic":
        ctx.warn(opt, f"<WWWAuthenticate> {value!r} in {where}: the emulator's authentication "
                      "modules cannot verify it, so the upgrade is not challenged (the logon "
                      "command authenticates as usual); use Basic realm=\"...\"")
        return None
    if "realm=" not in params.replace(" ", "").lower():
        raise ValueError(f"{value!r}: a Basic challenge needs realm=\"...\"")
    return value


def read_protocols(node: Node, ctx: Ctx) -> tuple[ProtocolDef, ...]:
    """``Protocols/Protocol``: ``Name`` + ``Module`` (the protocol it is built on) + module options.

    The names are recorded in ``ctx`` first, so transports can refer to them."""
    where = "<Protocols>"
    if node.text:
        ctx.err(node, f"unexpected text {node.text[:40]!r} in {where}")
    out: list[ProtocolDef] = []
    for child in node.children:
        if child.tag != "Protocol":
            unknown_element(ctx, child, where, ["Protocol"])
            continue
        name_node, module_node = child.child("Name"), child.child("Module")
        ok = True
        for tag, n in (("Name", name_node), ("Module", module_node)):
            if n is None:
                ctx.err(child, f"<Protocol> in {where} is missing required element <{tag}>")
                ok = False
            elif not n.text or n.children:
                ctx.err(n, f"<{tag}> in <Protocol> must hold a name")
                ok = False
        if not ok or name_node is None or module_node is None:  # reported above
            continue
        name, module = name_node.text, module_node.text
        if name in ctx.protocols:
            ctx.err(name_node, f"duplicate protocol name {name!r} in {where}")
            continue
        low = module.lower()
        builtin = low in (*BUILTIN_PROTOCOLS, *PROTOCOL_SYNONYMS)
        base = PROTOCOL_SYNONYMS.get(low, low) if builtin else module
        options = tuple((opt.tag, opt.text) for opt in child.children
                        if opt.tag not in ("Name", "Module"))
        if base == "websocket":
            served = websocket_options(child, ctx)
        else:
            served = {}
            for opt in child.children:
                if opt.tag not in ("Name", "Module"):
                    ignored_element(ctx, opt, label(child), _OTHER_MODULE_NOTE)
        ctx.protocols[name] = base
        out.append(ProtocolDef(file=child.file, line=child.line, name=name, module=base,
                               options=options, **served))
    return tuple(out)
