"""The replication configuration: the ``amps-replication`` transport, ``Replication/Destination``,
``Tuning/Replication`` and instance ``Group``, parsed into typed structs with located errors.

The shapes mirror 60East's public HA configurations (an HA pair with sync + PassThrough and a
replicated queue; a three-region async mesh whose destinations are addressed by Group and a
bare port, with a stray ``Protocol`` on the replication transport; an HA demo with one sync
destination to a host name)."""

from __future__ import annotations

import pytest

from amps_emulator.config import ConfigError, loads_config
from amps_emulator.config.errors import ConfigIssue

PAIR = """<AMPSConfig>
  <Name>AMPS-1</Name>
  <Group>ReplicationExample</Group>
  <Transports>
    <Transport><Name>any-tcp</Name><Type>tcp</Type><InetAddr>0</InetAddr><Protocol>amps</Protocol></Transport>
    <Transport><Name>amps-replication</Name><Type>amps-replication</Type><InetAddr>localhost:0</InetAddr></Transport>
  </Transports>
  <Replication>
    <Destination>
      <Topic><MessageType>json</MessageType><Name>work</Name></Topic>
      <Topic><MessageType>json</MessageType><Name>work-to-do</Name></Topic>
      <Name>AMPS-2</Name>
      <PassThrough>.*</PassThrough>
      <Group>ReplicationExample</Group>
      <SyncType>sync</SyncType>
      <Transport><InetAddr>localhost:10005</InetAddr><InetAddr>backup:10006</InetAddr>
        <Type>amps-replication</Type><ReconnectTimeout>2s,5s</ReconnectTimeout></Transport>
      <AckConflationInterval>10ms</AckConflationInterval>
    </Destination>
  </Replication>
  <TransactionLog><JournalDirectory>./j</JournalDirectory>
    <Topic><Name>work</Name><MessageType>json</MessageType></Topic>
    <Topic><Name>work-to-do</Name><MessageType>json</MessageType></Topic>
  </TransactionLog>
  <SOW><Queue><Name>work-to-do</Name><MessageType>json</MessageType><UnderlyingTopic>work</UnderlyingTopic></Queue></SOW>
  <Tuning><Replication><MinSyncDestinations>1</MinSyncDestinations></Replication></Tuning>
</AMPSConfig>
"""

MESH_NODE = """<AMPSConfig>
  <Name>NYC-1</Name>
  <Group>US</Group>
  <Transports>
    <Transport><Name>any-tcp</Name><Type>tcp</Type><InetAddr>0</InetAddr><Protocol>amps</Protocol></Transport>
    <Transport><Name>amps-replication</Name><Type>amps-replication</Type><InetAddr>9009</InetAddr>
      <Protocol>amps</Protocol></Transport>
  </Transports>
  <TransactionLog><JournalDirectory>j</JournalDirectory><Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
  <Replication>
    <Destination><Group>UK</Group><Topic><Name>.*</Name><MessageType>json</MessageType></Topic>
      <SyncType>async</SyncType><Transport><Type>amps-replication</Type><InetAddr>9109</InetAddr></Transport></Destination>
    <Destination><Group>SG</Group><Topic><Name>.*</Name><MessageType>json</MessageType></Topic>
      <SyncType>async</SyncType><Transport><Type>amps-replication</Type><InetAddr>9209</InetAddr></Transport></Destination>
  </Replication>
</AMPSConfig>
"""


def errors(text: str) -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as info:
        loads_config(text, "r.xml")
    return info.value.errors


