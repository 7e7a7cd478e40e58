"""The ``Authentication`` / ``Entitlement`` configuration: typed blocks, module catalogue, resolution.

It lives in the config layer (the loader reads it with the rest of the file); the auth layer
re-exports it as ``amps_emulator.auth.config`` and builds the modules from it.

An AMPS configuration may carry an ``Authentication`` and an ``Entitlement`` block at instance
level, inside each ``Transports/Transport`` and inside ``Admin``; each names a ``Module`` and may
carry ``Options``. A module is either built in (``amps-default-authentication-module`` ...) or a
name declared in the top-level ``Modules/Module`` list whose ``Library`` is one of the loadable
libraries the emulator implements (``libamps_http_entitlement.so``, the web-entitlements module,
and ``libamps_simple_access_entitlement.so``). A declared module's ``Options`` are its defaults;
the block's own ``Options`` override them option by option.

Resolution (:func:`resolve`): the transport's block, else the instance block, else the default
module of that kind. The Admin interface resolves the same way with its own blocks.

:func:`read_security` turns the element tree the config loader produces (:class:`config.xmlload.Node`)
into a :class:`SecurityConfig`, reporting problems as :class:`config.errors.ConfigIssue` (file and
line) so the config layer can merge them into its own error list; :func:`load_security` raises
:class:`config.errors.ConfigError` instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import msgspec

from .errors import ConfigError, ConfigIssue
from .units import parse_bool, parse_count, parse_duration
from .values import suggest
from .xmlload import Node

__all__ = [
    "AUTHENTICATION", "ENTITLEMENT", "DEFAULT_AUTHENTICATION_MODULE", "DEFAULT_ENTITLEMENT_MODULE",
    "IMPLICIT_AUTHENTICATION_MODULE", "NO_AUTHENTICATION_MODULE", "WEB_LIBRARY", "SIMPLE_ACCESS_LIBRARY",
    "SecurityBlock", "ModuleDecl", "SecurityConfig", "resolve", "read_security", "load_security",
    "block_from_values", "KIND_DEFAULT", "WebOptions", "SimpleAccessOptions", "web_options",
    "simple_access_options", "OptionError",
]

AUTHENTICATION = "Authentication"
ENTITLEMENT = "Entitlement"

DEFAULT_AUTHENTICATION_MODULE = "amps-default-authentication-module"
IMPLICIT_AUTHENTICATION_MODULE = "amps-implicit-authentication-module"
NO_AUTHENTICATION_MODULE = "amps-default-no-authentication-module"
DEFAULT_ENTITLEMENT_MODULE = "amps-default-entitlement-module"

WEB_LIBRARY = "libamps_http_entitlement.so"
SIMPLE_ACCESS_LIBRARY = "libamps_simple_access_entitlement.so"

#: the module each kind of block falls back to
KIND_DEFAULT = {AUTHENTICATION: DEFAULT_AUTHENTICATION_MODULE, ENTITLEMENT: DEFAULT_ENTITLEMENT_MODULE}

#: built-in module -> (the kinds of block it may appear in, the options it takes)
BUILTIN_MODULES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    DEFAULT_AUTHENTICATION_MODULE: (frozenset({AUTHENTICATION}),
                                    frozenset({"AllowSpoofing", "RequireLogon", "RequireUsername"})),
    IMPLICIT_AUTHENTICATION_MODULE: (frozenset({AUTHENTICATION}), frozenset({"AllowSpoofing"})),
    NO_AUTHENTICATION_MODULE: (frozenset({AUTHENTICATION}), frozenset()),
    DEFAULT_ENTITLEMENT_MODULE: (frozenset({ENTITLEMENT}), frozenset()),
}

_WEB_OPTIONS = frozenset({
    "ResourceURI", "CredentialStore", "ConnectionTimeout", "RequestTimeout", "RetryCount", "HTTPHeader",
    "EntitlementTimeout", "ReuseConnections", "ServerAcceptsEmptyAuthId", "EntitlementOnly",
    "Certificate", "Key", "CAKey", "AllowUnverifiedPeer", "AllowSelfSigned",
})
_SIMPLE_OPTIONS = frozenset({"AllowedTopics", "DeniedTopics", "GrantedPermissions"})

#: loadable library -> (the kinds of block it may appear in, the options it takes)
LIBRARIES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    WEB_LIBRARY: (frozenset({AUTHENTICATION, ENTITLEMENT}), _WEB_OPTIONS),
    SIMPLE_ACCESS_LIBRARY: (frozenset({ENTITLEMENT}), _SIMPLE_OPTIONS),
}
#: real AMPS libraries the emulator does not implement (a config naming one is refused, clearly)
UNIMPLEMENTED_LIBRARIES = {
    "libamps_multi_authentication.so": "Kerberos/LDAP authentication",
    "libamps_oauth_authentication.so": "OAuth 2.0 authentication",
}


class OptionError(ValueError):
    """An option value that cannot be used; the message names the option."""


class SecurityBlock(msgspec.Struct, frozen=True, kw_only=True):
    """One resolved ``Authentication`` or ``Entitlement`` block.

    ``module`` is the name as written; ``library`` the library it stands for (``None`` for a
    built-in module). ``options`` are ``(name, value)`` pairs in document order, the declared
    module's first; a repeatable option (``HTTPHeader``) appears once per occurrence.
    """

    kind: str
    module: str
    library: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    file: str = ""
    line: int = 0

    @property
    def implementation(self) -> str:
        """What runs this block: the library for a declared module, else the built-in name."""
        return self.library if self.library is not None else self.module

    def option(self, name: str, default: str | None = None) -> str | None:
        """The last value given for ``name`` (the block's own overrides the module's)."""
        value = default
        for key, v in self.options:
            if key == name:
                value = v
        return value

    def option_values(self, name: str) -> tuple[str, ...]:
        return tuple(v for key, v in self.options if key == name)


class ModuleDecl(msgspec.Struct, frozen=True, kw_only=True):
    """A ``Modules/Module`` declaration: name, library and default options."""

    name: str
    library: str
    options: tuple[tuple[str, str], ...] = ()
    file: str = ""
    line: int = 0


class SecurityConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Every security block of a configuration, resolved per transport and for Admin."""

    authentication: SecurityBlock
    entitlement: SecurityBlock
    #: transport name -> (its Authentication block, its Entitlement block), already resolved
    transports: dict[str, tuple[SecurityBlock, SecurityBlock]] = msgspec.field(default_factory=dict)
    admin_authentication: SecurityBlock | None = None
    admin_entitlement: SecurityBlock | None = None
    #: the directory ``file:`` ResourceURIs are relative to
    config_dir: str = "."

    def for_transport(self, name: str | None) -> tuple[SecurityBlock, SecurityBlock]:
        """(authentication, entitlement) for a transport; an unknown name gets the instance's."""
        if name is not None and name in self.transports:
            return self.transports[name]
        return self.authentication, self.entitlement

    def for_admin(self) -> tuple[SecurityBlock, SecurityBlock]:
        """(authentication, entitlement) for the Admin interface, AMPS's ``amps-admin``
        transport: Admin's own block, else the instance's, else the default module."""
        return (resolve(self.admin_authentication, self.authentication, AUTHENTICATION),
                resolve(self.admin_entitlement, self.entitlement, ENTITLEMENT))

    @property
    def admin_secured(self) -> bool:
        """Whether Admin requests must log on: some block (Admin's own or the instance's)
        applies to it rather than the two default modules, which accept anyone."""
        return self.for_admin() != (default_block(AUTHENTICATION), default_block(ENTITLEMENT))


