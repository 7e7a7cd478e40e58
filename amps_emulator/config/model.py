"""Frozen, typed structures that an AMPS configuration file turns into.

Units are normalised once, here, so nothing downstream parses text again:

* durations are ``float`` seconds, sizes are ``int`` bytes, counts are ``int``;
* optional AMPS settings that are "unset" in AMPS are ``None`` here;
* every structure built from an element carries ``file`` and ``line`` of that element, so the
  server can say *where* a setting came from when something fails at runtime.

The element each field comes from is named in the field comment. Fields marked
**[emulator]** are emulator extensions (not AMPS elements); see :mod:`config` for the list.
"""

from __future__ import annotations

import functools
import getpass
import os
import re
import ssl
from typing import Literal, NamedTuple

import msgspec

from amps_emulator.protocol.msgtypes import MessageTypeDecl

from .auxiliary.model import AuxModules, ChainingKeys
from .errors import ConfigIssue
from .security import SecurityConfig
from .values import is_regex

MiB = 1024 * 1024

DEFAULT_MAX_FRAME_SIZE = 64 * MiB
DEFAULT_CLIENT_OUTBOUND_LIMIT = 128 * MiB
#: MaxFrameSizeBeforeLogon's default: a connection that has not logged on sends no more
DEFAULT_MAX_FRAME_SIZE_BEFORE_LOGON = 1 * MiB

QueueKind = Literal["queue", "local", "group_local"]
StepKind = Literal["on", "if", "do"]
TxLogDurability = Literal["group", "strict", "memory"]


@functools.lru_cache(maxsize=256)
def _format_regex(fmt: str) -> re.Pattern[str]:
    """A ``TopicFormat`` as the regex of the names it gives: ``%n`` the logical topic's name
    (every ``%n`` the same one)."""
    parts = [re.escape(p) for p in fmt.split("%n")]
    return re.compile(parts[0] + "".join(("(.+)" if i == 1 else r"\1") + p
                                         for i, p in enumerate(parts[1:], 1)))


class _Located(msgspec.Struct, frozen=True, kw_only=True):
    file: str = ""  # file the element was read from ("<default>" for built-in defaults)
    line: int = 0  # line of the element's start tag


class SlowClients(msgspec.Struct, frozen=True, kw_only=True):
    """Slow client offlining (``MessageMemoryLimit``, ``MessageDiskLimit``, ``MessageDiskPath``,
    ``ClientMaxCapacity``), at the instance's level or a transport's own.

    Past its share of ``memory_limit`` (or when the pool's clients together exceed it, the one
    holding most) a client is offlined: its messages wait in a file under ``disk_path`` until
    it reads them. Past its share of ``disk_limit`` (or the pool's), it is disconnected.
    ``memory_limit`` None: not configured, no offlining (the emulator's ``ClientOutboundLimit``
    and memory budget disconnect a slow client instead)."""

    memory_limit: int | None = None  # MessageMemoryLimit
    disk_limit: int | None = None  # MessageDiskLimit; None: 1GB or memory_limit, the higher
    disk_path: str = "/var/tmp"  # MessageDiskPath
    capacity: float = 0.5  # ClientMaxCapacity, a fraction of the limits one client may use
    #: the transport sets a pool element of its own (memory, disk, path): its own pool
    own_pool: bool = False

    @property
    def disk_bytes(self) -> int:
        return self.disk_limit if self.disk_limit is not None else max(
            1 << 30, self.memory_limit or 0)


