"""Readers for replication: the ``amps-replication`` transport, ``Replication/Destination`` and
``Tuning/Replication``.

* The incoming replication transport is a ``Transports/Transport`` of ``Type``
  ``amps-replication`` or ``amps-replication-secure``. AMPS allows at most one per instance and
  no client may use it, so it is kept out of ``Config.transports`` and returned on its own
  (:func:`read_replication_listener`). Its ``Protocol`` and ``MessageType`` are accepted and
  ignored (replication carries every message type); 60East's positions demo writes a stray
  ``<Protocol>amps</Protocol>`` there.
  Its ``Authentication``/``Entitlement`` are read with every other transport's by
  :mod:`config.security`; ``-secure`` takes ``Ciphers``, ``SecureSocketProtocols`` and
  ``VerifyClient`` with ``CAFile``/``CAPath`` (mutual TLS), as a client TLS transport does.
* Each ``Destination`` is one outgoing link (:func:`read_replication`). ``Name`` and ``Group``
  default to each other; ``SyncType``, ``Transport`` and at least one ``Topic`` are required.
  A ``Transport`` without ``InetAddr`` is passive: the remote connects to this instance's
  replication transport, which must then exist. A bare-port ``InetAddr`` means localhost.
  Its ``Transport`` of Type ``amps-replication-secure`` takes ``Ciphers`` (what the connection
  offers); ``Compression`` (with ``CompressionType``) compresses what the link sends
  (``replication.compression``).
* An ``Authenticator`` (a ``Destination``'s or ``Bootstrap``'s ``Transport``, or the instance's:
  :func:`read_authenticator`) gives the credentials an outgoing link logs on with.
* ``Tuning/Replication/MinSyncDestinations`` is read by :func:`read_tuning`; the other
  ``Tuning`` children are warned about and ignored, as the whole section was before.

Every problem is reported through :class:`~config.schema.Ctx` at its element's line.
"""

from __future__ import annotations

import os
import ssl
from typing import Any

from .auxiliary.authenticators import AUTHENTICATOR_LIBRARIES, read_library_authenticator
from .model import (
    DEFAULT_AUTHENTICATOR_MODULE,
    DEFAULT_REPLICATION_MAX_CONNECTIONS,
    REPLICATION_VALIDATIONS,
    REPLICATION_VALIDATIONS_REQUIRED,
    Bootstrap,
    Destination,
    DestinationTransport,
    Queue,
    ReplicationAddress,
    ReplicationAuthenticator,
    ReplicationListener,
    ReplicationTopic,
    TransactionLog,
    TxLogTopic,
    topic_matches,
)
from .schema import (
    MISSING,
    Ctx,
    Elem,
    Spec,
    check_no_text,
    each,
    ignored_element,
    label,
    positive,
    read,
    text,
    unknown_element,
)
from .tls import TLSSetupError, parse_protocols, server_context, set_ciphers, unavailable_protocols
from .units import parse_bool, parse_count, parse_duration
from .values import enum, is_regex, parse_comma_list, parse_inet_addr, parse_regex

REPLICATION_TYPES = ("amps-replication", "amps-replication-secure")
#: AMPS's limit on sync destinations per instance
MAX_SYNC_DESTINATIONS = 64

_INCOMING_NOTE = ("the transport a destination connects to decides who may log on: configure them "
                  "on the other instance's replication transport")
_AUTHENTICATOR_OPTIONS = {"User": "user", "Password": "password", "PasswordFileName": "password_file",
                          "PasswordEnvironmentVariable": "password_env"}


def _node(node, ctx: Ctx):
    return node


def is_replication_transport(node) -> bool:
    """True for a ``Transports/Transport`` whose ``Type`` is a replication type."""
    t = node.child("Type")
    return t is not None and t.text.strip().lower() in REPLICATION_TYPES