def default_block(kind: str) -> SecurityBlock:
    return SecurityBlock(kind=kind, module=KIND_DEFAULT[kind])


def resolve(transport: SecurityBlock | None, instance: SecurityBlock | None, kind: str) -> SecurityBlock:
    """The block that applies: the transport's, else the instance's, else the default module."""
    if transport is not None:
        return transport
    if instance is not None:
        return instance
    return default_block(kind)


def _library_key(library: str) -> str:
    """``/opt/amps/lib/libamps_http_entitlement.so`` -> ``libamps_http_entitlement.so``."""
    return os.path.basename(library.strip())


def block_from_values(kind: str, module: str, options: Iterable[tuple[str, str]] = (),
                      modules: dict[str, ModuleDecl] | None = None, *, file: str = "", line: int = 0
                      ) -> SecurityBlock:
    """A checked :class:`SecurityBlock` from plain values; raises ``ValueError`` (no position)
    for an unknown module, a module in the wrong kind of block, or an unknown option."""
    if kind not in KIND_DEFAULT:
        raise ValueError(f"unknown block kind {kind!r} (expected {AUTHENTICATION} or {ENTITLEMENT})")
    own = tuple(options)
    decl = (modules or {}).get(module)
    library: str | None = None
    if module in BUILTIN_MODULES:
        kinds, allowed = BUILTIN_MODULES[module]
        merged = own
    elif decl is not None:
        key = _library_key(decl.library)
        if key in UNIMPLEMENTED_LIBRARIES:
            raise ValueError(f"module {module!r} ({decl.library}, {UNIMPLEMENTED_LIBRARIES[key]}) is not "
                             f"implemented by the emulator")
        if key not in LIBRARIES:
            raise ValueError(f"module {module!r} loads {decl.library!r}, which is not a "
                             f"{kind.lower()} library the emulator implements (known: "
                             f"{', '.join(sorted(LIBRARIES))})")
        kinds, allowed = LIBRARIES[key]
        library = key
        merged = decl.options + own
    else:
        candidates = [m for m, (k, _) in BUILTIN_MODULES.items() if kind in k] + list(modules or {})
        hint = suggest(module, candidates)
        extra = f"; did you mean {hint!r}?" if hint else ""
        raise ValueError(f"unknown {kind.lower()} module {module!r} (neither built in nor declared in "
                         f"<Modules>){extra}")
    if kind not in kinds:
        raise ValueError(f"module {module!r} is not an {kind.lower()} module")
    for name, _value in merged:
        if name not in allowed:
            hint = suggest(name, allowed)
            extra = f"; did you mean {hint!r}?" if hint else ""
            known = ", ".join(sorted(allowed)) or "none"
            raise ValueError(f"module {module!r} has no option <{name}> (options: {known}){extra}")
    block = SecurityBlock(kind=kind, module=module, library=library, options=merged, file=file, line=line)
    # check the option values now, so a bad value is a located configuration error
    if library == WEB_LIBRARY:
        web_options(block, ".")
    elif library == SIMPLE_ACCESS_LIBRARY:
        simple_access_options(block)
    else:
        for name, value in merged:
            try:
                parse_bool(value)
            except ValueError as e:
                raise ValueError(f"<{name}>: {e}") from None
    return block


