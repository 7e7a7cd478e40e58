"""AMPS configuration files (``AMPSConfig`` XML) read into frozen, typed structures.

Public API::

    from amps_emulator.config import (load_config, loads_config, default_config, sample_config,
                                      ConfigError, Config)
    cfg = load_config("/path/amps.xml")          # raises ConfigError listing every error
    cfg = loads_config(text, filename="<string>")
    cfg = default_config(data_dir="./amps-data")
    text = sample_config()
    cfg.warnings                                 # ConfigIssue(file, line, reason) per ignored element

``ConfigError.errors`` is the list of every :class:`ConfigIssue` found; ``str(error)`` prints
one ``file:line: reason`` per line (``file: reason`` for a problem with the file as a whole,
such as a file that cannot be read). See :mod:`config.model` for the structures and units
(durations in seconds as ``float``, sizes in bytes as ``int``). :mod:`config.cli` has the
``--sample-config`` / ``--verify-config FILE`` helpers.

Modules: ``xmlload`` (safe, located XML; ``${ENV}``; ``Include``), ``units`` and ``values``
(value parsers), ``schema`` (declarative section reading), ``instance_sections``,
``sow_sections``, ``actions_section`` (one reader per area), ``loader`` (orchestration),
``model``, ``defaults``, ``sample`` (+ ``sample.xml``), ``cli``.

What is read
============

Real AMPS elements parsed into the structures:

* ``Name``, ``Group``, ``Description``, ``ClientMessageAgeLimit`` (instance default);
* ``Name`` with spaces is accepted with a warning (AMPS recommends against it and starts);
* ``Protocols/Protocol``: ``Name Module`` (the protocol it is built on; its options are warned);
* ``Transports/Transport``: ``Name Type InetAddr ReuseAddr MessageType Protocol InitialState
  ClientMessageAgeLimit Certificate PrivateKey Ciphers`` (``Type`` tcp or tcps; ``Protocol``
  amps or websocket, or a ``<Protocols>`` entry, which resolves to its ``Module``
  (``Transport.protocol``; the name as written is ``protocol_name``); TLS on tcps, or on tcp
  with a certificate and key, as AMPS does);
* the replication transport (``Type`` amps-replication / amps-replication-secure, at most one,
  not usable by clients: ``Config.replication_listener``), ``Replication/Destination`` (``Name
  Group SyncType Transport/(Type InetAddr* ReconnectTimeout) Topic/(Name MessageType Filter
  IncludeValidation ExcludeValidation) PassThrough ResyncPassThrough Compression CompressionType
  AckConflationInterval``) and ``Tuning/Replication/MinSyncDestinations`` (``Config.replication``);
  see ``replication_sections``. The server connects the links (``replication.service``); what
  they do not do yet is said in one warning;
* ``Admin``: ``InetAddr FileName Interval SQLTransport ExternalInetAddr`` (without ``InetAddr``
  there is no admin server);
* ``Logging/Target``: ``Protocol Level Levels IncludeErrors ExcludeErrors FileName
  RotationThreshold Ident Options Facility``;
* ``TransactionLog``: ``JournalDirectory JournalArchiveDirectory JournalSize`` (synonym
  ``MinJournalSize``) ``PreallocatedJournalFiles FlushInterval InactiveClientAckExpiration``
  and ``Topic`` (``Name`` regex + ``MessageType``);
* ``SOW`` (synonym ``TopicMetaData``) with ``Topic`` (``TopicDefinition``): ``Name``/``Topic
  MessageType FileName Durability``/``Duration Key KeyDomain Expiration HashIndex/Key Index
  RecoveryPoint History/Window History/Granularity Pattern``; ``RegexTopic`` (a Topic whose
  Name is its Pattern); a topic name defined for several message types is served from its
  ``json`` definition (the others are warned about and left out); ``Queue``
  (``QueueDefinition``), ``LocalQueue``, ``GroupLocalQueue``: ``Name
  MessageType UnderlyingTopic DefaultPublishTarget Semantics LeasePeriod MaxBacklog
  MaxPerSubscriptionBacklog Expiration ExpirationModel FairnessModel Leasing MaxCancels
  MaxDeliveries TargetQueueDepth Priority BarrierExpression Filter RecoveryPoint
  FileBackedMetadata DeferredAckExpiration InitialOwner GroupLocalQueueDomain``; ``View``
  (``ViewDefinition``): ``Name MessageType UnderlyingTopic``(or ``Join``s) ``Projection/Field
  Grouping/Field Filter KeyDomain Conflation HashIndex JoinNullEquivalency FileName``;
  ``ConflatedTopic`` (``ReplicaDefinition``): ``Name MessageType UnderlyingTopic Interval
  Filter HashIndex TopicFormat``;
* ``Actions/Action`` with ``On``, ``If``, ``Do`` (``Module`` + ``Options``);
* ``MessageTypes/MessageType/Name`` only to accept the declared names as message types;
* ``Include`` anywhere, and ``${NAME}`` in any text.

Emulator extensions (not AMPS elements; all optional, so real configs load unchanged):

``MaxFrameSize`` (in ``Transport``, or top level as the default for every transport)
    Largest frame a client may send, in bytes. Default 64 MiB. AMPS has no such element.
``ClientOutboundLimit`` (in ``Transport``, or top level)
    Bytes queued for one connection before it is disconnected as a slow consumer. Default
    128 MiB. AMPS has no per-connection byte limit: it offlines slow clients to disk under
    ``MessageMemoryLimit``/``MessageDiskLimit``/``MessageDiskPath``/``ClientMaxCapacity``, which
    the emulator warns about and ignores. (The real ``ClientMessageAgeLimit`` *is* parsed.)
``TransactionLog/Durability``
    What a ``persisted`` ack promises. ``group`` (default): write, then fsync once per
    event-loop turn, before the persisted acks of that turn are released. ``strict``: fsync
    after every publish. ``memory``: never fsync; persisted acks promise nothing across a
    crash. (AMPS always syncs; its ``FlushInterval`` is parsed too.)
``TransactionLog/RetentionSize`` and ``TransactionLog/RetentionAge``
    Delete the oldest journal files once the journal holds more bytes / files older than
    this. Default unset: keep everything. (AMPS does this with the
    ``amps-action-do-remove-journal`` action, which is parsed as well.)
``SOWDirectory`` (top level)
    Directory for emulator SOW storage. A persistent SOW ``Topic`` without ``FileName`` (an
    error in AMPS) then uses ``<SOWDirectory>/%n.sow``. ``default_config()`` sets it to
    ``<data_dir>/sow``.

Recovery choices are command-line flags, not config elements (they are an operator's call at
one start, not a property of the instance): ``--keep-readable-journal`` starts past damage
in the middle of the transaction log, keeping every readable record; ``--strict-recovery``
refuses to start when stored data is missing (the oldest journal segment that retention did
not remove, or the SOW file of a topic the transaction log cannot rebuild) instead of
logging it at ERROR and starting without it. ``Server(config, keep_readable_journal=...,
strict_recovery=...)`` takes the same two.

Real AMPS elements that the emulator does not implement are *warned and ignored*, one
warning per element (children are not inspected): at top level ``Modules`` (unless it
declares only the authentication/entitlement libraries the auth layer implements),
``Externals MessageTypes UserDefinedFunctions ProcessName Environment MiniDumpDirectory
MiniDumpFileMask SuggestedMinimumVersion RequiredMinimumVersion ConfigIncludeCommentDefault
ConfigCycleDetectionThreshold ConfigValidation SOWStatisticsInterval RegexTopicSupport`` and
the slow-client offlining elements above; in ``Protocol`` its module options; in ``Transport``
``TransportFilter PerMessageDeflate HTTPHeader FileName FileMask SecureSocketProtocols``; whole
transports of type ``amps-unix`` or that use the legacy protocols; in ``Tuning`` every child but
``Replication``; in ``Admin`` ``WWWAuthenticate`` and its header and Galvanometer options (its
``Authentication``/``Entitlement`` blocks are read, as the instance's and each transport's are:
``config.security``); in ``TransactionLog`` ``O_DIRECT
CompressedJournalCacheMemoryLimit``; in SOW ``Topic`` ``KeyGenerator SlabSize InitialSlabCount
ExpectedKeyCountHint Preprocessing Enrichment``;
``ConflatedTopic/Enrichment``; and actions that use a custom (non built-in) module.
A queue whose literal underlying topic is not recorded in the ``TransactionLog`` (which AMPS
rejects) and a configuration with no usable transport also produce a warning; a queue with
no ``TransactionLog`` at all is an error. A queue without ``UnderlyingTopic`` takes its own
name literally, even when it contains regex characters (``orders.queue``).

Any other element inside a known section is an error (element names are case-sensitive), as
is any invalid value; every error names the file, the line and the reason.

Deliberate leniencies versus AMPS: ``JournalSize`` minimum is 64KB (AMPS: 10MB) and
``TargetQueueDepth`` minimum is 1 (AMPS: 1000), so tests can use small values.
``PreallocatedJournalFiles`` is checked (a positive count) but the journal creates each file
when it rolls into it: a zero-filled, preallocated file would cost ``JournalSize`` bytes of
writes per file (per test server, with the 1 GiB default), and on the machine where it was
measured it did not lower the persisted-ack latency (issue 19's closing notes).
"""

from .defaults import default_config
from .errors import ConfigError, ConfigIssue
from .loader import load_config, loads_config
from .model import (
    Action,
    ActionOption,
    ActionStep,
    Admin,
    Config,
    ConflatedTopic,
    LogTarget,
    Queue,
    SowTopic,
    TransactionLog,
    Transport,
    TxLogTopic,
    View,
)
from .sample import sample_config

__all__ = [
    "Action",
    "ActionOption",
    "ActionStep",
    "Admin",
    "Config",
    "ConfigError",
    "ConfigIssue",
    "ConflatedTopic",
    "LogTarget",
    "Queue",
    "SowTopic",
    "Transport",
    "TransactionLog",
    "TxLogTopic",
    "View",
    "default_config",
    "load_config",
    "loads_config",
    "sample_config",
]