class Transport(_Located, frozen=True, kw_only=True):
    """``Transports/Transport``: one listening socket for client connections."""

    name: str  # Name
    type: str  # Type: "tcp" or "tcps" (unix/replication are warned and dropped)
    host: str | None  # InetAddr host part; None = every interface (InetAddr was a bare port)
    port: int  # InetAddr port (0 = pick a free port)
    inet_addr: str  # InetAddr as written
    message_type: str | None  # MessageType; None = the connection chooses (any message type)
    protocol: str  # base protocol: "amps" ("json" is normalised to "amps") or "websocket", or the
    #              Module of a custom protocol named under <Protocols>
    protocol_name: str = ""  # Protocol as written (a built-in name or a <Protocols>/<Protocol> Name)
    enabled: bool = True  # InitialState: enabled/disabled
    reuse_addr: bool = True  # ReuseAddr: SO_REUSEADDR on the listening socket
    client_message_age_limit: float | None = None  # ClientMessageAgeLimit (here or instance level)
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE  # [emulator] MaxFrameSize: largest frame accepted
    client_outbound_limit: int = DEFAULT_CLIENT_OUTBOUND_LIMIT  # [emulator] ClientOutboundLimit
    slow_clients: SlowClients = SlowClients()  # MessageMemoryLimit ... (here or instance level)
    #: [emulator] MaxFrameSizeBeforeLogon: largest frame (and queued output) before a logon
    max_frame_size_before_logon: int = DEFAULT_MAX_FRAME_SIZE_BEFORE_LOGON
    #: [emulator] MaxConnections: sockets open at once (None: a share of the open-file limit)
    max_connections: int | None = None
    certificate: str | None = None  # Certificate: PEM file; with PrivateKey the transport is TLS
    private_key: str | None = None  # PrivateKey: PEM file
    ciphers: str | None = None  # Ciphers: OpenSSL cipher list
    #: SecureSocketProtocols: the TLS versions accepted, oldest first (None: TLSv1.1 to TLSv1.3)
    secure_socket_protocols: tuple[str, ...] | None = None
    verify_client: bool = False  # VerifyClient: a TLS client must present a certificate we trust
    ca_file: str | None = None  # CAFile: PEM file of the CAs client certificates are checked against
    ca_path: str | None = None  # CAPath: directory of hashed CA certificates (c_rehash)
    #: PerMessageDeflate (websocket): negotiate RFC 7692 compression with a client that offers it
    per_message_deflate: bool = True
    #: HTTPHeader (websocket): each ``(name, value)`` added to the upgrade's responses
    http_headers: tuple[tuple[str, str], ...] = ()

    @property
    def tls(self) -> bool:
        """TLS is served on tcps, and on tcp when a certificate and key are given (as AMPS)."""
        return self.type == "tcps" or (self.certificate is not None and self.private_key is not None)


class ProtocolDef(_Located, frozen=True, kw_only=True):
    """``Protocols/Protocol``: a named customisation of a protocol module."""

    name: str  # Name: what a Transport's <Protocol> refers to
    module: str  # Module: the protocol it is built on (amps, websocket, ...; json -> amps)
    options: tuple[tuple[str, str], ...] = ()  # the module's options (WWWAuthenticate, ...) as written
    #: websocket HTTPHeader: each ``(name, value)`` added to the upgrade's responses
    http_headers: tuple[tuple[str, str], ...] = ()
    #: websocket WWWAuthenticate: the upgrade must carry HTTP credentials (None: it need not);
    #: only a ``Basic`` challenge is served
    www_authenticate: str | None = None
    #: websocket TrustedAdmin: an upgrade carrying a valid Admin session cookie logs on as its user
    trusted_admin: bool = False


class Admin(_Located, frozen=True, kw_only=True):
    """``Admin``: the HTTP monitoring interface."""

    host: str | None  # InetAddr host; None = every interface
    port: int  # InetAddr port
    inet_addr: str  # InetAddr as written
    file_name: str = ":memory:"  # FileName: statistics database
    interval: float = 10.0  # Interval: statistics refresh, seconds
    sql_transport: str | None = None  # SQLTransport
    external_inet_addr: str | None = None  # ExternalInetAddr
    #: WWWAuthenticate: the challenge of a 401 when Admin has its own Authentication or
    #: Entitlement block (None: ``Basic realm="AMPS Admin"``)
    www_authenticate: str | None = None
    #: Header: each ``(name, value)`` added to every Admin response
    headers: tuple[tuple[str, str], ...] = ()
    #: AccessControlAllowOrigin: a regex; an ``Origin`` it matches is echoed (None: ``*``)
    allow_origin: str | None = None
    #: AnonymousPaths: a regex; the paths it matches skip authentication and entitlement
    anonymous_paths: str | None = None
    #: SessionOptions: what follows the session cookie's value (None: AMPS's default)
    session_options: str | None = None
    certificate: str | None = None  # Certificate: with PrivateKey, Admin is served over HTTPS
    private_key: str | None = None  # PrivateKey
    ciphers: str | None = None  # Ciphers: OpenSSL cipher list
    #: [emulator] SecureSocketProtocols: the TLS versions HTTPS accepts (None: TLSv1.1 to 1.3)
    secure_socket_protocols: tuple[str, ...] | None = None
    #: Galvanometer: false turns the emulator's web console (its stand-in) off
    galvanometer: bool = True
    sql_transport_inet_addr: str | None = None  # SQLTransportInetAddr (Galvanometer's; no effect)

    @property
    def tls(self) -> bool:
        return self.certificate is not None and self.private_key is not None