# --- typed options ----------------------------------------------------------------------------

class WebOptions(msgspec.Struct, frozen=True, kw_only=True):
    """The web-entitlements module's options, typed (seconds for every time)."""

    resource_uri: str
    connection_timeout: float = 2.0
    request_timeout: float = 5.0
    retry_count: int = 0
    headers: tuple[str, ...] = ()
    entitlement_timeout: float | None = None
    reuse_connections: bool = False
    server_accepts_empty_auth_id: bool = False
    entitlement_only: bool = False
    certificate: str | None = None
    key: str | None = None
    ca_file: str | None = None
    allow_unverified_peer: bool = False
    allow_self_signed: bool = False
    #: directory that a relative ``file:`` ResourceURI (and relative certificate paths) start from
    config_dir: str = "."


def _millis(block: SecurityBlock, name: str, default: float) -> float:
    text = block.option(name)
    if text is None:
        return default
    t = text.strip()
    try:
        seconds = float(t) / 1000.0 if t.isdigit() else parse_duration(t)
    except ValueError as e:
        raise OptionError(f"<{name}>: {e}") from None
    if seconds <= 0:
        raise OptionError(f"<{name}> must be more than 0, not {text!r}")
    return seconds


def _switch(block: SecurityBlock, name: str, default: bool) -> bool:
    text = block.option(name)
    if text is None:
        return default
    try:
        return parse_bool(text)
    except ValueError as e:
        raise OptionError(f"<{name}>: {e}") from None