def _listener_spec() -> Spec:
    return Spec(
        elems={
            "Name": Elem("name", text, required=True),
            "Type": Elem("type", enum(REPLICATION_TYPES), required=True),
            "InetAddr": Elem("inet_addr", text, required=True),
            "Protocol": Elem("protocol", text),
            "MessageType": Elem("message_type", text),
            "Certificate": Elem("certificate", text),
            "PrivateKey": Elem("private_key", text),
            "Ciphers": Elem("ciphers", text),
            "SecureSocketProtocols": Elem("secure_socket_protocols", parse_protocols),
            "VerifyClient": Elem("verify_client", parse_bool),
            "CAFile": Elem("ca_file", text),
            "CAPath": Elem("ca_path", text),
            "ReuseAddr": Elem("reuse_addr", parse_bool),
            "MaxConnections": Elem("max_connections", positive(parse_count, "MaxConnections")),
            # read by config.security.read_security, as every transport's
            "Authentication": Elem("authentication", node=_node),
            "Entitlement": Elem("entitlement", node=_node),
        },
    )


def read_replication_listener(node, ctx: Ctx) -> ReplicationListener | None:
    """The ``amps-replication`` transport among ``Transports`` (None when there is none).
    A second one is an error: AMPS allows one per instance."""
    found: ReplicationListener | None = None
    spec = _listener_spec()
    for child in node.children:
        if child.tag != "Transport" or not is_replication_transport(child):
            continue
        r = read(child, spec, ctx)
        if not r.ok:
            continue
        try:
            host, port = parse_inet_addr(r.values["inet_addr"])
        except ValueError as e:
            ctx.err(r.nodes["inet_addr"], f"invalid <InetAddr> in {label(child)}: {e}")
            continue
        cert, key = r.get("certificate"), r.get("private_key")
        verify = r.get("verify_client", False)
        if r.values["type"] == "amps-replication-secure":
            if cert is None or key is None:
                ctx.err(child, f"{label(child)}: Type amps-replication-secure requires <Certificate> "
                               "and <PrivateKey>")
                continue
            try:
                server_context(cert, key, r.get("ciphers"), verify_client=verify,
                               ca_file=r.get("ca_file"), ca_path=r.get("ca_path"),
                               protocols=r.get("secure_socket_protocols"))
            except TLSSetupError as exc:
                attr = {"Certificate": "certificate", "PrivateKey": "private_key", "Ciphers": "ciphers",
                        "SecureSocketProtocols": "secure_socket_protocols", "CAFile": "ca_file",
                        "CAPath": "ca_path"}
                ctx.err(r.nodes.get(attr[exc.element], child), f"{label(child)}: {exc}")
                continue
            gone = unavailable_protocols(r.get("secure_socket_protocols") or ())
            if gone:
                ctx.warn(r.nodes["secure_socket_protocols"], f"{label(child)}: {' '.join(gone)} cannot be "
                         f"negotiated with {ssl.OPENSSL_VERSION}: the transport accepts the other "
                         "protocols listed")
        elif cert is not None or key is not None or verify:
            ctx.err(child, f"{label(child)}: <Certificate>/<PrivateKey>/<VerifyClient> need Type "
                           "amps-replication-secure")
            continue
        else:
            _no_effect_without_tls(ctx, child, r.nodes, ("Ciphers", "ciphers"),
                                   ("SecureSocketProtocols", "secure_socket_protocols"))
        if found is not None:
            ctx.err(child, f"{label(child)}: only one replication transport is allowed per instance "
                           f"(already {found.name!r} at {found.file}:{found.line})")
            continue
        found = ReplicationListener(
            file=child.file, line=child.line, name=r.values["name"], type=r.values["type"],
            host=host, port=port, inet_addr=r.values["inet_addr"],
            certificate=cert, private_key=key, ciphers=r.get("ciphers"),
            secure_socket_protocols=r.get("secure_socket_protocols"), verify_client=verify,
            ca_file=r.get("ca_file"), ca_path=r.get("ca_path"),
            max_connections=r.get("max_connections", DEFAULT_REPLICATION_MAX_CONNECTIONS),
        )
    return found