class LogTarget(_Located, frozen=True, kw_only=True):
    """``Logging/Target``."""

    protocol: str  # Protocol: stdout | stderr | file | gzip | syslog
    level: str | None = None  # Level: lowest level logged (debug is normalised to info)
    levels: tuple[str, ...] = ()  # Levels: extra individual levels
    include_errors: tuple[str, ...] = ()  # IncludeErrors: ids or regexes, e.g. 00-0015
    exclude_errors: tuple[str, ...] = ()  # ExcludeErrors
    file_name: str | None = None  # FileName (file/gzip; %n and strftime masks kept as written)
    rotation_threshold: int | None = None  # RotationThreshold, bytes (decimal units, as AMPS)
    ident: str | None = None  # Ident (syslog)
    options: tuple[str, ...] = ()  # Options (syslog), e.g. LOG_PID
    facility: str | None = None  # Facility (syslog)


class TxLogTopic(NamedTuple):
    """``TransactionLog/Topic``: a topic name or regex, and its message type."""

    name: str  # Name
    message_type: str  # MessageType


def topic_matches(pattern: str, topic: str) -> bool:
    """AMPS topic matching used for TransactionLog topics and queue underlying topics.

    A name without regex metacharacters matches only itself; otherwise it is a regular
    expression searched in the topic (so write ``^...$`` to anchor, as AMPS configs do).
    """
    if not is_regex(pattern):
        return pattern == topic
    return re.search(pattern, topic) is not None


class TransactionLog(_Located, frozen=True, kw_only=True):
    """``TransactionLog``: the journal that records topics for replay, queues and acks."""

    journal_directory: str  # JournalDirectory
    journal_archive_directory: str | None = None  # JournalArchiveDirectory
    journal_size: int = 1024 * MiB  # JournalSize (synonym MinJournalSize): size of one file
    preallocated_journal_files: int = 2  # PreallocatedJournalFiles
    topics: tuple[TxLogTopic, ...] = ()  # Topic (Name regex + MessageType), in file order
    flush_interval: float = 0.1  # FlushInterval, seconds
    inactive_client_ack_expiration: float | None = None  # InactiveClientAckExpiration
    durability: TxLogDurability = "group"  # [emulator] Durability: group | strict | memory
    retention_size: int | None = None  # [emulator] RetentionSize: drop oldest files above this
    retention_age: float | None = None  # [emulator] RetentionAge: drop files older than this
    #: CompressedJournalCacheMemoryLimit: bytes of decompressed journal kept (None: AMPS's default)
    compressed_journal_cache_limit: int | None = None

    def records(self, topic: str, message_type: str) -> bool:
        """True when a publish to ``topic`` of ``message_type`` is recorded in this log."""
        return any(
            t.message_type == message_type and topic_matches(t.name, topic) for t in self.topics
        )


class SowTopic(_Located, frozen=True, kw_only=True):
    """``SOW/Topic`` (legacy ``TopicDefinition``): a last-value-cache topic."""

    name: str  # Name (synonym Topic)
    message_type: str  # MessageType
    file_name: str | None = None  # FileName as written (may contain %n)
    resolved_file_name: str | None = None  # FileName with %n -> "<name>.<message_type>" (escaped)
    durability: Literal["persistent", "transient"] = "persistent"  # Durability (synonym Duration)
    keys: tuple[str, ...] = ()  # Key...; empty = publishers provide the SowKey
    key_domain: str | None = None  # KeyDomain (defaults to the topic name in AMPS)
    expiration_enabled: bool = False  # Expiration: enabled, or a duration
    expiration: float | None = None  # Expiration duration, seconds (None = per-message only/off)
    hash_indexes: tuple[tuple[str, ...], ...] = ()  # HashIndex/Key...
    indexes: tuple[str, ...] = ()  # Index (memo indexes to pre-create)
    recovery_point: str = "epoch"  # RecoveryPoint
    history: tuple[float, float] | None = None  # History: (Window, Granularity) in seconds
    #: Pattern (or a SOW/RegexTopic's Name): this definition holds one logical SOW topic per
    #: published topic name the regex matches; ``name`` is then the physical (container) name
    pattern: str | None = None
    #: Preprocessing/Field texts (run before the SowKey is computed); Enrichment/Field texts
    #: (run after, may read OF PREVIOUS): each ``<expression> AS /field [HINT ...]``
    preprocessing: tuple[str, ...] = ()
    enrichment: tuple[str, ...] = ()
    #: KeyGenerator through the chaining key generator (None: the Key fields, if any)
    key_generator: ChainingKeys | None = None

    def holds(self, topic: str) -> bool:
        """True when ``topic`` is one of this container's logical topics."""
        return self.pattern is not None and re.search(self.pattern, topic) is not None