def web_options(block: SecurityBlock, config_dir: str) -> WebOptions:
    """Typed options of a web-entitlements block; :class:`OptionError` for a bad value.

    ``ConnectionTimeout`` / ``RequestTimeout`` are milliseconds when bare (AMPS), or a
    duration with a unit; ``EntitlementTimeout`` is a duration (bare = seconds).
    """
    uri = block.option("ResourceURI") or block.option("CredentialStore")
    if uri is None or not uri.strip():
        raise OptionError(f"module {block.module!r} requires <ResourceURI>")
    retry_text = block.option("RetryCount")
    try:
        retries = parse_count(retry_text) if retry_text is not None else 0
    except ValueError as e:
        raise OptionError(f"<RetryCount>: {e}") from None
    if retries < 0:
        raise OptionError(f"<RetryCount> must not be negative, not {retry_text!r}")
    timeout_text = block.option("EntitlementTimeout")
    entitlement_timeout: float | None = None
    if timeout_text is not None:
        try:
            entitlement_timeout = parse_duration(timeout_text)
        except ValueError as e:
            raise OptionError(f"<EntitlementTimeout>: {e}") from None
        if entitlement_timeout <= 0:
            entitlement_timeout = None
    headers = block.option_values("HTTPHeader")
    for h in headers:
        name, sep, _ = h.partition(":")
        if not sep or not name.strip() or any(c.isspace() for c in name.strip()):
            raise OptionError(f"<HTTPHeader> {h!r} is not 'Name: value'")
    return WebOptions(
        resource_uri=uri.strip(),
        connection_timeout=_millis(block, "ConnectionTimeout", 2.0),
        request_timeout=_millis(block, "RequestTimeout", 5.0),
        retry_count=retries,
        headers=headers,
        entitlement_timeout=entitlement_timeout,
        reuse_connections=_switch(block, "ReuseConnections", False),
        server_accepts_empty_auth_id=_switch(block, "ServerAcceptsEmptyAuthId", False),
        entitlement_only=_switch(block, "EntitlementOnly", False),
        certificate=block.option("Certificate"),
        key=block.option("Key"),
        ca_file=block.option("CAKey"),
        allow_unverified_peer=_switch(block, "AllowUnverifiedPeer", False),
        allow_self_signed=_switch(block, "AllowSelfSigned", False),
        config_dir=config_dir,
    )


class SimpleAccessOptions(msgspec.Struct, frozen=True, kw_only=True):
    allowed_topics: str = ".*"
    denied_topics: str | None = None
    read: bool = True
    write: bool = True


def simple_access_options(block: SecurityBlock) -> SimpleAccessOptions:
    """Typed simple-access options; regexes are checked to compile (bounded engine)."""
    from amps_emulator.protocol.saferegex import compile_pattern

    allowed = block.option("AllowedTopics", ".*") or ".*"
    denied = block.option("DeniedTopics")
    for name, rx in (("AllowedTopics", allowed), ("DeniedTopics", denied)):
        if rx is None:
            continue
        try:
            compile_pattern(rx)
        except Exception as e:  # re.error, OverflowError, RecursionError: all "bad regex"
            raise OptionError(f"<{name}>: invalid regular expression {rx!r}: {e}") from None
    granted = block.option("GrantedPermissions")
    read = write = True
    if granted is not None:
        words = {w.strip().lower() for w in granted.replace(";", ",").split(",") if w.strip()}
        bad = words - {"read", "write"}
        if bad or not words:
            raise OptionError(f"<GrantedPermissions> {granted!r}: expected read, write or read,write")
        read, write = "read" in words, "write" in words
    return SimpleAccessOptions(allowed_topics=allowed, denied_topics=denied, read=read, write=write)


# --- reading the element tree -----------------------------------------------------------------

