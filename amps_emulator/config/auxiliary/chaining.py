"""A SOW ``Topic``'s ``KeyGenerator``: the chaining key generator's options.

``Module`` names a ``Modules/Module`` (it must be declared). When that module loads the
chaining library, ``Options`` are read here: ``Key`` (repeatable: the first is the primary
field unless ``Primary`` is given, the others secondary), ``Primary``, ``Secondary``
(repeatable), ``FileName`` and ``Validation``; a primary and at least one secondary field are
required. A module of any other library is warned about and ignored (the topic then has no
generated SowKey), as before the emulator knew this module.
"""

from __future__ import annotations

from typing import Any

from ..schema import MISSING, Ctx
from ..units import parse_bool
from ..values import parse_xpath, suggest
from ..xmlload import Node
from .catalogue import CHAINING_LIBRARIES
from .model import ChainingKeys

__all__ = ["read_key_generator"]

_OPTIONS = ("Key", "Primary", "Secondary", "FileName", "Validation")


def _fields(ctx: Ctx, options: Node | None) -> tuple[dict[str, list[str]], bool]:
    found: dict[str, list[str]] = {tag: [] for tag in _OPTIONS}
    ok = True
    for opt in options.children if options is not None else ():
        if opt.tag not in _OPTIONS:
            hint = suggest(opt.tag, _OPTIONS)
            extra = f"; did you mean <{hint}>?" if hint else ""
            ctx.err(opt, f"<KeyGenerator>: unknown option <{opt.tag}> of the chaining key "
                         f"generator (options: {', '.join(_OPTIONS)}){extra}")
            ok = False
            continue
        if opt.children or not opt.text:
            ctx.err(opt, f"<KeyGenerator>: option <{opt.tag}> must hold a value")
            ok = False
            continue
        if opt.tag in ("Primary", "FileName", "Validation") and found[opt.tag]:
            ctx.err(opt, f"<KeyGenerator>: option <{opt.tag}> is given more than once")
            ok = False
            continue
        try:
            value = parse_xpath(opt.text) if opt.tag in ("Key", "Primary", "Secondary") \
                else opt.text.strip()
            if opt.tag == "Validation":
                parse_bool(value)
        except ValueError as exc:
            ctx.err(opt, f"<KeyGenerator>: <{opt.tag}>: {exc}")
            ok = False
            continue
        found[opt.tag].append(value)
    return found, ok


def read_key_generator(node: Node, ctx: Ctx) -> Any:
    """A ``KeyGenerator``: :class:`ChainingKeys`, None (another library: warned, ignored),
    or MISSING (an error, reported)."""
    module_node = node.child("Module")
    if module_node is None or not module_node.text:
        ctx.err(node, "<KeyGenerator> is missing required element <Module>")
        return MISSING
    for child in node.children:
        if child.tag not in ("Module", "Options"):
            ctx.err(child, f"unknown element <{child.tag}> in <KeyGenerator> (expected <Module>, "
                           "<Options>)")
            return MISSING
    module = module_node.text.strip()
    library = ctx.module_libraries.get(module)
    if library is None:
        hint = suggest(module, list(ctx.module_libraries))
        extra = f"; did you mean {hint!r}?" if hint else ""
        ctx.err(module_node, f"<KeyGenerator>: module {module!r} is not declared in <Modules>{extra}")
        return MISSING
    if library not in CHAINING_LIBRARIES:
        ctx.warn(node, f"<KeyGenerator>: module {module!r} loads {library}, a key generator the "
                       "emulator does not implement; it is ignored")
        return None
    found, ok = _fields(ctx, node.child("Options"))
    if not ok:
        return MISSING
    keys = found["Key"] + found["Secondary"]
    primary: str | None = None
    if found["Primary"]:
        primary, secondary = found["Primary"][0], keys
    else:
        primary, secondary = (found["Key"][0] if found["Key"] else None), keys[1:]
    if primary is None or not secondary:
        ctx.err(node, "<KeyGenerator>: the chaining key generator needs a primary field and at "
                      "least one secondary field (<Primary>/<Key> then <Key>/<Secondary>)")
        return MISSING
    if primary in secondary or len(set(secondary)) != len(secondary):
        ctx.err(node, "<KeyGenerator>: each chaining field may be given once")
        return MISSING
    validation = parse_bool(found["Validation"][0]) if found["Validation"] else False
    return ChainingKeys(module=module, primary=primary, secondary=tuple(secondary),
                        file_name=found["FileName"][0] if found["FileName"] else None,
                        validation=validation)