class Queue(_Located, frozen=True, kw_only=True):
    """``SOW/Queue`` | ``SOW/LocalQueue`` | ``SOW/GroupLocalQueue`` (legacy ``QueueDefinition``)."""

    kind: QueueKind  # which element: Queue/QueueDefinition, LocalQueue, GroupLocalQueue
    name: str  # Name (synonym Topic)
    message_type: str  # MessageType
    underlying_topic: str  # UnderlyingTopic (name or regex); defaults to the queue name
    #: True when ``underlying_topic`` is the queue's own name taken literally (no UnderlyingTopic
    #: given): a name such as ``orders.queue`` is then not a regular expression
    underlying_literal: bool = False
    default_publish_target: str | None = None  # DefaultPublishTarget
    semantics: Literal["at-least-once", "at-most-once"] = "at-least-once"  # Semantics
    lease_period: float | None = None  # LeasePeriod, seconds (None = leases never expire)
    max_backlog: int | None = None  # MaxBacklog (None = unlimited)
    max_per_subscription_backlog: int = 1  # MaxPerSubscriptionBacklog
    expiration: float | None = None  # Expiration, seconds (None = messages never expire)
    expiration_model: Literal["default", "queue", "latest", "earliest"] = "default"  # ExpirationModel
    fairness_model: Literal["fast", "round-robin", "proportional"] = "proportional"  # FairnessModel
    leasing: Literal["strict", "sublet"] = "sublet"  # Leasing
    max_cancels: int = 0  # MaxCancels (0 = no limit)
    max_deliveries: int = 0  # MaxDeliveries (0 = no limit)
    target_queue_depth: int | None = None  # TargetQueueDepth (None = all messages active)
    priority: str | None = None  # Priority (field or expression)
    barrier_expression: str | None = None  # BarrierExpression (filter)
    filter: str | None = None  # Filter applied to the underlying topic
    recovery_point: str = "epoch"  # RecoveryPoint
    file_backed_metadata: bool = False  # FileBackedMetadata
    deferred_ack_expiration: float = 86400.0  # DeferredAckExpiration, seconds
    initial_owner: str | None = None  # InitialOwner (GroupLocalQueue only)
    group_local_queue_domain: str | None = None  # GroupLocalQueueDomain (GroupLocalQueue only)


class View(_Located, frozen=True, kw_only=True):
    """``SOW/View`` (legacy ``ViewDefinition``): an aggregation over SOW topics."""

    name: str  # Name (synonym Topic)
    message_type: str  # MessageType (of the view's output)
    underlying_topic: str | None  # UnderlyingTopic text, or None when it holds Join elements
    joins: tuple[str, ...] = ()  # UnderlyingTopic/Join...
    projection: tuple[str, ...] = ()  # Projection/Field...
    grouping: tuple[str, ...] = ()  # Grouping/Field...
    filter: str | None = None  # Filter (single-topic views only)
    key_domain: str | None = None  # KeyDomain
    conflation: Literal["none", "inline"] = "none"  # Conflation
    hash_indexes: tuple[tuple[str, ...], ...] = ()  # HashIndex/Key...
    join_null_equivalency: bool = False  # JoinNullEquivalency


class ConflatedTopic(_Located, frozen=True, kw_only=True):
    """``SOW/ConflatedTopic`` (legacy ``ReplicaDefinition``)."""

    name: str  # Name (synonym Topic)
    message_type: str  # MessageType
    underlying_topic: str  # UnderlyingTopic
    interval: float = 5.0  # Interval, seconds
    filter: str | None = None  # Filter
    hash_indexes: tuple[tuple[str, ...], ...] = ()  # HashIndex/Key...
    topic_format: str | None = None  # TopicFormat
    enrichment: tuple[str, ...] = ()  # Enrichment/Field texts (no OF PREVIOUS)
    #: the UnderlyingTopic is a Topic with a Pattern: one conflated topic per logical topic,
    #: named by TopicFormat (``%n``: the logical topic's name)
    over_pattern: bool = False

    def logical_name(self, topic: str) -> str:
        """The conflated topic of the underlying logical topic ``topic``."""
        return (self.topic_format or "%n").replace("%n", topic)

    def underlying_of(self, name: str) -> str | None:
        """The underlying logical topic whose conflated topic ``name`` would be (None: the
        format cannot give ``name``)."""
        m = _format_regex(self.topic_format or "%n").fullmatch(name)
        return m.group(1) if m is not None else None