def _no_effect_without_tls(ctx: Ctx, node, nodes: dict, *tags: tuple[str, str]) -> None:
    """A warning for each TLS-only element given on a Type amps-replication transport."""
    for tag, attr in tags:
        if attr in nodes:
            ctx.warn(nodes[attr], f"{label(node)}: <{tag}> has no effect on Type amps-replication "
                                  "(only amps-replication-secure is TLS)")


def read_authenticator(node, ctx: Ctx) -> ReplicationAuthenticator | object:
    """An ``Authenticator``: ``Module`` (``amps-default-authenticator-module``, or a declared
    module of the exec or multimechanism authenticator library:
    :mod:`config.auxiliary.authenticators`) and its ``Options``. A password file or variable
    is read at each connection attempt: one that is not there yet is a warning now (the link
    is refused until it is)."""
    where = "<Authenticator>"
    r = read(node, Spec(elems={"Module": Elem("module", text, required=True),
                               "Options": Elem("options", node=_node)}), ctx, where=where)
    if not r.ok:
        return MISSING
    module = r.values["module"].strip()
    options = r.get("options")
    if module != DEFAULT_AUTHENTICATOR_MODULE:
        library = ctx.module_libraries.get(module)
        if library not in AUTHENTICATOR_LIBRARIES:
            what = f"loads {library}, which" if library is not None else "is neither built in nor " \
                "declared in <Modules>: it"
            ctx.err(r.nodes["module"], f"{where}: module {module!r} {what} is not implemented by "
                                       f"the emulator (it implements {DEFAULT_AUTHENTICATOR_MODULE}, "
                                       f"{' and '.join(sorted(AUTHENTICATOR_LIBRARIES))})")
            return MISSING
        fields = read_library_authenticator(library, options, node, ctx)
        if fields is MISSING:
            return MISSING
        found = ReplicationAuthenticator(file=node.file, line=node.line, module=module,
                                         library=library, **fields)
        return found if found.command is not None else _check_password(found, node, ctx)
    values: dict[str, Any] = {}
    for opt in options.children if options is not None else ():
        attr = _AUTHENTICATOR_OPTIONS.get(opt.tag)
        if attr is None:
            unknown_element(ctx, opt, f"{where} <Options>", list(_AUTHENTICATOR_OPTIONS))
            return MISSING
        values[attr] = opt.text.strip()
    found = ReplicationAuthenticator(file=node.file, line=node.line, module=module, **values)
    return _check_password(found, node, ctx)


def _check_password(found: ReplicationAuthenticator, node, ctx: Ctx) -> ReplicationAuthenticator:
    """``found``, warned about when its password file or variable is not there yet."""
    where = "<Authenticator>"
    try:
        found.credentials()
    except OSError as exc:
        ctx.warn(node, f"{where}: PasswordFileName {found.password_file}: {exc.strerror or exc}; "
                       "the link is refused until it can be read")
    except KeyError:
        ctx.warn(node, f"{where}: PasswordEnvironmentVariable {found.password_env} is not set; "
                       "the link is refused until it is")
    return found


# --- Replication/Destination --------------------------------------------------------------

def _validation_list(value: str) -> tuple[str, ...]:
    items = parse_comma_list(value)
    for item in items:
        if item not in REPLICATION_VALIDATIONS:
            known = ", ".join(REPLICATION_VALIDATIONS)
            raise ValueError(f"unknown validation check {item!r} (known: {known})")
    return items