def test_ha_pair_parses_into_typed_structs() -> None:
    cfg = loads_config(PAIR, "pair.xml")
    assert cfg.group_name == "ReplicationExample"
    lst = cfg.replication_listener
    assert lst is not None and (lst.name, lst.type, lst.host, lst.port) == \
        ("amps-replication", "amps-replication", "localhost", 0)
    assert lst.line == 6 and not lst.tls
    assert [t.name for t in cfg.transports] == ["any-tcp"]  # clients cannot use the replication port
    (d,) = cfg.replication.destinations
    assert (d.name, d.group, d.sync_type, d.sync, d.pass_through, d.line) == \
        ("AMPS-2", "ReplicationExample", "sync", True, ".*", 9)
    (t,) = d.transports
    assert [(a.host, a.port) for a in t.addresses] == [("localhost", 10005), ("backup", 10006)]
    assert not t.passive and t.reconnect_timeout(0) == 2.0 and t.reconnect_timeout(1) == 5.0
    assert d.ack_conflation_interval == pytest.approx(0.01)
    assert [x.name for x in d.topics] == ["work", "work-to-do"]
    assert d.selects("work", "json") is d.topics[0] and d.selects("other", "json") is None
    assert d.selects("work", "xml") is None
    assert cfg.replication.min_sync_destinations == 1
    assert d.passes(None) and d.passes("AnyGroup")


def test_mesh_node_group_only_destinations_bare_ports_and_stray_protocol() -> None:
    cfg = loads_config(MESH_NODE, "us.xml")
    assert cfg.replication_listener is not None and cfg.replication_listener.port == 9009
    dests = cfg.replication.destinations
    assert [(d.name, d.group, d.sync_type) for d in dests] == [("UK", "UK", "async"), ("SG", "SG", "async")]
    assert [(a.host, a.port) for a in dests[0].transports[0].addresses] == [("localhost", 9109)]
    # no PassThrough: only messages published here directly go on
    assert dests[0].passes(None) and not dests[0].passes("SG")
    assert [w for w in cfg.warnings if "Replication" in w.reason or "replication" in w.reason] == []


def test_topic_defaults_validation_and_literal_before_regex() -> None:
    text = MESH_NODE.replace(
        "<Destination><Group>UK</Group><Topic><Name>.*</Name><MessageType>json</MessageType></Topic>",
        "<Destination><Group>UK</Group><Topic><MessageType>json</MessageType><Filter>/a = 1</Filter></Topic>"
        "<Topic><Name>orders</Name><MessageType>json</MessageType>"
        "<ExcludeValidation>sow,keys</ExcludeValidation></Topic><ResyncPassThrough>^EU$</ResyncPassThrough>")
    d = loads_config(text).replication.destinations[0]
    regex, literal = d.topics
    assert regex.name == ".*" and regex.filter == "/a = 1"
    assert d.selects("orders", "json") is literal
    assert "sow" not in literal.validations
    assert "queue" in literal.validations and "txlog" in literal.validations
    assert d.passes("EU", resync=True) and not d.passes("EU")


def test_secure_listener_needs_its_certificate() -> None:
    text = MESH_NODE.replace("<Type>amps-replication</Type><InetAddr>9009</InetAddr>",
                             "<Type>amps-replication-secure</Type><InetAddr>9009</InetAddr>")
    (e,) = errors(text)
    assert e.line == 6 and "requires <Certificate> and <PrivateKey>" in e.reason


