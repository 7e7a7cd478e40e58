"""Entry points: :func:`load_config` and :func:`loads_config` turn AMPS XML into a :class:`Config`.

Order of work for one load:

1. :func:`config.xmlload.load_tree` parses the file safely, expands ``${ENV}`` and splices
   ``Include`` files (errors keep the included file's name and line);
2. message type names declared under ``MessageTypes`` are harvested, and each declaration is
   read and checked by building the codec registry (:mod:`config.message_types`: a custom
   ``.so`` module is an error at its element);
3. the ``AMPSConfig`` children are read; the sections are then built in dependency order
   (instance defaults before transports, ``SOWDirectory`` before SOW topics, SOW before the
   queue/transaction-log cross check);
4. if any error was recorded anywhere, one :class:`ConfigError` listing all of them is raised;
   otherwise the frozen :class:`Config` is returned with its warnings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from amps_emulator.protocol.filter.construct import parse_field, previous_mark
from amps_emulator.protocol.filter.modules import function_modules
from amps_emulator.protocol.msgtypes import VIEWLESS_MODULES, MessageTypeDecl

from .actions_section import read_actions
from .auxiliary import AuxModules, read_aux_modules
from .auxiliary.lookups import check_value_lookups
from .errors import ConfigError, ConfigIssue
from .httpd.admin import read_admin
from .httpd.protocols import read_protocols
from .instance_sections import (
    LIMIT_ELEMENTS,
    InstanceDefaults,
    read_logging,
    read_statistics,
    read_transaction_log,
    read_transports,
    slow_client_elems,
    slow_clients,
)
from .message_types import read_message_types
from .model import (
    DEFAULT_CLIENT_OUTBOUND_LIMIT,
    DEFAULT_MAX_FRAME_SIZE,
    DEFAULT_MAX_FRAME_SIZE_BEFORE_LOGON,
    Config,
    ConflatedTopic,
    ProtocolDef,
    Replication,
    ReplicationAuthenticator,
    SowTopic,
)
from .replication_sections import (
    read_authenticator,
    read_bootstrap,
    read_replication,
    read_replication_listener,
    read_tuning,
)
from .schema import Ctx, Elem, Spec, positive, read, text
from .security import SecurityConfig, read_security
from .sow_sections import SowResult, check_queue_logging, one_definition_per_name, read_sow
from .units import parse_duration, parse_file_mask, parse_size
from .values import parse_name
from .xmlload import AMPS_VERSION, Node, load_tree, read_file, report_missing_env

#: message types whose fields are one level of name=value (a constructed field has one step)
_FLAT_MODULES = ("fix", "nvfix", "bflat")

_SECTION = lambda n, c: n  # noqa: E731 - structured sections are read after the top level

_TOP_SPEC = Spec(
    elems={
        "Name": Elem("name", parse_name, required=True),
        "Group": Elem("group", text),
        "Description": Elem("description", text),
        "Transports": Elem("transports", node=_SECTION),
        "Admin": Elem("admin", node=_SECTION),
        "Logging": Elem("logging", node=_SECTION),
        "Protocols": Elem("protocols", node=_SECTION),
        "TransactionLog": Elem("transaction_log", node=_SECTION),
        "SOW": Elem("sow", node=_SECTION, multiple=True),
        "TopicMetaData": Elem("sow", node=_SECTION, multiple=True),
        "Actions": Elem("actions", node=_SECTION),
        "MessageTypes": Elem("message_types", node=_SECTION, multiple=True),
        "Replication": Elem("replication", node=_SECTION),
        "Tuning": Elem("tuning", node=_SECTION),
        "Statistics": Elem("statistics_indexing", node=read_statistics),
        "Bootstrap": Elem("bootstrap", node=_SECTION),
        # what outgoing replication links log on with when their Transport names no Authenticator
        "Authenticator": Elem("authenticator", node=read_authenticator),
        # read by config.security.read_security (the auth layer's reader), per transport too
        "Authentication": Elem("authentication", node=_SECTION),
        "Modules": Elem("modules", node=_SECTION),
        "Entitlement": Elem("entitlement", node=_SECTION),
        "ClientMessageAgeLimit": Elem("client_message_age_limit",
                                      positive(parse_duration, "ClientMessageAgeLimit")),
        "SOWStatsInterval": Elem("sow_stats_interval", positive(parse_duration, "SOWStatsInterval")),
        # emulator extensions
        "MaxFrameSize": Elem("max_frame_size", positive(parse_size, "MaxFrameSize")),
        "ClientOutboundLimit": Elem("client_outbound_limit", positive(parse_size, "ClientOutboundLimit")),
        **LIMIT_ELEMENTS,
        "SOWDirectory": Elem("sow_directory", text),
        "MiniDumpDirectory": Elem("minidump_directory", text),
        "MiniDumpFileMask": Elem("minidump_file_mask", parse_file_mask),
        **slow_client_elems(),
    },
    ignored=frozenset({
        "Externals",
        "UserDefinedFunctions", "ProcessName", "Environment",
        "SuggestedMinimumVersion", "RequiredMinimumVersion",
        "ConfigIncludeCommentDefault", "ConfigCycleDetectionThreshold", "ConfigValidation",
        "SOWStatisticsInterval", "RegexTopicSupport",
    }),
)


def _refuse_viewless_view_types(sow: SowResult, decls: tuple[MessageTypeDecl, ...],
                                ctx: Ctx) -> None:
    """A View whose MessageType AMPS cannot build messages of (binary, composite-global,
    protobuf, struct: :data:`protocol.msgtypes.VIEWLESS_MODULES`) stops the start-up at the
    View; such a type may still be the underlying topic or a joined one."""
    modules = {d.name: d.effective_module for d in decls}
    for view in sow.views:
        module = modules.get(view.message_type, view.message_type)
        if module in VIEWLESS_MODULES:
            ctx.error(view.file, view.line,
                      f"<View> {view.name!r}: its <MessageType> {view.message_type!r} "
                      f"({module}) cannot be a view's type: AMPS does not build {module} "
                      "messages from projected values (a view of another type may read it)")


def _refuse_unenrichable_types(sow: SowResult, decls: tuple[MessageTypeDecl, ...],
                               ctx: Ctx) -> None:
    """``Preprocessing`` or ``Enrichment`` on a topic whose type AMPS does not enrich
    (protobuf and struct, as its User Guide says; binary and composite-global, whose bodies
    have no fields to write or cannot be built) stops the start-up at the topic, and so does
    a field a flat type cannot hold (fix, nvfix, bflat: one step; fix: a numeric tag)."""
    modules = {d.name: d.effective_module for d in decls}
    enriched: list[tuple[str, SowTopic | ConflatedTopic]] = [
        *(("Topic", t) for t in sow.topics if t.preprocessing or t.enrichment),
        *(("ConflatedTopic", c) for c in sow.conflated if c.enrichment)]
    for what, item in enriched:
        module = modules.get(item.message_type, item.message_type)
        where = f"<{what}> {item.name!r}: its <MessageType> {item.message_type!r} ({module})"
        if module in VIEWLESS_MODULES:
            ctx.error(item.file, item.line,
                      f"{where} cannot have <Preprocessing> or <Enrichment>: AMPS does not enrich "
                      f"{module} messages")
            continue
        if module not in _FLAT_MODULES:
            continue
        texts = [*getattr(item, "preprocessing", ()), *item.enrichment]
        for field in texts:
            target = parse_field(field, previous=previous_mark(texts)).target
            if len(target) > 1 or (module == "fix" and not target[0].isdigit()):
                ctx.error(item.file, item.line,
                          f"{where} cannot hold the field of {' '.join(field.split())!r}: its "
                          f"fields are {'numeric tags' if module == 'fix' else 'flat'} "
                          f"({'/55' if module == 'fix' else '/name'})")


def _harvest_message_types(root: Node, ctx: Ctx) -> None:
    for section in root.children:
        if section.tag != "MessageTypes":
            continue
        for mt in section.children:
            name = mt.child("Name") if mt.tag == "MessageType" else None
            if name is not None and name.text and name.text not in ctx.message_types:
                ctx.message_types.append(name.text)


def _has_security(root: Node) -> bool:
    """Whether any Authentication or Entitlement block is configured (instance, Transport, Admin)."""
    tags = ("Authentication", "Entitlement")
    if any(root.child(t) is not None for t in tags):
        return True
    places = [root.child("Admin")]
    transports = root.child("Transports")
    if transports is not None:
        places.extend(t for t in transports.children if t.tag == "Transport")
    return any(p is not None and p.child(t) is not None for p in places for t in tags)


def _read_security(root: Node, ctx: Ctx, source: str) -> SecurityConfig | None:
    """The Authentication/Entitlement blocks (:func:`config.security.read_security`); None when the
    configuration has none (the server then checks nothing: every logon and command allowed)."""
    if not _has_security(root):
        return None
    config_dir = os.path.dirname(os.path.abspath(source)) if not source.startswith("<") else os.getcwd()
    security, issues = read_security(root, config_dir)
    for issue in issues:
        ctx.error(issue.file, issue.line, issue.reason)
    return security


def _warn_unsecured_admin(admin: Node, ctx: Ctx) -> None:
    """A ``WWWAuthenticate`` that no request ever sees: Admin (AMPS's ``amps-admin``
    transport) resolves its modules as a transport does, its own blocks else the instance's,
    and asks for credentials when either gives it one (``SecurityConfig.admin_secured``)."""
    for tag in ("WWWAuthenticate", "AnonymousPaths", "SessionOptions"):
        node = admin.child(tag)
        if node is not None:
            ctx.warn(node, f"<{tag}> has no effect here: neither <Admin> nor the instance "
                           "has an <Authentication> or <Entitlement> block, so the Admin interface "
                           "asks no one for credentials")


def _warn_untrusted(protocols: tuple[ProtocolDef, ...], admin_secured: bool, ctx: Ctx) -> None:
    """``TrustedAdmin`` with no Admin session to trust: the Admin interface hands out session
    cookies only when it asks for credentials."""
    if admin_secured:
        return
    for p in protocols:
        if p.trusted_admin:
            ctx.warn_at(p.file, p.line, f"<Protocol> {p.name!r}: <TrustedAdmin> has no effect: "
                        "the Admin interface asks no one for credentials, so it has no sessions")


def _build(root: Node, ctx: Ctx, source: str) -> Config | None:
    if root.tag != "AMPSConfig":
        ctx.err(root, f"the root element must be <AMPSConfig>, not <{root.tag}>")
        return None
    _harvest_message_types(root, ctx)
    message_type_decls = read_message_types(root, ctx)
    # (before the sections: a KeyGenerator or an Authenticator names a declared module, and the
    # expressions of the sections may call the functions of a loaded library)
    modules = read_aux_modules(root.child("Modules"), ctx)
    with function_modules(modules.function_libraries):
        return _build_sections(root, ctx, source, message_type_decls, modules)


def _build_sections(root: Node, ctx: Ctx, source: str, message_type_decls: tuple[MessageTypeDecl, ...],
                    modules: AuxModules) -> Config | None:
    top = read(root, _TOP_SPEC, ctx, where="<AMPSConfig>")
    v = top.values
    ctx.sow_directory = v.get("sow_directory")
    defaults = InstanceDefaults(
        client_message_age_limit=v.get("client_message_age_limit"),
        max_frame_size=v.get("max_frame_size", DEFAULT_MAX_FRAME_SIZE),
        client_outbound_limit=v.get("client_outbound_limit", DEFAULT_CLIENT_OUTBOUND_LIMIT),
        # (the instance's pool: a transport that sets none of its elements shares it)
        slow_clients=slow_clients(v, transport=False),
        max_frame_size_before_logon=v.get("max_frame_size_before_logon",
                                          DEFAULT_MAX_FRAME_SIZE_BEFORE_LOGON),
        max_connections=v.get("max_connections"),
    )
    if " " in v.get("name", "") or "\t" in v.get("name", ""):
        ctx.warn(top.nodes["name"], f"instance <Name> {v['name']!r} contains spaces; AMPS recommends "
                                    "a name without spaces or special characters")
    protocols = read_protocols(v["protocols"], ctx) if "protocols" in v else ()
    transports = read_transports(v["transports"], ctx, defaults) if "transports" in v else ()
    admin = read_admin(v["admin"], ctx) if "admin" in v else None
    logging = read_logging(v["logging"], ctx) if "logging" in v else ()
    txlog = read_transaction_log(v["transaction_log"], ctx) if "transaction_log" in v else None
    sow = SowResult()
    for section in v.get("sow", []):
        read_sow(section, ctx, sow)
    actions = read_actions(v["actions"], ctx) if "actions" in v else ()
    security = _read_security(root, ctx, source)
    admin_secured = admin is not None and security is not None and security.admin_secured
    if admin is not None and not admin_secured:
        _warn_unsecured_admin(v["admin"], ctx)
    _warn_untrusted(protocols, admin_secured, ctx)
    listener = read_replication_listener(v["transports"], ctx) if "transports" in v else None
    if listener is not None and listener.port != 0:
        clash = next((t for t in transports if t.port == listener.port
                      and (t.host is None or listener.host is None or t.host == listener.host)), None)
        if clash is not None:
            ctx.error(listener.file, listener.line,
                      f"<Transport> {listener.name!r}: InetAddr {listener.inet_addr} conflicts with "
                      f"transport {clash.name!r} ({clash.file}:{clash.line}) on port {listener.port}")
    destinations = read_replication(v["replication"], ctx, has_listener=listener is not None,
                                    txlog=txlog, queues=tuple(sow.queues)) if "replication" in v else ()
    min_sync = read_tuning(v["tuning"], ctx) if "tuning" in v else None
    bootstrap = read_bootstrap(v["bootstrap"], ctx, has_listener=listener is not None,
                               txlog=txlog) if "bootstrap" in v else None
    where_repl = top.nodes.get("replication")
    _refuse_viewless_view_types(sow, message_type_decls, ctx)
    check_value_lookups(sow, modules, ctx)
    _refuse_unenrichable_types(sow, message_type_decls, ctx)
    if not ctx.errors:
        one_definition_per_name(sow, ctx)
        check_queue_logging(sow.queues, txlog, ctx, "transaction_log" in top.nodes)
        if not transports:
            where = top.nodes.get("transports")
            ctx.warn_at(root.file if where is None else where.file,
                        root.line if where is None else where.line,
                        "no supported <Transport> is configured; the emulator will not accept client "
                        "connections", Ctx.LAST if where is None else where.seq)
    if ctx.errors or "name" not in v:
        return None
    return Config(
        name=v["name"], group=v.get("group"), description=v.get("description"),
        transports=transports, protocols=protocols, admin=admin, logging=logging, transaction_log=txlog,
        sow_topics=tuple(sow.topics), queues=tuple(sow.queues), views=tuple(sow.views),
        conflated_topics=tuple(sow.conflated), actions=actions, security=security,
        replication_listener=listener,
        replication=Replication(
            file=where_repl.file if where_repl is not None else "",
            line=where_repl.line if where_repl is not None else 0,
            destinations=destinations, min_sync_destinations=min_sync, bootstrap=bootstrap,
            authenticator=v.get("authenticator", ReplicationAuthenticator())),
        message_types=tuple(ctx.message_types), message_type_decls=message_type_decls,
        sow_directory=ctx.sow_directory, sow_stats_interval=v.get("sow_stats_interval"),
        statistics_indexing=v.get("statistics_indexing", False),
        minidump_directory=v.get("minidump_directory"),
        minidump_file_mask=v.get("minidump_file_mask"),
        modules=modules, source=source, warnings=tuple(ctx.warnings),
    )


def loads_config(text: str | bytes, filename: str = "<string>", *,
                 env: Mapping[str, str] | None = None, base_dir: str | None = None,
                 amps_version: str = AMPS_VERSION) -> Config:
    """Load a configuration from a string.

    ``filename`` names the text in messages and anchors relative ``Include`` paths (for a
    name in angle brackets, includes resolve against ``base_dir`` or the current directory).
    ``env`` replaces ``os.environ`` for ``${NAME}`` substitution (``amps-emulator -DNAME=VALUE``
    passes the environment with its defines on top); ``amps_version`` is what
    ``${AMPS_VERSION}`` stands for. Raises :class:`ConfigError` listing every error.
    """
    ctx = Ctx(os.environ if env is None else env)
    root = load_tree(text, filename, ctx, ctx.env, base_dir, amps_version)
    cfg = None
    if root is not None:
        cfg = _build(root, ctx, filename)
        report_missing_env(root, ctx)
    if ctx.errors or cfg is None:
        raise ConfigError(ctx.errors)
    return cfg


def read_config_file(path: str | os.PathLike[str]) -> tuple[str, bytes]:
    """``path`` as a name for messages and the bytes of the file; a file that cannot be read
    is a :class:`ConfigError` naming it."""
    file = os.fspath(path)
    try:
        return file, read_file(file)
    except OSError as e:
        raise ConfigError(
            [ConfigIssue(file, 0, f"cannot read configuration file: {e.strerror or e}")]) from None


def load_config(path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None,
                amps_version: str = AMPS_VERSION) -> Config:
    """Load an AMPS configuration file. Raises :class:`ConfigError` listing every error."""
    file, data = read_config_file(path)
    return loads_config(data, file, env=env, amps_version=amps_version)