def _read_topic(node, ctx: Ctx) -> ReplicationTopic | object:
    spec = Spec(elems={
        "Name": Elem("name", parse_regex),
        "MessageType": Elem("message_type", ctx.message_type, required=True),
        "Filter": Elem("filter", text),
        "IncludeValidation": Elem("include", _validation_list, multiple=True),
        "ExcludeValidation": Elem("exclude", _validation_list, multiple=True),
    })
    r = read(node, spec, ctx, where="<Replication> <Topic>")
    if not r.ok:
        return MISSING
    exclude = tuple(v for group in r.get("exclude", []) for v in group)
    fixed = [v for v in exclude if v in REPLICATION_VALIDATIONS_REQUIRED]
    if fixed:
        ctx.err(r.nodes["exclude"], f"<ExcludeValidation> cannot exclude {', '.join(fixed)}: "
                                    "queue validation is always checked")
        return MISSING
    return ReplicationTopic(
        file=node.file, line=node.line, name=r.get("name", ".*"), message_type=r.values["message_type"],
        filter=r.get("filter"), include_validation=tuple(v for g in r.get("include", []) for v in g),
        exclude_validation=exclude,
    )


def _address(value: str) -> ReplicationAddress:
    host, port = parse_inet_addr(value)
    if port == 0:
        raise ValueError(f"{value.strip()!r}: a destination needs a real port, not 0")
    return ReplicationAddress(host or "localhost", port, value.strip())


def _read_dest_transport(node, ctx: Ctx) -> DestinationTransport | object:
    spec = Spec(
        elems={
            "Type": Elem("type", enum(REPLICATION_TYPES), required=True),
            "InetAddr": Elem("addresses", _address, multiple=True),
            "ReconnectTimeout": Elem("reconnect", each(positive(parse_duration, "ReconnectTimeout"),
                                                       parse_comma_list), multiple=True),
            "Name": Elem("name", text),
            "VerifyClient": Elem("verify", parse_bool),
            "CAFile": Elem("ca_file", text),
            "CAPath": Elem("ca_path", text),
            "Certificate": Elem("certificate", text),
            "PrivateKey": Elem("private_key", text),
            "Ciphers": Elem("ciphers", text),
            "Authenticator": Elem("authenticator", node=read_authenticator),
        },
        ignored=frozenset({"IpProtocolPrefer", "Authentication", "Entitlement",
                           "SecureSocketProtocols"}),
        ignore_notes={**{tag: _INCOMING_NOTE for tag in ("Authentication", "Entitlement")},
                      "SecureSocketProtocols": "AMPS documents it for the replication transport a "
                                               "destination connects to, which decides the protocol"},
    )
    r = read(node, spec, ctx, where="<Destination> <Transport>")
    if not r.ok:
        return MISSING
    addresses = tuple(r.get("addresses", []))
    timeouts = tuple(t for group in r.get("reconnect", []) for t in group)
    if len(timeouts) > 1 and len(timeouts) != len(addresses):
        ctx.err(r.nodes["reconnect"], f"<ReconnectTimeout> gives {len(timeouts)} intervals for "
                                      f"{len(addresses)} <InetAddr>: give one, or one per address")
        return MISSING
    ca_file, ca_path = r.get("ca_file"), r.get("ca_path")
    if r.values["type"] == "amps-replication-secure" and r.get("verify", False):
        if ca_file is not None and not os.path.isfile(ca_file):
            ctx.err(r.nodes["ca_file"], f"<Destination> <Transport>: CAFile {ca_file} is not a readable file")
            return MISSING
        if ca_path is not None and not os.path.isdir(ca_path):
            ctx.err(r.nodes["ca_path"], f"<Destination> <Transport>: CAPath {ca_path} is not a directory")
            return MISSING
    cert, key = r.get("certificate"), r.get("private_key")
    secure = r.values["type"] == "amps-replication-secure"
    if (cert is None) != (key is None) or (cert is not None and not secure):
        ctx.err(node, "<Destination> <Transport>: a client <Certificate> needs its <PrivateKey> and "
                      "Type amps-replication-secure")
        return MISSING
    ciphers = r.get("ciphers")
    if ciphers is not None and not secure:
        _no_effect_without_tls(ctx, node, r.nodes, ("Ciphers", "ciphers"))
        ciphers = None
    elif ciphers is not None:
        try:
            set_ciphers(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), ciphers)
        except TLSSetupError as exc:
            ctx.err(r.nodes["ciphers"], f"<Destination> <Transport>: {exc}")
            return MISSING
    found = DestinationTransport(file=node.file, line=node.line, type=r.values["type"],
                                 addresses=addresses, reconnect_timeouts=timeouts,
                                 verify=r.get("verify", False), ca_file=ca_file, ca_path=ca_path,
                                 certificate=cert, private_key=key, ciphers=ciphers,
                                 authenticator=r.get("authenticator"))
    try:
        found.client_context()
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        ctx.err(node, f"<Destination> <Transport>: cannot use its TLS settings: {exc}")
        return MISSING
    return found