class _Sink:
    def __init__(self) -> None:
        self.errors: list[ConfigIssue] = []

    def err(self, node: Node, reason: str) -> None:
        self.errors.append(ConfigIssue(node.file, node.line, reason))


def _options(node: Node, sink: _Sink) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for child in node.children:
        if child.children:
            sink.err(child, f"option <{child.tag}> must hold text, not elements")
            continue
        out.append((child.tag, child.text))
    return tuple(out)


def _read_modules(node: Node | None, sink: _Sink) -> dict[str, ModuleDecl]:
    decls: dict[str, ModuleDecl] = {}
    if node is None:
        return decls
    for m in node.children:
        if m.tag != "Module":
            continue
        name_node, lib_node, opt_node = m.child("Name"), m.child("Library"), m.child("Options")
        if name_node is None or not name_node.text or lib_node is None or not lib_node.text:
            continue  # the config layer reports malformed Modules entries; only usable ones matter
        decls[name_node.text] = ModuleDecl(
            name=name_node.text, library=lib_node.text,
            options=_options(opt_node, sink) if opt_node is not None else (), file=m.file, line=m.line)
    return decls


def _read_block(node: Node | None, kind: str, modules: dict[str, ModuleDecl], sink: _Sink
                ) -> SecurityBlock | None:
    if node is None:
        return None
    module_node = node.child("Module")
    if module_node is None or not module_node.text:
        sink.err(node, f"<{kind}> is missing required element <Module>")
        return None
    options: tuple[tuple[str, str], ...] = ()
    for child in node.children:
        if child.tag == "Options":
            options += _options(child, sink)
        elif child.tag != "Module":
            sink.err(child, f"unknown element <{child.tag}> in <{kind}> (expected <Module>, <Options>)")
    try:
        return block_from_values(kind, module_node.text, options, modules, file=node.file, line=node.line)
    except ValueError as e:
        sink.err(module_node, str(e))
        return None


def read_security(root: Node, config_dir: str) -> tuple[SecurityConfig, list[ConfigIssue]]:
    """Read every Authentication/Entitlement block of a configuration tree.

    Returns the configuration (a block with an error falls back to its default) and the list
    of located errors; the configuration is usable only when that list is empty.
    """
    sink = _Sink()
    modules = _read_modules(root.child("Modules"), sink)
    inst_auth = _read_block(root.child(AUTHENTICATION), AUTHENTICATION, modules, sink)
    inst_ent = _read_block(root.child(ENTITLEMENT), ENTITLEMENT, modules, sink)
    transports: dict[str, tuple[SecurityBlock, SecurityBlock]] = {}
    tnode = root.child("Transports")
    for t in tnode.children if tnode is not None else ():
        if t.tag != "Transport":
            continue
        name_node = t.child("Name")
        auth = _read_block(t.child(AUTHENTICATION), AUTHENTICATION, modules, sink)
        ent = _read_block(t.child(ENTITLEMENT), ENTITLEMENT, modules, sink)
        if name_node is not None and name_node.text:
            transports[name_node.text] = (resolve(auth, inst_auth, AUTHENTICATION),
                                          resolve(ent, inst_ent, ENTITLEMENT))
    admin = root.child("Admin")
    admin_auth = _read_block(admin.child(AUTHENTICATION), AUTHENTICATION, modules, sink) if admin else None
    admin_ent = _read_block(admin.child(ENTITLEMENT), ENTITLEMENT, modules, sink) if admin else None
    config = SecurityConfig(
        authentication=resolve(None, inst_auth, AUTHENTICATION),
        entitlement=resolve(None, inst_ent, ENTITLEMENT),
        transports=transports, admin_authentication=admin_auth, admin_entitlement=admin_ent,
        config_dir=config_dir)
    return config, sink.errors


def load_security(root: Node, config_dir: str) -> SecurityConfig:
    """:func:`read_security`, raising :class:`ConfigError` (every ``file:line: reason``) on errors."""
    config, errors = read_security(root, config_dir)
    if errors:
        raise ConfigError(errors)
    return config