class ActionOption(NamedTuple):
    """One child of an ``Options`` element; nested children are flattened to ``A/B``."""

    name: str
    value: str


class ActionStep(_Located, frozen=True, kw_only=True):
    """One ``On``, ``If`` or ``Do`` of an action: a module and its options."""

    kind: StepKind
    module: str  # Module, e.g. amps-action-do-publish-message
    options: tuple[ActionOption, ...] = ()  # Options/* in file order (names may repeat)

    def option(self, name: str, default: str | None = None) -> str | None:
        """The first value of option ``name`` (e.g. ``Topic``), or ``default``."""
        for o in self.options:
            if o.name == name:
                return o.value
        return default

    def option_values(self, name: str) -> tuple[str, ...]:
        """Every value of a repeatable option (e.g. ``Value`` or ``Case``)."""
        return tuple(o.value for o in self.options if o.name == name)


class Action(_Located, frozen=True, kw_only=True):
    """``Actions/Action``: run ``steps`` whenever any ``on`` event fires."""

    on: tuple[ActionStep, ...]  # On... (any of them triggers the action)
    steps: tuple[ActionStep, ...]  # If and Do, in file order; an If that fails stops the action

    @property
    def do(self) -> tuple[ActionStep, ...]:
        return tuple(s for s in self.steps if s.kind == "do")

    @property
    def conditions(self) -> tuple[ActionStep, ...]:
        return tuple(s for s in self.steps if s.kind == "if")


SyncType = Literal["sync", "async"]
CompressionType = Literal["zlib", "zstd"]
ReplicationTransportType = Literal["amps-replication", "amps-replication-secure"]

#: the validation checks of ``Replication/Destination/Topic`` (Include/ExcludeValidation)
REPLICATION_VALIDATIONS = ("txlog", "replicate", "sow", "keys", "cascade", "replicate_filter",
                           "queue", "queue_underlying", "queue_passthrough")
#: checks that ``ExcludeValidation`` cannot switch off
REPLICATION_VALIDATIONS_REQUIRED = ("queue", "queue_underlying")


#: the replication transport's default MaxConnections: a few peers (each has a link or two
#: with this instance, and a bootstrap while it starts) with room to spare
DEFAULT_REPLICATION_MAX_CONNECTIONS = 64


class ReplicationListener(_Located, frozen=True, kw_only=True):
    """The instance's one ``Transports/Transport`` of ``Type`` ``amps-replication`` (or
    ``-secure``): where other instances connect to replicate into this one. Clients cannot use it.
    Its ``Authentication``/``Entitlement`` (else the instance's) decide who may log on to it:
    they are in ``Config.security`` under its name."""

    name: str  # Name
    type: ReplicationTransportType  # Type
    host: str | None  # InetAddr host; None = every interface
    port: int  # InetAddr port (0 = pick a free port)
    inet_addr: str  # InetAddr as written
    certificate: str | None = None  # Certificate (required for -secure)
    private_key: str | None = None  # PrivateKey (required for -secure)
    ciphers: str | None = None  # Ciphers
    #: SecureSocketProtocols (-secure): the TLS versions accepted (None: TLSv1.1 to TLSv1.3)
    secure_socket_protocols: tuple[str, ...] | None = None
    verify_client: bool = False  # VerifyClient (-secure): a peer must present a certificate we trust
    ca_file: str | None = None  # CAFile: the CAs a peer's certificate is checked against, or
    ca_path: str | None = None  # CAPath (the system's CAs when neither is given)
    #: [emulator] MaxConnections: peer sockets open at once (one past it is reset at its accept)
    max_connections: int = DEFAULT_REPLICATION_MAX_CONNECTIONS

    @property
    def tls(self) -> bool:
        return self.type == "amps-replication-secure"


#: the authenticator AMPS uses for an outgoing replication connection unless told otherwise
DEFAULT_AUTHENTICATOR_MODULE = "amps-default-authenticator-module"