@pytest.mark.parametrize(("change", "line", "reason"), [
    # a second replication transport
    (("</Transports>", "<Transport><Name>r2</Name><Type>amps-replication</Type><InetAddr>9010</InetAddr>"
      "</Transport></Transports>"), 8, "only one replication transport is allowed"),
    # neither Name nor Group
    (("<Destination><Group>UK</Group>", "<Destination>"), 11, "needs a <Group> (or a <Name>)"),
    (("<SyncType>async</SyncType><Transport><Type>amps-replication</Type><InetAddr>9109",
      "<SyncType>sometimes</SyncType><Transport><Type>amps-replication</Type><InetAddr>9109"), 12,
     "invalid <SyncType>"),
    (("<InetAddr>9109</InetAddr>", "<InetAddr>host:99999</InetAddr>"), 12, "out of range"),
    (("<InetAddr>9109</InetAddr>", "<InetAddr>9109</InetAddr><ReconnectTimeout>1s,2s</ReconnectTimeout>"),
     12, "give one, or one per address"),
    (("<Topic><Name>.*</Name><MessageType>json</MessageType></Topic>\n      <SyncType>async</SyncType>"
      "<Transport><Type>amps-replication</Type><InetAddr>9109",
      "<Topic><Name>.*</Name><MessageType>json</MessageType><ExcludeValidation>queue</ExcludeValidation>"
      "</Topic>\n      <SyncType>async</SyncType><Transport><Type>amps-replication</Type><InetAddr>9109"),
     11, "cannot exclude queue"),
    (("<Topic><Name>.*</Name><MessageType>json</MessageType></Topic>\n      <SyncType>async</SyncType>"
      "<Transport><Type>amps-replication</Type><InetAddr>9109",
      "<Topic><Name>(</Name><MessageType>json</MessageType></Topic>\n      <SyncType>async</SyncType>"
      "<Transport><Type>amps-replication</Type><InetAddr>9109"), 11, "invalid regular expression"),
    (("</Replication>", "</Replication><Tuning><Replication><MinSyncDestinations>AMPS_A"
      "</MinSyncDestinations></Replication></Tuning>"), 15, "invalid <MinSyncDestinations>"),
    (("<Destination><Group>SG</Group>", "<Destination><Group>UK</Group>"), 13,
     "duplicate <Destination> 'UK'"),
])
def test_errors_are_located(change: tuple[str, str], line: int, reason: str) -> None:
    old, new = change
    assert old in MESH_NODE
    errs = errors(MESH_NODE.replace(old, new, 1))
    assert [(e.file, e.line) for e in errs][:1] == [("r.xml", line)] and reason in errs[0].reason, errs


def test_passive_destination_needs_the_replication_transport() -> None:
    text = PAIR.replace("<InetAddr>localhost:10005</InetAddr><InetAddr>backup:10006</InetAddr>", "") \
        .replace("<ReconnectTimeout>2s,5s</ReconnectTimeout>", "")
    cfg = loads_config(text)
    assert cfg.replication.destinations[0].passive
    no_listener = text.replace(
        "<Transport><Name>amps-replication</Name><Type>amps-replication</Type>"
        "<InetAddr>localhost:0</InetAddr></Transport>", "")
    (e,) = errors(no_listener)
    assert e.line == 9 and "passive" in e.reason


def test_replication_needs_a_transaction_log_and_cannot_carry_a_local_queue() -> None:
    no_txlog = MESH_NODE.replace(
        "<TransactionLog><JournalDirectory>j</JournalDirectory><Topic><Name>.*</Name>"
        "<MessageType>json</MessageType></Topic></TransactionLog>", "")
    (e,) = errors(no_txlog)
    assert e.line == 10 and "needs a <TransactionLog>" in e.reason
    local = PAIR.replace("<SOW><Queue>", "<SOW><LocalQueue>").replace("</Queue></SOW>", "</LocalQueue></SOW>")
    (e,) = errors(local)
    assert e.line == 11 and "LocalQueue" in e.reason


def test_listener_port_clash_with_a_client_transport() -> None:
    text = MESH_NODE.replace("<InetAddr>0</InetAddr><Protocol>amps</Protocol></Transport>",
                             "<InetAddr>9009</InetAddr><Protocol>amps</Protocol></Transport>")
    (e,) = errors(text)
    assert e.line == 6 and "conflicts with transport 'any-tcp'" in e.reason


def test_other_tuning_children_warn_once_each() -> None:
    cfg = loads_config(PAIR.replace("<Tuning>", "<Tuning><NUMA><Enabled>disabled</Enabled></NUMA>"))
    assert [w.reason for w in cfg.warnings if "NUMA" in w.reason] == \
        ["<NUMA> in <Tuning> is not supported by the emulator and is ignored"]
    assert cfg.replication.min_sync_destinations == 1


