"""``Modules/Module``: which auxiliary library each declared module loads, and the options
read where it is loaded (the experimental function module's ``Lookup``)."""

from __future__ import annotations

import os

from amps_emulator.protocol.filter.modules import EXPERIMENTAL_LIBRARY, LEGACY_LIBRARY

from ..schema import Ctx
from ..security import LIBRARIES as SECURITY_LIBRARIES
from ..security import UNIMPLEMENTED_LIBRARIES
from ..values import parse_xpath
from ..xmlload import Node
from .model import AuxModules, ValueLookupDef

__all__ = ["CHAINING_LIBRARIES", "EXEC_AUTHENTICATOR_LIBRARY", "MULTI_AUTHENTICATOR_LIBRARY",
           "library_key", "read_aux_modules"]

#: the chaining key generator, under the name of its configuration examples and of its overview
CHAINING_LIBRARIES = frozenset({"libamps_id_chaining_key_generator.so",
                                "libamps_id_chaining_generator.so"})
EXEC_AUTHENTICATOR_LIBRARY = "libamps_exec_authenticator.so"
MULTI_AUTHENTICATOR_LIBRARY = "libamps_multi_authenticator.so"

#: every library the emulator implements besides the security ones
AUX_LIBRARIES = frozenset({LEGACY_LIBRARY, EXPERIMENTAL_LIBRARY, EXEC_AUTHENTICATOR_LIBRARY,
                           MULTI_AUTHENTICATOR_LIBRARY, *CHAINING_LIBRARIES})
#: libraries whose load-time Options AMPS ignores (their options go where they are used)
_NO_LOAD_OPTIONS = frozenset({LEGACY_LIBRARY, EXEC_AUTHENTICATOR_LIBRARY,
                              MULTI_AUTHENTICATOR_LIBRARY, *CHAINING_LIBRARIES})


def library_key(library: str) -> str:
    """``/opt/amps/lib/libamps_exec_authenticator.so`` -> ``libamps_exec_authenticator.so``."""
    return os.path.basename(library.strip())


def _lookup(node: Node, ctx: Ctx) -> ValueLookupDef | None:
    """``name;count;message type;topic;return field;lookup field...`` (all required)."""
    where = "<Lookup>"
    parts = [p.strip() for p in node.text.split(";")]
    if len(parts) < 6 or not all(parts):
        ctx.err(node, f"{where} {node.text!r}: expected name;parameter count;message type;"
                      "topic;return field;lookup field... (every part required)")
        return None
    name, count, message_type, topic, ret, *fields = parts
    if not count.isdigit() or int(count) < 1:
        ctx.err(node, f"{where} {name!r}: the parameter count {count!r} is not a whole number "
                      "of 1 or more")
        return None
    if int(count) != len(fields):
        ctx.err(node, f"{where} {name!r}: declares {count} parameter(s) but names {len(fields)} "
                      "lookup field(s)")
        return None
    try:
        message_type = ctx.message_type(message_type)
        ret = parse_xpath(ret)
        fields = [parse_xpath(f) for f in fields]
    except ValueError as exc:
        ctx.err(node, f"{where} {name!r}: {exc}")
        return None
    return ValueLookupDef(name=name, message_type=message_type, topic=topic, return_field=ret,
                          fields=tuple(fields), file=node.file, line=node.line)


def _experimental_options(options: Node | None, ctx: Ctx) -> list[ValueLookupDef]:
    lookups: list[ValueLookupDef] = []
    for opt in options.children if options is not None else ():
        if opt.tag != "Lookup":
            ctx.err(opt, f"unknown option <{opt.tag}> of {EXPERIMENTAL_LIBRARY} (options: Lookup)")
            continue
        found = _lookup(opt, ctx)
        if found is None:
            continue
        twin = next((x for x in lookups if x.name == found.name), None)
        if twin is not None:
            ctx.err(opt, f"<Lookup> {found.name!r} is already declared at {twin.file}:{twin.line}")
            continue
        lookups.append(found)
    return lookups


def read_aux_modules(node: Node | None, ctx: Ctx) -> AuxModules:
    """Read ``Modules``: record each declared module's library in ``ctx.module_libraries``
    (name -> library file name, for the ``KeyGenerator`` and ``Authenticator`` readers),
    read the experimental module's lookups, warn about each library the emulator does not
    implement (the module is ignored). Malformed entries are the section reader's to report."""
    libraries: set[str] = set()
    lookups: list[ValueLookupDef] = []
    for m in node.children if node is not None else ():
        name, lib, options = m.child("Name"), m.child("Library"), m.child("Options")
        if m.tag != "Module" or name is None or lib is None or not name.text or not lib.text:
            if m.tag == "Module":
                ctx.warn(m, "<Module> needs a <Name> and a <Library>; the module is ignored")
            continue
        key = library_key(lib.text)
        ctx.module_libraries[name.text] = key
        if key in SECURITY_LIBRARIES or key in UNIMPLEMENTED_LIBRARIES:
            continue  # (config.security reads and checks these)
        if key not in AUX_LIBRARIES:
            ctx.warn(m, f"<Module> {name.text!r}: library {lib.text.strip()!r} is not one the "
                        "emulator implements; the module is ignored")
            continue
        if key in (LEGACY_LIBRARY, EXPERIMENTAL_LIBRARY):
            libraries.add(key)
        if key == EXPERIMENTAL_LIBRARY:
            lookups += _experimental_options(options, ctx)
        elif key in _NO_LOAD_OPTIONS and options is not None and options.children:
            ctx.warn(options, f"<Module> {name.text!r}: {key} takes no options where it is "
                              "loaded; these are ignored")
    return AuxModules(function_libraries=frozenset(libraries), lookups=tuple(lookups))