class ReplicationAuthenticator(_Located, frozen=True, kw_only=True):
    """An ``Authenticator`` (a ``Destination``'s or ``Bootstrap``'s ``Transport``'s, or the
    instance's): the credentials this instance logs on with to another instance's replication
    transport. The default module: ``User`` (else the process's user) and a password from
    ``Password``, ``PasswordFileName`` or ``PasswordEnvironmentVariable`` (read at each
    connection); the LDAP options of the multimechanism authenticator fill the same fields;
    the exec authenticator's ``command`` prints the password (``replication.exec_auth``)."""

    module: str = DEFAULT_AUTHENTICATOR_MODULE  # Module
    library: str | None = None  # the library Module loads (None: the default module)
    user: str | None = None  # Options/User (UserName, LDAP.Username)
    password: str | None = None  # Options/Password
    password_file: str | None = None  # Options/PasswordFileName
    password_env: str | None = None  # Options/PasswordEnvironmentVariable
    #: exec authenticator: Command, split (its output is the password), and MaxLength
    command: tuple[str, ...] | None = None
    max_length: int = 1024

    def credentials(self) -> tuple[str, str | None]:
        """(user name, password or None); ``OSError``/``KeyError`` when the password file or
        variable has gone since the configuration was loaded."""
        user = self.user
        if user is None:
            try:
                user = getpass.getuser()
            except (OSError, KeyError):
                user = ""
        if self.password is not None:
            return user, self.password
        if self.password_file is not None:
            with open(self.password_file, encoding="utf-8") as f:
                return user, f.read().strip()
        if self.password_env is not None:
            return user, os.environ[self.password_env]
        return user, None

    def __repr__(self) -> str:  # never the password
        return f"ReplicationAuthenticator(module={self.module!r}, user={self.user!r})"


class ReplicationAddress(NamedTuple):
    """One ``Destination/Transport/InetAddr``: where to connect (a bare port means localhost)."""

    host: str
    port: int
    inet_addr: str  # as written


class DestinationTransport(_Located, frozen=True, kw_only=True):
    """``Replication/Destination/Transport``: addresses tried in order; none = passive (wait for
    the remote instance to connect and replicate over its connection)."""

    type: ReplicationTransportType  # Type: must equal the remote's replication transport type
    addresses: tuple[ReplicationAddress, ...] = ()  # InetAddr, in priority order
    reconnect_timeouts: tuple[float, ...] = ()  # ReconnectTimeout: one for all, or one per InetAddr
    verify: bool = False  # VerifyClient (-secure): the destination's certificate must be signed by
    ca_file: str | None = None  # CAFile, or
    ca_path: str | None = None  # CAPath (the system's CAs when neither is given)
    #: [emulator] Certificate/PrivateKey (-secure): the certificate this instance presents, for a
    #: destination whose transport has VerifyClient (mutual TLS)
    certificate: str | None = None
    private_key: str | None = None
    ciphers: str | None = None  # Ciphers (-secure): the OpenSSL cipher list this connection offers
    #: Authenticator: the credentials of the logon (None: the instance's, else the default module's)
    authenticator: ReplicationAuthenticator | None = None

    def client_context(self) -> ssl.SSLContext | None:
        """The TLS context of a connection to this transport (None: plain TCP, Type
        amps-replication). AMPS checks the destination's certificate only with VerifyClient,
        against CAFile/CAPath, and encrypts without checking otherwise. With a Certificate and
        PrivateKey the connection presents that certificate; Ciphers restricts what it offers."""
        if self.type != "amps-replication-secure":
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False  # AMPS checks who signed the certificate, not the name
        if not self.verify:
            ctx.verify_mode = ssl.CERT_NONE
        elif self.ca_file is None and self.ca_path is None:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        else:
            ctx.load_verify_locations(cafile=self.ca_file, capath=self.ca_path)
        if self.certificate is not None and self.private_key is not None:
            ctx.load_cert_chain(self.certificate, self.private_key)
        if self.ciphers:
            ctx.set_ciphers(self.ciphers)  # ssl.SSLError: nothing selected
        return ctx

    @property
    def passive(self) -> bool:
        return not self.addresses

    def reconnect_timeout(self, index: int, default: float = 1.0) -> float:
        """The wait before retrying address ``index`` (the single value applies to all)."""
        t = self.reconnect_timeouts
        if not t:
            return default
        return t[index] if len(t) > 1 else t[0]