def _destination_spec() -> Spec:
    return Spec(
        elems={
            "Name": Elem("name", text),
            "Group": Elem("group", text),
            "SyncType": Elem("sync_type", enum(["sync", "async"]), required=True),
            "Transport": Elem("transports", node=_read_dest_transport, required=True, multiple=True),
            "Topic": Elem("topics", node=_read_topic, required=True, multiple=True),
            "PassThrough": Elem("pass_through", parse_regex),
            "ResyncPassThrough": Elem("resync_pass_through", parse_regex),
            "Compression": Elem("compression", parse_bool),
            "CompressionType": Elem("compression_type", enum(["zlib", "zstd"])),
            "AckConflationInterval": Elem("ack_conflation_interval", parse_duration),
        },
    )


def read_replication(node, ctx: Ctx, *, has_listener: bool, txlog: TransactionLog | None,
                     queues: tuple[Queue, ...]) -> tuple[Destination, ...]:
    """Every ``Replication/Destination``; also checks the facts that span sections (a passive
    destination needs the replication transport; replication needs a transaction log; a
    ``LocalQueue`` cannot be replicated; at most 64 sync destinations; unique names)."""
    where = "<Replication>"
    check_no_text(node, ctx, where)
    spec = _destination_spec()
    out: list[Destination] = []
    for child in node.children:
        if child.tag != "Destination":
            unknown_element(ctx, child, where, ["Destination"])
            continue
        r = read(child, spec, ctx, where="<Destination>")
        if not r.ok:
            continue
        name, group = r.get("name"), r.get("group")
        if name is None and group is None:
            ctx.err(child, "<Destination> needs a <Group> (or a <Name>)")
            continue
        dest = Destination(
            file=child.file, line=child.line, name=name or group, group=group or name,
            sync_type=r.values["sync_type"], transports=tuple(r.values["transports"]),
            topics=tuple(r.values["topics"]), pass_through=r.get("pass_through"),
            resync_pass_through=r.get("resync_pass_through"),
            compression=r.get("compression", False), compression_type=r.get("compression_type", "zlib"),
            ack_conflation_interval=r.get("ack_conflation_interval"),
        )
        clash = next((d for d in out if d.name == dest.name), None)
        if clash is not None:
            ctx.err(child, f"duplicate <Destination> {dest.name!r} (also at {clash.file}:{clash.line})")
            continue
        if dest.passive and not has_listener:
            ctx.err(child, f"<Destination> {dest.name!r} has no <InetAddr> (passive: the remote connects "
                           "here), but this instance has no amps-replication transport")
            continue
        if not _topics_ok(dest, ctx, txlog, queues):
            continue
        out.append(dest)
    if out and txlog is None:
        ctx.err(node, "<Replication> needs a <TransactionLog>: replication sends the transaction log")
    syncs = [d for d in out if d.sync]
    if len(syncs) > MAX_SYNC_DESTINATIONS:
        extra = syncs[MAX_SYNC_DESTINATIONS]
        ctx.error(extra.file, extra.line, f"more than {MAX_SYNC_DESTINATIONS} sync destinations")
    return tuple(out)