BOOTSTRAP = """<Bootstrap>
    <Topic><Name>important-topic</Name><MessageType>json</MessageType></Topic>
    <Topic><Name>^audit-topic</Name><MessageType>json</MessageType></Topic>
    <DataType>sow,txlog</DataType>
    <Transport><InetAddr>source.example.com:4100</InetAddr><InetAddr>backup.example.com:4100</InetAddr>
      <Type>amps-replication</Type></Transport>
  </Bootstrap>
</AMPSConfig>"""


def test_bootstrap_reads_topics_data_types_and_the_source_addresses() -> None:
    cfg = loads_config(MESH_NODE.replace("</AMPSConfig>", BOOTSTRAP), "boot.xml")
    boot = cfg.replication.bootstrap
    assert boot is not None
    assert boot.data_types == ("sow", "txlog")
    assert [a.inet_addr for a in boot.transports[0].addresses] == ["source.example.com:4100",
                                                                   "backup.example.com:4100"]
    assert boot.selects("important-topic", "json") and boot.selects("audit-topic-7", "json")
    assert not boot.selects("other", "json") and not boot.selects("important-topic", "xml")


@pytest.mark.parametrize(("change", "reason"), [
    (("<DataType>sow,txlog</DataType>", "<DataType>sow,views</DataType>"), "unknown DataType 'views'"),
    (("<InetAddr>source.example.com:4100</InetAddr><InetAddr>backup.example.com:4100</InetAddr>", ""),
     "needs an <InetAddr>"),
    (("<Type>amps-replication</Type><InetAddr>9009</InetAddr>", "<Type>tcp</Type><InetAddr>9009</InetAddr>"),
     "needs an amps-replication transport"),
])
def test_bootstrap_errors(change: tuple[str, str], reason: str) -> None:
    text = MESH_NODE.replace("</AMPSConfig>", BOOTSTRAP).replace(*change)
    assert any(reason in e.reason for e in errors(text)), errors(text)


def test_compression_and_a_secure_transport_are_read_without_warnings() -> None:
    """Compression (zlib by default, or zstd) and a -secure Destination Transport are served:
    no warning."""
    text = MESH_NODE.replace(
        "<SyncType>async</SyncType><Transport><Type>amps-replication</Type><InetAddr>9109",
        "<SyncType>async</SyncType><Compression>enabled</Compression>"
        "<Transport><Type>amps-replication-secure</Type><InetAddr>9109")
    text = text.replace("<SyncType>async</SyncType><Transport><Type>amps-replication</Type><InetAddr>9209",
                        "<SyncType>async</SyncType><Compression>enabled</Compression>"
                        "<CompressionType>zstd</CompressionType>"
                        "<Transport><Type>amps-replication</Type><InetAddr>9209")
    cfg = loads_config(text, "us.xml")
    assert cfg.warnings == ()
    assert [(d.compression, d.compression_type) for d in cfg.replication.destinations] == [
        (True, "zlib"), (True, "zstd")]
    assert [(d.compression, d.compression_type) for d in loads_config(MESH_NODE).replication.destinations] == [
        (False, "zlib"), (False, "zlib")]
    (e,) = errors(text.replace("<CompressionType>zstd</CompressionType>", "<CompressionType>lz4</CompressionType>"))
    assert e.line == 14 and "lz4" in e.reason, e


UK_TRANSPORT = "<Transport><Type>amps-replication</Type><InetAddr>9109</InetAddr></Transport>"


def test_a_destinations_authenticator_and_the_instances() -> None:
    """The Transport's Authenticator gives its link's credentials, else the instance's, else the
    default module's (the process's user, no password); nothing of it is warned as ignored."""
    auth = ("<Authenticator><Module>amps-default-authenticator-module</Module><Options><User>repl</User>"
            "<Password>pw</Password></Options></Authenticator>")
    text = MESH_NODE.replace(UK_TRANSPORT, UK_TRANSPORT.replace("</Transport>", auth + "</Transport>"))
    text = text.replace("<Group>US</Group>", "<Group>US</Group><Authenticator><Module>"
                        "amps-default-authenticator-module</Module><Options><User>inst</User></Options>"
                        "</Authenticator>")
    cfg = loads_config(text, "us.xml")
    uk, sg = cfg.replication.destinations
    assert cfg.replication.authenticator_for(uk.transports[0]).credentials() == ("repl", "pw")
    assert cfg.replication.authenticator_for(sg.transports[0]).credentials() == ("inst", None)
    assert not [w for w in cfg.warnings if "Authenticator" in w.reason]
    plain = loads_config(MESH_NODE, "us.xml").replication
    assert plain.authenticator_for(plain.destinations[0].transports[0]).password is None