class ReplicationTopic(_Located, frozen=True, kw_only=True):
    """``Replication/Destination/Topic``: what travels to the destination."""

    name: str = ".*"  # Name: a literal topic or a regex
    message_type: str  # MessageType
    filter: str | None = None  # Filter: only matching messages replicate
    include_validation: tuple[str, ...] = ()  # IncludeValidation
    exclude_validation: tuple[str, ...] = ()  # ExcludeValidation (wins over Include)

    def matches(self, topic: str, message_type: str) -> bool:
        return message_type == self.message_type and topic_matches(self.name, topic)

    @property
    def validations(self) -> frozenset[str]:
        """The checks in force for this topic when a link connects (all by default)."""
        off = set(self.exclude_validation) - set(REPLICATION_VALIDATIONS_REQUIRED)
        return frozenset(v for v in REPLICATION_VALIDATIONS if v not in off)


class Destination(_Located, frozen=True, kw_only=True):
    """``Replication/Destination``: one outgoing replication link."""

    name: str  # Name (default: Group): the remote instance's Name, or a label for its group
    group: str  # Group (default: Name): must equal the remote instance's Group
    sync_type: SyncType  # SyncType
    transports: tuple[DestinationTransport, ...]  # Transport
    topics: tuple[ReplicationTopic, ...]  # Topic: a message matching any of them replicates
    pass_through: str | None = None  # PassThrough: regex over the immediate upstream's Group
    resync_pass_through: str | None = None  # ResyncPassThrough (default: PassThrough)
    compression: bool = False  # Compression: enabled/disabled
    compression_type: CompressionType = "zlib"  # CompressionType
    #: AckConflationInterval, seconds; None = [emulator] ack once per event-loop turn
    ack_conflation_interval: float | None = None

    @property
    def sync(self) -> bool:
        return self.sync_type == "sync"

    @property
    def passive(self) -> bool:
        return all(t.passive for t in self.transports)

    def selects(self, topic: str, message_type: str) -> ReplicationTopic | None:
        """The ``Topic`` that selects this topic: a literal name before any regex."""
        literal = next((t for t in self.topics if not is_regex(t.name)
                        and t.matches(topic, message_type)), None)
        if literal is not None:
            return literal
        return next((t for t in self.topics if is_regex(t.name) and t.matches(topic, message_type)), None)

    def passes(self, upstream_group: str | None, *, resync: bool = False) -> bool:
        """May a message that came from an instance of ``upstream_group`` go on to this
        destination? (None: published here directly, which always may.)"""
        if upstream_group is None:
            return True
        pattern = self.resync_pass_through if resync and self.resync_pass_through is not None \
            else self.pass_through
        return pattern is not None and re.search(pattern, upstream_group) is not None


BootstrapDataType = Literal["sow", "txlog"]


class Bootstrap(_Located, frozen=True, kw_only=True):
    """``Bootstrap``: fill an instance that starts with an empty transaction log from another
    instance's replication transport, once, before its replication links start."""

    topics: tuple[TxLogTopic, ...]  # Topic: Name (literal or regex) + MessageType
    data_types: tuple[BootstrapDataType, ...] = ("sow", "txlog")  # DataType
    transports: tuple[DestinationTransport, ...]  # Transport: InetAddr list tried in order

    def selects(self, topic: str, message_type: str) -> bool:
        return any(t.message_type == message_type and topic_matches(t.name, topic) for t in self.topics)


class Replication(_Located, frozen=True, kw_only=True):
    """``Replication`` plus ``Tuning/Replication`` and ``Bootstrap``."""

    destinations: tuple[Destination, ...] = ()  # Destination
    min_sync_destinations: int | None = None  # Tuning/Replication/MinSyncDestinations
    bootstrap: Bootstrap | None = None  # Bootstrap
    #: the instance's Authenticator: what an outgoing link whose Transport names none logs on with
    authenticator: ReplicationAuthenticator = msgspec.field(default_factory=ReplicationAuthenticator)

    def authenticator_for(self, transport: DestinationTransport) -> ReplicationAuthenticator:
        return transport.authenticator if transport.authenticator is not None else self.authenticator


