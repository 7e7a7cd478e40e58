"""No element of the AMPS Configuration Reference is an error.

``REFERENCE`` lists, per parent element, the elements the AMPS 5.3 Configuration Reference
documents there (collected from the reference's pages: instance level, Protocols,
Transports, Admin/monitoring, Logging, SOW topics, queues, views, conflated topics,
transaction log). The fixture ``ok-every-reference-element.xml`` must hold every one of
them in its place; loading it gives no error, and each element the emulator does not
implement is exactly one warning. (The start-up test runs the same file through
``--verify-config`` and a real start-up.)
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from amps_emulator.config import load_config
from tests.support.paths import FIXTURES

FIXTURE = FIXTURES / "configs" / "ok-every-reference-element.xml"

REFERENCE: dict[str, tuple[str, ...]] = {
    ".": ("Name", "Group", "Description", "ProcessName", "Environment", "SuggestedMinimumVersion",
          "RequiredMinimumVersion", "ConfigIncludeCommentDefault", "ConfigCycleDetectionThreshold",
          "ConfigValidation", "SOWStatisticsInterval", "RegexTopicSupport", "MiniDumpDirectory",
          "MiniDumpFileMask", "MessageMemoryLimit", "MessageDiskLimit", "MessageDiskPath",
          "ClientMessageAgeLimit", "ClientMaxCapacity", "Tuning", "Externals",
          "UserDefinedFunctions", "Modules", "Authentication", "Entitlement", "MessageTypes",
          "Protocols", "Transports", "Admin", "Logging", "SOW", "TransactionLog", "Replication",
          "Actions"),
    "Protocols/Protocol": ("Name", "Module", "WWWAuthenticate", "TrustedAdmin", "HTTPHeader"),
    "Transports/Transport": ("Name", "Type", "InetAddr", "ReuseAddr", "MessageType", "Protocol",
                             "InitialState", "Authentication", "Entitlement", "TransportFilter",
                             "MessageMemoryLimit", "MessageDiskLimit", "MessageDiskPath",
                             "ClientMessageAgeLimit", "ClientMaxCapacity", "Certificate", "PrivateKey",
                             "Ciphers", "SecureSocketProtocols", "VerifyClient", "CAFile", "CAPath",
                             "FileName", "FileMask", "PerMessageDeflate", "HTTPHeader"),
    "Admin": ("InetAddr", "FileName", "Interval", "WWWAuthenticate", "Authentication", "Entitlement",
              "AnonymousPaths", "Header", "ExternalInetAddr", "AccessControlAllowOrigin",
              "SessionOptions", "SQLTransport", "SQLTransportInetAddr", "Certificate", "PrivateKey",
              "Ciphers"),
    "Logging/Target": ("Protocol", "Level", "Levels", "IncludeErrors", "ExcludeErrors", "FileName",
                       "RotationThreshold", "Ident", "Options", "Facility"),
    "SOW": ("Topic", "RegexTopic", "Queue", "LocalQueue", "GroupLocalQueue", "View", "ConflatedTopic"),
    "SOW/Topic": ("Name", "MessageType", "FileName", "Durability", "RecoveryPoint", "Expiration", "Key",
                  "KeyDomain", "KeyGenerator", "SlabSize", "InitialSlabCount", "HashIndex", "Index",
                  "ExpectedKeyCountHint", "Preprocessing", "Enrichment", "Pattern", "History"),
    "SOW/Queue": ("Name", "MessageType", "UnderlyingTopic", "DefaultPublishTarget", "LeasePeriod",
                  "Semantics", "MaxBacklog", "MaxPerSubscriptionBacklog", "Expiration",
                  "ExpirationModel", "Filter", "RecoveryPoint", "FairnessModel", "Leasing",
                  "MaxDeliveries", "MaxCancels", "Priority", "FileBackedMetadata",
                  "DeferredAckExpiration"),
    "SOW/LocalQueue": ("BarrierExpression", "TargetQueueDepth"),
    "SOW/GroupLocalQueue": ("InitialOwner", "GroupLocalQueueDomain"),
    "SOW/View": ("Name", "MessageType", "UnderlyingTopic", "Projection", "Grouping", "KeyDomain",
                 "Conflation", "Filter", "HashIndex", "JoinNullEquivalency", "FileName"),
    "SOW/ConflatedTopic": ("Name", "UnderlyingTopic", "MessageType", "Interval", "Filter", "HashIndex",
                           "Enrichment", "TopicFormat"),
    "TransactionLog": ("JournalDirectory", "JournalArchiveDirectory", "PreallocatedJournalFiles",
                       "JournalSize", "Topic", "FlushInterval", "O_DIRECT", "InactiveClientAckExpiration",
                       "CompressedJournalCacheMemoryLimit"),
    "Actions/Action": ("On", "If", "Do"),
    "Tuning/Replication": ("MinSyncDestinations",),
    "Replication/Destination": ("Name", "Group", "SyncType", "Transport", "Topic", "PassThrough",
                                "ResyncPassThrough", "Compression", "CompressionType", "AckConflationInterval"),
    "Replication/Destination/Transport": ("InetAddr", "Type", "Authenticator"),
    "Replication/Destination/Topic": ("Name", "MessageType", "Filter", "IncludeValidation", "ExcludeValidation"),
}


def test_fixture_holds_every_reference_element_in_its_place():
    root = ET.parse(FIXTURE).getroot()
    missing = []
    for parent, names in REFERENCE.items():
        present = {c.tag for p in root.findall(parent) for c in p}
        missing += [f"{parent}/{n}" for n in names if n not in present]
    assert missing == []


def test_no_reference_element_is_an_error_and_each_unimplemented_one_warns_once(tmp_path, monkeypatch):
    from tests.support.tls import self_signed

    monkeypatch.chdir(tmp_path)
    self_signed(tmp_path)  # the TLS transport's ./cert.pem and ./key.pem are read, so they must exist
    cfg = load_config(FIXTURE)  # raises ConfigError on any error
    warned = [re.match(r"<(\w+)>", w.reason).group(1) for w in cfg.warnings]
    keys = [(w.line, tag) for w, tag in zip(cfg.warnings, warned)]
    assert len(keys) == len(set(keys))  # one warning per element
    # what the emulator implements is read, not warned about
    for implemented in ("ReuseAddr", "Pattern", "RegexTopic", "Logging", "Protocols", "History",
                        "DefaultPublishTarget", "BarrierExpression", "TopicFormat", "Target", "Authentication", "Entitlement",
                        "Preprocessing", "Enrichment", "KeyGenerator"):
        assert implemented not in warned
    t, tls, ws = cfg.transports  # the unix and replication transports are warned and dropped
    assert (t.protocol, t.protocol_name, t.reuse_addr) == ("amps", "amps-custom", True)
    assert (tls.name, tls.tls, tls.ciphers) == ("tls", True, "HIGH")
    assert (ws.protocol, ws.protocol_name) == ("websocket", "ws-custom")
    assert [p.name for p in cfg.protocols] == ["ws-custom", "amps-custom"]
    assert [x.protocol for x in cfg.logging] == ["file", "syslog"]
    assert {t.name: t.pattern for t in cfg.sow_topics if t.pattern} == {"Books": "^/books/", "^tick\\.": "^tick\\."}
    assert cfg.admin is not None and cfg.admin.interval == 10.0
    chained = next(t for t in cfg.sow_topics if t.name == "generated").key_generator
    assert chained is not None and (chained.primary, chained.secondary) == ("/a", ("/parent",))