@pytest.mark.parametrize(("auth", "reason"), [
    ("<Module>libamps_exec_authenticator</Module>", "is not implemented by the emulator"),
    ("<Module>amps-default-authenticator-module</Module><Options><Token>x</Token></Options>",
     "unknown element <Token>"),
])
def test_authenticator_errors(auth: str, reason: str) -> None:
    errs = errors(with_authenticator(auth))
    assert any(reason in e.reason for e in errs), errs


def with_authenticator(auth: str) -> str:
    return MESH_NODE.replace(UK_TRANSPORT, UK_TRANSPORT.replace(
        "</Transport>", f"<Authenticator>{auth}</Authenticator></Transport>"))


@pytest.mark.parametrize(("options", "reason"), [
    ("<PasswordFileName>/nonexistent/pw</PasswordFileName>", "PasswordFileName /nonexistent/pw"),
    ("<PasswordEnvironmentVariable>NO_SUCH_VARIABLE_HERE</PasswordEnvironmentVariable>", "is not set"),
])
def test_a_password_source_not_there_yet_is_a_warning(options: str, reason: str) -> None:
    cfg = loads_config(with_authenticator(
        f"<Module>amps-default-authenticator-module</Module><Options>{options}</Options>"), "us.xml")
    assert [w.line for w in cfg.warnings if reason in w.reason] == [12]


def test_the_secure_listener_takes_verify_client_and_the_plain_one_does_not(tmp_path) -> None:
    pytest.importorskip("cryptography")
    from tests.support.tls import self_signed

    cert, key = self_signed(tmp_path)
    listener = "<Type>amps-replication</Type><InetAddr>9009</InetAddr>"
    secure = (f"<Type>amps-replication-secure</Type><Certificate>{cert}</Certificate><PrivateKey>{key}"
              f"</PrivateKey><VerifyClient>true</VerifyClient><CAFile>{cert}</CAFile><InetAddr>9009</InetAddr>")
    got = loads_config(MESH_NODE.replace(listener, secure), "us.xml").replication_listener
    assert got is not None and got.verify_client and got.ca_file == str(cert)
    errs = errors(MESH_NODE.replace(listener, listener + "<VerifyClient>true</VerifyClient>"))
    assert any("need Type amps-replication-secure" in e.reason for e in errs), errs
    client = (f"<Type>amps-replication-secure</Type><Certificate>{cert}</Certificate>"
              f"<PrivateKey>{key}</PrivateKey><InetAddr>9109</InetAddr>")
    dest = loads_config(MESH_NODE.replace("<Type>amps-replication</Type><InetAddr>9109</InetAddr>", client),
                        "us.xml").replication.destinations[0].transports[0]
    assert dest.certificate == str(cert) and dest.client_context() is not None


def test_the_replication_transport_takes_max_connections() -> None:
    listener = "<InetAddr>9009</InetAddr>"
    default = loads_config(MESH_NODE, "us.xml").replication_listener
    assert default is not None and default.max_connections == 64
    got = loads_config(MESH_NODE.replace(listener, listener + "<MaxConnections>5</MaxConnections>"), "us.xml")
    assert got.replication_listener is not None and got.replication_listener.max_connections == 5
    assert not [w for w in got.warnings if "MaxConnections" in w.reason]
    (err,) = errors(MESH_NODE.replace(listener, listener + "<MaxConnections>0</MaxConnections>"))
    assert err.line == 6 and "MaxConnections must be greater than zero" in err.reason, err