class Config(msgspec.Struct, frozen=True, kw_only=True):
    """A whole AMPS configuration (``AMPSConfig``) as the emulator understands it."""

    name: str  # Name
    group: str | None = None  # Group
    description: str | None = None  # Description
    transports: tuple[Transport, ...] = ()  # Transports/Transport (supported ones only)
    protocols: tuple[ProtocolDef, ...] = ()  # Protocols/Protocol
    admin: Admin | None = None  # Admin
    logging: tuple[LogTarget, ...] = ()  # Logging/Target
    transaction_log: TransactionLog | None = None  # TransactionLog
    sow_topics: tuple[SowTopic, ...] = ()  # SOW/Topic
    queues: tuple[Queue, ...] = ()  # SOW/Queue, LocalQueue, GroupLocalQueue
    views: tuple[View, ...] = ()  # SOW/View
    conflated_topics: tuple[ConflatedTopic, ...] = ()  # SOW/ConflatedTopic
    actions: tuple[Action, ...] = ()  # Actions/Action (built-in modules only)
    #: Transports/Transport of Type amps-replication(-secure): at most one, not a client transport
    replication_listener: ReplicationListener | None = None
    replication: Replication = msgspec.field(default_factory=Replication)  # Replication, Tuning/Replication
    message_types: tuple[str, ...] = ()  # every message type name usable in this config
    #: MessageTypes/MessageType, in file order (what the server builds its codecs from)
    message_type_decls: tuple[MessageTypeDecl, ...] = ()
    sow_directory: str | None = None  # [emulator] SOWDirectory: where the emulator keeps SOW data
    #: SOWStatsInterval (seconds): how often /AMPS/SOWStats is published (None: never)
    sow_stats_interval: float | None = None
    #: Statistics/Indexing/Enabled: index static_id of the statistics database's DYNAMIC tables
    statistics_indexing: bool = False
    #: MiniDumpDirectory (None: ``/tmp``; ``disabled``: none) and MiniDumpFileMask (None: 0640)
    minidump_directory: str | None = None
    minidump_file_mask: int | None = None
    #: the Authentication/Entitlement blocks, resolved per transport and for Admin by the auth
    #: layer; None when the configuration has none (nothing is checked)
    security: SecurityConfig | None = None
    #: the auxiliary modules of Modules the emulator implements (function libraries, lookups)
    modules: AuxModules = msgspec.field(default_factory=AuxModules)
    source: str = ""  # the configuration file ("<default>" for default_config())
    #: one per ignored-but-real AMPS element; also a queue whose underlying topic is not in the
    #: TransactionLog, and a configuration without any usable transport
    warnings: tuple[ConfigIssue, ...] = ()

    @property
    def group_name(self) -> str:
        """The instance's replication Group (AMPS: ``Name`` when no ``Group`` is given)."""
        return self.group or self.name

    def transport(self, name: str) -> Transport | None:
        return next((t for t in self.transports if t.name == name), None)

    def sow_topic(self, name: str, message_type: str | None = None) -> SowTopic | None:
        return next(
            (t for t in self.sow_topics
             if t.name == name and (message_type is None or t.message_type == message_type)),
            None,
        )

    def pattern_topic(self, topic: str) -> SowTopic | None:
        """The SOW ``Topic`` with a ``Pattern`` that holds ``topic`` as a logical topic, unless a
        definition of that exact name takes precedence (a conflated topic of a logical topic,
        :meth:`conflated_logical`, included)."""
        if self._defined(topic) or self.conflated_logical(topic) is not None:
            return None
        return next((t for t in self.sow_topics if t.holds(topic)), None)

    def _defined(self, topic: str) -> bool:
        others = [*(q.name for q in self.queues), *(v.name for v in self.views),
                  *(c.name for c in self.conflated_topics)]
        return any(t.name == topic and t.pattern is None for t in self.sow_topics) or topic in others

    def conflated_logical(self, topic: str, nested: bool = True
                          ) -> tuple[ConflatedTopic, str] | None:
        """``(the ConflatedTopic, the logical topic it conflates)`` when ``topic`` is the
        conflated topic of a logical topic of a ``Pattern`` container (its ``TopicFormat``
        gives ``topic`` from that logical topic's name, which the container holds and which
        is not itself such a conflated topic); else None."""
        for c in self.conflated_topics:
            if not c.over_pattern:
                continue
            under = c.underlying_of(topic)
            if under is None or self._defined(under):
                continue
            if nested and self.conflated_logical(under, nested=False) is not None:
                continue
            if any(t.name == c.underlying_topic and t.message_type == c.message_type
                   and t.holds(under) for t in self.sow_topics):
                return c, under
        return None

    def queue(self, name: str, message_type: str | None = None) -> Queue | None:
        return next(
            (q for q in self.queues
             if q.name == name and (message_type is None or q.message_type == message_type)),
            None,
        )
