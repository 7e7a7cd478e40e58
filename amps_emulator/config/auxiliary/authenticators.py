"""The ``Options`` of an ``Authenticator`` (the credentials of an outgoing replication
connection) whose ``Module`` loads one of AMPS's authenticator libraries.

* ``libamps_exec_authenticator.so``: ``Command`` (required: the program and its arguments,
  split as a shell would split them; ``{{AMPS_USER_NAME}}`` in an argument stands for the user
  name), ``UserName`` (required), ``MaxLength`` (bytes of the program's output read, 1024);
* ``libamps_multi_authenticator.so``: ``LDAP.Username`` and ``LDAP.PasswordFile`` (a user name
  and the file its password is read from at each connection); its ``Kerberos.SPN`` and
  ``Kerberos.Keytab`` are refused (the emulator has no Kerberos), and so is a block that gives
  no method at all, as AMPS refuses to start without one.
"""

from __future__ import annotations

import os
import shlex
import shutil
from typing import Any

from ..schema import MISSING, Ctx
from ..units import parse_count
from ..xmlload import Node
from .catalogue import EXEC_AUTHENTICATOR_LIBRARY, MULTI_AUTHENTICATOR_LIBRARY

__all__ = ["AUTHENTICATOR_LIBRARIES", "DEFAULT_MAX_LENGTH", "USER_NAME_TOKEN",
           "read_library_authenticator"]

AUTHENTICATOR_LIBRARIES = frozenset({EXEC_AUTHENTICATOR_LIBRARY, MULTI_AUTHENTICATOR_LIBRARY})
DEFAULT_MAX_LENGTH = 1024
USER_NAME_TOKEN = "{{AMPS_USER_NAME}}"

_EXEC = {"Command": "command", "UserName": "user", "MaxLength": "max_length"}
_MULTI = {"LDAP.Username": "user", "LDAP.PasswordFile": "password_file",
          "Kerberos.SPN": None, "Kerberos.Keytab": None}


def _values(options: Node | None, known: dict[str, str | None], where: str, ctx: Ctx
            ) -> dict[str, tuple[str, Node]] | Any:
    out: dict[str, tuple[str, Node]] = {}
    for opt in options.children if options is not None else ():
        if opt.tag not in known:
            ctx.err(opt, f"{where}: unknown option <{opt.tag}> (options: {', '.join(known)})")
            return MISSING
        if opt.children or not opt.text.strip():
            ctx.err(opt, f"{where}: option <{opt.tag}> must hold a value")
            return MISSING
        out[opt.tag] = (opt.text.strip(), opt)
    return out


def _exec(values: dict[str, tuple[str, Node]], node: Node, where: str, ctx: Ctx) -> Any:
    for tag in ("Command", "UserName"):
        if tag not in values:
            ctx.err(node, f"{where}: the exec authenticator needs <{tag}> (AMPS does not start "
                          "without it)")
            return MISSING
    command, cnode = values["Command"]
    try:
        argv = tuple(shlex.split(command))
    except ValueError as exc:
        ctx.err(cnode, f"{where}: <Command> cannot be split into a program and arguments: {exc}")
        return MISSING
    if not argv:
        ctx.err(cnode, f"{where}: <Command> names no program")
        return MISSING
    max_length = DEFAULT_MAX_LENGTH
    if "MaxLength" in values:
        text, mnode = values["MaxLength"]
        try:
            max_length = parse_count(text)
        except ValueError as exc:
            ctx.err(mnode, f"{where}: <MaxLength>: {exc}")
            return MISSING
        if max_length < 1:
            ctx.err(mnode, f"{where}: <MaxLength> must be 1 or more, not {text!r}")
            return MISSING
    program = argv[0]
    found = shutil.which(program) if os.sep not in program else (
        program if os.access(program, os.X_OK) else None)
    if found is None:
        ctx.warn(cnode, f"{where}: <Command> program {program!r} is not an executable file "
                        "(relative to the working directory or on PATH) yet; the link is "
                        "refused until it is")
    return {"user": values["UserName"][0], "command": argv, "max_length": max_length}


def _multi(values: dict[str, tuple[str, Node]], node: Node, where: str, ctx: Ctx) -> Any:
    for tag in ("Kerberos.SPN", "Kerberos.Keytab"):
        if tag in values:
            ctx.err(values[tag][1], f"{where}: <{tag}>: Kerberos credentials are not implemented "
                                    "by the emulator (LDAP.Username and LDAP.PasswordFile are)")
            return MISSING
    if "LDAP.PasswordFile" in values and "LDAP.Username" not in values:
        ctx.err(values["LDAP.PasswordFile"][1], f"{where}: <LDAP.PasswordFile> needs "
                                                "<LDAP.Username>")
        return MISSING
    if "LDAP.Username" not in values:
        ctx.err(node, f"{where}: the multimechanism authenticator needs a method to provide "
                      "credentials (LDAP.Username, LDAP.PasswordFile); AMPS does not start "
                      "without one")
        return MISSING
    out = {"user": values["LDAP.Username"][0]}
    if "LDAP.PasswordFile" in values:
        out["password_file"] = values["LDAP.PasswordFile"][0]
    return out


def read_library_authenticator(library: str, options: Node | None, node: Node, ctx: Ctx) -> Any:
    """The ``ReplicationAuthenticator`` fields of an ``Authenticator`` whose module loads
    ``library`` (one of :data:`AUTHENTICATOR_LIBRARIES`), or MISSING (reported)."""
    where = f"<Authenticator> ({library})"
    if library == EXEC_AUTHENTICATOR_LIBRARY:
        values = _values(options, dict(_EXEC), where, ctx)
        return values if values is MISSING else _exec(values, node, where, ctx)
    values = _values(options, dict(_MULTI), where, ctx)
    return values if values is MISSING else _multi(values, node, where, ctx)