def _topics_ok(dest: Destination, ctx: Ctx, txlog: TransactionLog | None, queues: tuple[Queue, ...]) -> bool:
    ok = True
    for t in dest.topics:
        if is_regex(t.name):
            continue
        local = next((q for q in queues if q.kind == "local" and q.name == t.name), None)
        if local is not None:
            ctx.error(t.file, t.line, f"<Destination> {dest.name!r}: topic {t.name!r} is a LocalQueue "
                                      f"({local.file}:{local.line}), which cannot be replicated")
            ok = False
        elif txlog is not None and not any(x.message_type == t.message_type and topic_matches(x.name, t.name)
                                           for x in txlog.topics):
            ctx.warn_at(t.file, t.line, f"<Destination> {dest.name!r}: topic {t.name!r} is not recorded "
                                        "in the <TransactionLog>, so nothing of it will replicate")
    return ok


# --- Bootstrap ----------------------------------------------------------------------------

def _read_bootstrap_topic(node, ctx: Ctx) -> TxLogTopic | object:
    r = read(node, Spec(elems={"Name": Elem("name", parse_regex, required=True),
                               "MessageType": Elem("message_type", ctx.message_type, required=True)}),
             ctx, where="<Bootstrap> <Topic>")
    return TxLogTopic(r.values["name"], r.values["message_type"]) if r.ok else MISSING


def _data_types(value: str) -> tuple[str, ...]:
    items = parse_comma_list(value)
    for item in items:
        if item not in ("sow", "txlog"):
            raise ValueError(f"unknown DataType {item!r} (known: sow, txlog)")
    return items


def read_bootstrap(node, ctx: Ctx, *, has_listener: bool, txlog: TransactionLog | None) -> Bootstrap | None:
    """``Bootstrap``: Topics, DataType (``sow``, ``txlog``; default both) and a Transport with at
    least one InetAddr. The instance needs a replication transport and a transaction log."""
    r = read(node, Spec(elems={
        "Topic": Elem("topics", node=_read_bootstrap_topic, required=True, multiple=True),
        "DataType": Elem("data_types", _data_types),
        "Transport": Elem("transports", node=_read_dest_transport, required=True, multiple=True),
    }), ctx, where="<Bootstrap>")
    if not r.ok:
        return None
    transports = tuple(r.values["transports"])
    if all(t.passive for t in transports):
        ctx.err(node, "<Bootstrap> <Transport> needs an <InetAddr>: the instance to fill this one from")
        return None
    if not has_listener:
        ctx.err(node, "<Bootstrap> needs an amps-replication transport on this instance")
        return None
    if txlog is None:
        ctx.err(node, "<Bootstrap> needs a <TransactionLog> on this instance")
        return None
    return Bootstrap(file=node.file, line=node.line, topics=tuple(r.values["topics"]),
                     data_types=tuple(r.get("data_types", ("sow", "txlog"))), transports=transports)


# --- Tuning -------------------------------------------------------------------------------

def read_tuning(node, ctx: Ctx) -> int | None:
    """``Tuning/Replication/MinSyncDestinations``; every other ``Tuning`` child is warned about
    and ignored."""
    result: int | None = None
    check_no_text(node, ctx, "<Tuning>")
    for child in node.children:
        if child.tag != "Replication":
            ignored_element(ctx, child, "<Tuning>")
            continue
        r = read(child, Spec(elems={"MinSyncDestinations": Elem("min_sync", parse_count)}), ctx,
                 where="<Tuning> <Replication>")
        if "min_sync" in r.values:
            if r.values["min_sync"] < 0:
                ctx.err(r.nodes["min_sync"], "<MinSyncDestinations> cannot be negative")
            else:
                result = r.values["min_sync"]
    return result


__all__ = ["is_replication_transport", "read_authenticator", "read_bootstrap", "read_replication",
           "read_replication_listener", "read_tuning"]
