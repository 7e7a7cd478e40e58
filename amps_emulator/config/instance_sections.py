"""Readers for the instance-level sections: ``Transports``, ``Logging``, ``TransactionLog``
(``Admin`` and ``Protocols``: :mod:`config.httpd`).

Each ``read_*`` function takes the section element and the :class:`~config.schema.Ctx`,
reports every problem through it, and returns the frozen structures that could be built.

Transports that the emulator cannot serve (``amps-unix``; the legacy SOAP and FIX-session
protocols) produce one warning naming the transport and are left out of ``Config.transports``; their
contents are not validated further. The ``amps-replication`` transport is not a client
transport: :func:`read_transports` skips it and ``replication_sections`` reads it.
TLS transports (``tcps``, or
``tcp`` with ``Certificate`` and ``PrivateKey``), the ``websocket`` protocol and the legacy
``fix``, ``nvfix`` and ``xml`` protocols are served; a certificate or key that cannot be loaded
is an error at its element's line, and so is a legacy-protocol transport without the
``MessageType`` it needs. ``SecureSocketProtocols`` and ``Ciphers`` restrict a TLS
transport (``config.tls``); ``PerMessageDeflate`` turns a websocket transport's
permessage-deflate off when it reads ``disabled`` (on otherwise, as in AMPS).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import msgspec

from .httpd.headers import parse_header
from .model import (
    DEFAULT_CLIENT_OUTBOUND_LIMIT,
    DEFAULT_MAX_FRAME_SIZE,
    DEFAULT_MAX_FRAME_SIZE_BEFORE_LOGON,
    LogTarget,
    SlowClients,
    TransactionLog,
    Transport,
    TxLogTopic,
)
from .replication_sections import is_replication_transport
from .schema import (
    MISSING,
    Ctx,
    Elem,
    Spec,
    at_least,
    each,
    label,
    positive,
    read,
    text,
    unknown_element,
)
from .tls import TLSSetupError, parse_protocols, server_context, unavailable_protocols
from .units import parse_bool, parse_count, parse_duration, parse_percent, parse_size
from .values import enum, parse_comma_list, parse_inet_addr, parse_regex, suggest
from .xmlload import Node

KiB = 1024


@dataclass(frozen=True)
class InstanceDefaults:
    """Instance-level values that transports inherit unless they override them."""

    client_message_age_limit: float | None = None
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    client_outbound_limit: int = DEFAULT_CLIENT_OUTBOUND_LIMIT
    slow_clients: SlowClients = SlowClients()  # (NO_OFFLINING)
    max_frame_size_before_logon: int = DEFAULT_MAX_FRAME_SIZE_BEFORE_LOGON
    max_connections: int | None = None


#: nothing configured: no slow client offlining
NO_OFFLINING = SlowClients()
#: slow client offlining, at the instance's level and a transport's (attribute names)
SLOW_CLIENT_ELEMS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "MessageMemoryLimit": ("memory_limit", parse_size),
    "MessageDiskLimit": ("disk_limit", parse_size),
    "MessageDiskPath": ("disk_path", text),
    "ClientMaxCapacity": ("capacity", parse_percent),
}
#: the ones whose setting on a transport gives it a resource pool of its own
_POOL_ATTRS = ("memory_limit", "disk_limit", "disk_path")


def slow_client_elems() -> dict[str, Elem]:
    return {tag: Elem(attr, positive(parse, tag) if parse is parse_size else parse)
            for tag, (attr, parse) in SLOW_CLIENT_ELEMS.items()}


def slow_clients(values: dict, base: SlowClients = NO_OFFLINING, *,
                 transport: bool = True) -> SlowClients:
    """``base`` with what ``values`` (an element's read values) set of its own; a
    ``transport`` that sets a pool element has a resource pool of its own."""
    given = {attr: values[attr] for attr, _ in SLOW_CLIENT_ELEMS.values() if attr in values}
    if not given:
        return base
    own = transport and any(a in given for a in _POOL_ATTRS)
    return msgspec.structs.replace(base, **given, own_pool=own)


# --- Transports ---------------------------------------------------------------------------

_UNSUPPORTED_TYPES = {
    "amps-unix": "unix domain socket transports (Type amps-unix) are not supported",
}
#: the legacy protocols served (server/legacy.py); each needs the transport's MessageType
LEGACY_PROTOCOLS = ("fix", "nvfix", "xml")
_SERVED_PROTOCOLS = ("amps", "websocket", *LEGACY_PROTOCOLS)
_UNSUPPORTED_PROTOCOLS = {
    "soap": "the legacy soap protocol is not supported",
    "fix-session": "the legacy fix-session protocol is not supported",
}
#: protocol modules AMPS loads by default, and the synonym it accepts
BUILTIN_PROTOCOLS = (*_SERVED_PROTOCOLS, *_UNSUPPORTED_PROTOCOLS)
PROTOCOL_SYNONYMS = {"json": "amps"}

_TRANSPORT_IGNORED = frozenset({
    "TransportFilter", "FileName", "FileMask",
})
def as_node(node: Node, ctx: Ctx) -> Node:
    """A structured child kept as it is (the auth layer reads security blocks from the tree)."""
    return node


#: the emulator's limits on a transport's unauthenticated clients, in a Transport or at the top
#: level (the default of every transport)
LIMIT_ELEMENTS = {
    "MaxFrameSizeBeforeLogon": Elem("max_frame_size_before_logon",
                                    positive(parse_size, "MaxFrameSizeBeforeLogon")),
    "MaxConnections": Elem("max_connections", positive(parse_count, "MaxConnections")),
}


def _transport_spec(ctx: Ctx) -> Spec:
    return Spec(
        elems={
            "Name": Elem("name", text, required=True),
            "Type": Elem("type", enum(["tcp", "tcps", *_UNSUPPORTED_TYPES]), required=True),
            "InetAddr": Elem("inet_addr", text, required=True),
            "MessageType": Elem("message_type", ctx.message_type),
            "Protocol": Elem("protocol", partial(resolve_protocol, ctx)),
            "Certificate": Elem("certificate", text),
            "PrivateKey": Elem("private_key", text),
            "Ciphers": Elem("ciphers", text),
            "SecureSocketProtocols": Elem("secure_socket_protocols", parse_protocols),
            "PerMessageDeflate": Elem("per_message_deflate", text),
            "HTTPHeader": Elem("http_headers", parse_header, multiple=True),
            "VerifyClient": Elem("verify_client", parse_bool),
            "CAFile": Elem("ca_file", text),
            "CAPath": Elem("ca_path", text),
            "InitialState": Elem("enabled", parse_bool),
            "ReuseAddr": Elem("reuse_addr", parse_bool),
            "ClientMessageAgeLimit": Elem("client_message_age_limit",
                                          positive(parse_duration, "ClientMessageAgeLimit")),
            "MaxFrameSize": Elem("max_frame_size", positive(parse_size, "MaxFrameSize")),
            "ClientOutboundLimit": Elem("client_outbound_limit", positive(parse_size, "ClientOutboundLimit")),
            **slow_client_elems(),
            **LIMIT_ELEMENTS,
            # read by config.security.read_security (the loader's _read_security)
            "Authentication": Elem("authentication", node=as_node),
            "Entitlement": Elem("entitlement", node=as_node),
        },
        ignored=_TRANSPORT_IGNORED,
    )


def _unsupported_transport(node: Node, ctx: Ctx) -> str | None:
    t = node.child("Type")
    if t is not None and t.text.strip().lower() in _UNSUPPORTED_TYPES:
        return _UNSUPPORTED_TYPES[t.text.strip().lower()]
    p = node.child("Protocol")
    if p is not None and p.text:
        try:
            base, written = resolve_protocol(ctx, p.text)
        except ValueError:
            return None  # reported when the transport is read
        if base not in _SERVED_PROTOCOLS:
            via = "" if written.lower() == base else f"protocol {written!r} is built on {base}: "
            return via + _UNSUPPORTED_PROTOCOLS.get(
                base, f"the custom protocol module {base!r} is not supported")
    return None


def read_transports(node: Node, ctx: Ctx, defaults: InstanceDefaults) -> tuple[Transport, ...]:
    where = "<Transports>"
    if node.text:
        ctx.err(node, f"unexpected text {node.text[:40]!r} in {where}")
    spec = _transport_spec(ctx)
    out: list[Transport] = []
    by_name: dict[str, Transport] = {}
    bound: list[Transport] = []
    for child in node.children:
        if child.tag != "Transport":
            unknown_element(ctx, child, where, ["Transport"])
            continue
        if is_replication_transport(child):
            continue  # not a client transport: read by read_replication_listener
        reason = _unsupported_transport(child, ctx)
        if reason is not None:
            child.ignored = True
            ctx.warn(child, f"{label(child)} is ignored: {reason} by the emulator")
            continue
        t = _read_transport(child, spec, ctx, defaults)
        if t is None:
            continue
        if t.name in by_name:
            prev = by_name[t.name]
            ctx.err(child, f"duplicate transport name {t.name!r} (also used at {prev.file}:{prev.line})")
            continue
        if t.port != 0:
            clash = next((o for o in bound if o.port == t.port
                          and (o.host is None or t.host is None or o.host == t.host)), None)
            if clash is not None:
                ctx.err(child, f"<Transport> {t.name!r}: InetAddr {t.inet_addr} conflicts with transport "
                               f"{clash.name!r} ({clash.file}:{clash.line}) on port {t.port}")
                continue
            bound.append(t)
        by_name[t.name] = t
        out.append(t)
    return tuple(out)


def inet_addr_of(r, where: str, ctx: Ctx) -> tuple[str | None, int] | None:
    """``(host, port)`` of the section's ``InetAddr`` (``(None, 0)`` without one); ``None``
    after reporting a malformed one."""
    if "inet_addr" not in r.values:
        return None, 0
    try:
        return parse_inet_addr(r.values["inet_addr"])
    except ValueError as e:
        ctx.err(r.nodes["inet_addr"], f"invalid <InetAddr> in {where}: {e}")
        return None


def _read_transport(node: Node, spec: Spec, ctx: Ctx, defaults: InstanceDefaults) -> Transport | None:
    r = read(node, spec, ctx)
    addr = inet_addr_of(r, label(node), ctx)
    if addr is None or not r.ok:
        return None
    host, port = addr
    if not _tls_usable(node, r, ctx):
        return None
    base = r.get("protocol", ("amps", "amps"))[0]
    if base in LEGACY_PROTOCOLS and r.get("message_type") is None:
        ctx.err(node, f"{label(node)}: the legacy {base} protocol needs a <MessageType> (its "
                      f"clients name no message type)")
        return None
    return Transport(
        file=node.file,
        line=node.line,
        name=r.values["name"],
        type=r.values["type"],
        host=host,
        port=port,
        inet_addr=r.values["inet_addr"],
        message_type=r.get("message_type"),
        protocol=r.get("protocol", ("amps", "amps"))[0],
        protocol_name=r.get("protocol", ("amps", "amps"))[1],
        enabled=r.get("enabled", True),
        reuse_addr=r.get("reuse_addr", True),
        client_message_age_limit=r.get("client_message_age_limit", defaults.client_message_age_limit),
        max_frame_size=r.get("max_frame_size", defaults.max_frame_size),
        client_outbound_limit=r.get("client_outbound_limit", defaults.client_outbound_limit),
        slow_clients=slow_clients(r.values, defaults.slow_clients),
        max_frame_size_before_logon=r.get("max_frame_size_before_logon",
                                          defaults.max_frame_size_before_logon),
        max_connections=r.get("max_connections", defaults.max_connections),
        certificate=r.get("certificate"),
        private_key=r.get("private_key"),
        ciphers=r.get("ciphers"),
        secure_socket_protocols=r.get("secure_socket_protocols"),
        verify_client=r.get("verify_client", False),
        ca_file=r.get("ca_file"),
        ca_path=r.get("ca_path"),
        per_message_deflate=_per_message_deflate(node, r, ctx, base),
        http_headers=_http_headers(node, r, ctx, base),
    )


def _http_headers(node: Node, r, ctx: Ctx, protocol: str) -> tuple[tuple[str, str], ...]:
    """``HTTPHeader``: the websocket upgrade's extra headers (warned about elsewhere)."""
    headers = tuple(r.get("http_headers", ()))
    if headers and protocol != "websocket":
        ctx.warn(r.nodes["http_headers"], f"{label(node)}: <HTTPHeader> has no effect: the "
                                          f"transport's protocol is {protocol}, not websocket")
    return headers


def _per_message_deflate(node: Node, r, ctx: Ctx, protocol: str) -> bool:
    """``PerMessageDeflate``: AMPS deflates unless it reads ``disabled`` (absent, or any other
    value, is enabled); a value that is neither word, or the element on a transport that is
    not websocket, is warned about."""
    value = r.get("per_message_deflate")
    if value is None:
        return True
    at = r.nodes["per_message_deflate"]
    word = value.strip().lower()
    if protocol != "websocket":
        ctx.warn(at, f"{label(node)}: <PerMessageDeflate> has no effect: the transport's protocol is "
                     f"{protocol}, not websocket")
    elif word not in ("enabled", "disabled"):
        ctx.warn(at, f"{label(node)}: <PerMessageDeflate> {value.strip()!r} is neither enabled nor "
                     "disabled: deflate stays enabled, as in AMPS")
    return word != "disabled"


def _tls_usable(node: Node, r, ctx: Ctx) -> bool:
    """Check a TLS transport's certificate, key, ciphers and protocols now, at their element's
    line."""
    cert, key = r.get("certificate"), r.get("private_key")
    if cert is None and key is None:
        for tag in ("Ciphers", "SecureSocketProtocols"):
            at = r.nodes.get(_TLS_ATTRS[tag])
            if at is not None and r.values["type"] == "tcp":  # (tcps without them: an error below)
                ctx.warn(at, f"{label(node)}: <{tag}> has no effect: the transport is not TLS "
                             "(no <Certificate> and <PrivateKey>)")
        if r.get("verify_client", False):
            ctx.err(r.nodes["verify_client"], f"{label(node)}: <VerifyClient> needs a TLS transport "
                                              "(<Certificate> and <PrivateKey>)")
            return False
        if r.values["type"] == "tcps":
            ctx.err(node, f"{label(node)}: Type tcps requires <Certificate> and <PrivateKey>")
            return False
        return True
    if cert is None or key is None:
        have, missing = ("Certificate", "PrivateKey") if key is None else ("PrivateKey", "Certificate")
        ctx.err(node, f"{label(node)}: <{have}> without <{missing}>")
        return False
    protocols = r.get("secure_socket_protocols")
    try:
        server_context(cert, key, r.get("ciphers"), verify_client=r.get("verify_client", False),
                       ca_file=r.get("ca_file"), ca_path=r.get("ca_path"), protocols=protocols)
    except TLSSetupError as exc:
        ctx.err(r.nodes.get(_TLS_ATTRS[exc.element], node), f"{label(node)}: {exc}")
        return False
    warn_unavailable_protocols(ctx, node, r.nodes.get("secure_socket_protocols"), protocols)
    return True


#: the attribute each TLS element is read into (where a TLSSetupError is reported)
_TLS_ATTRS = {"Certificate": "certificate", "PrivateKey": "private_key", "Ciphers": "ciphers",
              "SecureSocketProtocols": "secure_socket_protocols", "VerifyClient": "verify_client",
              "CAFile": "ca_file", "CAPath": "ca_path"}


def warn_unavailable_protocols(ctx: Ctx, node: Node, at: Node | None,
                               protocols: tuple[str, ...] | None) -> None:
    """One warning at ``SecureSocketProtocols`` for the versions it lists that the OpenSSL the
    emulator runs on cannot negotiate (the others are served)."""
    gone = unavailable_protocols(protocols or ())
    if gone and at is not None:
        ctx.warn(at, f"{label(node)}: {' '.join(gone)} cannot be negotiated with {ssl.OPENSSL_VERSION}: "
                     "the transport accepts the other protocols listed")


# --- Protocols (read by config.httpd.protocols) ---------------------------------------

def resolve_protocol(ctx: Ctx, text: str) -> tuple[str, str]:
    """``(base protocol, name as written)`` for a Transport's ``Protocol``."""
    written = text.strip()
    if written in ctx.protocols:
        return ctx.protocols[written], written
    low = written.lower()
    if low in BUILTIN_PROTOCOLS or low in PROTOCOL_SYNONYMS:
        return PROTOCOL_SYNONYMS.get(low, low), written
    known = [*BUILTIN_PROTOCOLS, *ctx.protocols]
    hint = suggest(written, known)
    extra = f"; did you mean {hint!r}?" if hint else ""
    raise ValueError(f"unknown protocol {written!r}: neither a built-in protocol "
                     f"({', '.join(BUILTIN_PROTOCOLS)}) nor a <Protocol> declared under <Protocols>{extra}")


_INDEXING_SPEC = Spec(elems={"Enabled": Elem("enabled", parse_bool)})
_STATISTICS_SPEC = Spec(elems={
    "Indexing": Elem("indexing", node=lambda n, c: read(n, _INDEXING_SPEC, c).get("enabled", False)),
})


def read_statistics(node: Node, ctx: Ctx) -> bool:
    """``Statistics``: whether ``Indexing/Enabled`` asks for an index on ``static_id`` of
    every DYNAMIC table of the statistics database."""
    return bool(read(node, _STATISTICS_SPEC, ctx).get("indexing", False))


# --- Logging ------------------------------------------------------------------------------

LOG_LEVELS = ("developer", "trace", "stats", "info", "warning", "error", "critical", "emergency", "none")
_level = enum(LOG_LEVELS, {"debug": "info"})
_FACILITIES = ("LOG_USER", *(f"LOG_LOCAL{i}" for i in range(8)))

_TARGET_SPEC = Spec(
    elems={
        "Protocol": Elem("protocol", enum(["stdout", "stderr", "file", "gzip", "syslog"]), required=True),
        "Level": Elem("level", _level),
        "Levels": Elem("levels", each(_level, parse_comma_list)),
        "IncludeErrors": Elem("include_errors", each(parse_regex, parse_comma_list)),
        "ExcludeErrors": Elem("exclude_errors", each(parse_regex, parse_comma_list)),
        "FileName": Elem("file_name", text),
        "RotationThreshold": Elem("rotation_threshold",
                                  positive(lambda s: parse_size(s, binary=False), "RotationThreshold")),
        "Ident": Elem("ident", text),
        "Options": Elem("options", parse_comma_list),
        "Facility": Elem("facility", enum(_FACILITIES)),
    },
)


def read_logging(node: Node, ctx: Ctx) -> tuple[LogTarget, ...]:
    r = read(node, Spec(elems={"Target": Elem("targets", node=lambda n, c: n, multiple=True)}), ctx)
    out: list[LogTarget] = []
    for target in r.get("targets", []):
        t = read(target, _TARGET_SPEC, ctx)
        if not t.ok:
            continue
        protocol = t.values["protocol"]
        file_name = t.get("file_name")
        if protocol in ("file", "gzip") and file_name is None:
            file_name = "%Y-%m-%dT%H%M%S.log"
        out.append(LogTarget(
            file=target.file, line=target.line, protocol=protocol, level=t.get("level"),
            levels=t.get("levels", ()), include_errors=t.get("include_errors", ()),
            exclude_errors=t.get("exclude_errors", ()), file_name=file_name,
            rotation_threshold=t.get("rotation_threshold"), ident=t.get("ident"),
            options=t.get("options", ()), facility=t.get("facility"),
        ))
    return tuple(out)


# --- TransactionLog -----------------------------------------------------------------------

def _txlog_topic(ctx: Ctx) -> Spec:
    return Spec(elems={
        "Name": Elem("name", parse_regex, required=True),
        "MessageType": Elem("message_type", ctx.message_type, required=True),
    })


def _read_txlog_topic(node: Node, ctx: Ctx) -> TxLogTopic | object:
    r = read(node, _txlog_topic(ctx), ctx, where="<TransactionLog>/<Topic>")
    if not r.ok:
        return MISSING
    return TxLogTopic(r.values["name"], r.values["message_type"])


_FLUSH_MIN, _FLUSH_MAX = 1e-6, 1.0


def _flush_interval(s: str) -> float:
    v = parse_duration(s)
    if not (_FLUSH_MIN <= v <= _FLUSH_MAX):
        raise ValueError(f"{s.strip()!r} is outside the allowed range 1us to 1s")
    return v


_TXLOG_SPEC = Spec(
    elems={
        "JournalDirectory": Elem("journal_directory", text, required=True),
        "JournalArchiveDirectory": Elem("journal_archive_directory", text),
        "PreallocatedJournalFiles": Elem("preallocated_journal_files",
                                         positive(parse_count, "PreallocatedJournalFiles")),
        "JournalSize": Elem("journal_size", at_least(parse_size, 64 * KiB, "64KB")),
        "MinJournalSize": Elem("journal_size", at_least(parse_size, 64 * KiB, "64KB")),
        "Topic": Elem("topics", node=_read_txlog_topic, multiple=True),
        "FlushInterval": Elem("flush_interval", _flush_interval),
        "InactiveClientAckExpiration": Elem("inactive_client_ack_expiration",
                                            positive(parse_duration, "InactiveClientAckExpiration")),
        "Durability": Elem("durability", enum(["group", "strict", "memory"])),
        "RetentionSize": Elem("retention_size", positive(parse_size, "RetentionSize")),
        "RetentionAge": Elem("retention_age", positive(parse_duration, "RetentionAge")),
        "CompressedJournalCacheMemoryLimit": Elem(
            "compressed_journal_cache_limit",
            positive(parse_size, "CompressedJournalCacheMemoryLimit")),
    },
    ignored=frozenset({"O_DIRECT"}),
)


def read_transaction_log(node: Node, ctx: Ctx) -> TransactionLog | None:
    r = read(node, _TXLOG_SPEC, ctx)
    if not r.ok:
        return None
    return TransactionLog(
        file=node.file, line=node.line,
        journal_directory=r.values["journal_directory"],
        journal_archive_directory=r.get("journal_archive_directory"),
        journal_size=r.get("journal_size", 1024 * 1024 * 1024),
        preallocated_journal_files=r.get("preallocated_journal_files", 2),
        topics=tuple(r.get("topics", ())),
        flush_interval=r.get("flush_interval", 0.1),
        inactive_client_ack_expiration=r.get("inactive_client_ack_expiration"),
        durability=r.get("durability", "group"),
        retention_size=r.get("retention_size"),
        retention_age=r.get("retention_age"),
        compressed_journal_cache_limit=r.get("compressed_journal_cache_limit"),
    )
