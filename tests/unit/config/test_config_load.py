"""Loading real-world AMPS configurations into the frozen structures."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import msgspec
import pytest

from amps_emulator.config import (
    Config,
    ConfigError,
    default_config,
    load_config,
    loads_config,
    sample_config,
)
from tests.support import paths

FIXTURES = paths.FIXTURES / "config-load"  # configs these tests load (not started)
PRODUCTION = FIXTURES / "production.xml"
PROD_ENV = {"AMPS_INSTANCE": "hub-1", "AMPS_PORT": "9007", "AMPS_DATA": "/var/amps"}
MiB = 1024 * 1024


def xml(body: str) -> str:
    return textwrap.dedent(body).strip() + "\n"


@pytest.fixture(scope="module")
def prod(tmp_path_factory) -> Config:
    from tests.support.tls import self_signed

    cert_dir = tmp_path_factory.mktemp("certs")
    self_signed(cert_dir)  # the tcps transport's files must be loadable
    return load_config(PRODUCTION, env={**PROD_ENV, "AMPS_CERT_DIR": str(cert_dir)})


def line_of(path: Path, needle: str) -> int:
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if needle in line:
            return n
    raise AssertionError(f"{needle!r} not in {path}")


# --- production-style file ---------------------------------------------------------------

def test_instance(prod: Config) -> None:
    assert prod.name == "hub-1"  # ${AMPS_INSTANCE}
    assert prod.group == "nyc-primary"
    assert prod.description == "Order routing hub"
    assert prod.source == str(PRODUCTION)
    assert "json-strict" in prod.message_types  # declared under MessageTypes


def test_transports(prod: Config) -> None:
    assert [t.name for t in prod.transports] == ["json-tcp", "any-tcp", "v6", "secure", "browser"]
    json_tcp, any_tcp, v6, secure, browser = prod.transports
    assert (secure.type, secure.tls, secure.protocol) == ("tcps", True, "amps")
    assert (browser.protocol, browser.tls, browser.port) == ("websocket", False, 9008)
    assert (json_tcp.type, json_tcp.host, json_tcp.port, json_tcp.message_type, json_tcp.protocol) == (
        "tcp", None, 9007, "json", "amps")
    assert json_tcp.client_message_age_limit == 120.0  # instance-level default
    assert json_tcp.client_outbound_limit == 32 * MiB
    assert json_tcp.max_frame_size == 64 * MiB  # emulator default
    assert json_tcp.line == line_of(PRODUCTION, "<Name>json-tcp</Name>") - 1
    assert (any_tcp.host, any_tcp.port, any_tcp.message_type) == ("127.0.0.1", 9017, None)
    assert any_tcp.protocol == "amps"  # "json" is a synonym of the amps protocol
    assert any_tcp.enabled is False
    assert any_tcp.max_frame_size == 1 * MiB
    assert any_tcp.client_outbound_limit == 128 * MiB
    assert (v6.host, v6.port, v6.message_type, v6.client_message_age_limit) == ("::1", 9027, "json-strict", 10.0)
    assert prod.transport("v6") is v6


def test_admin_and_logging(prod: Config) -> None:
    assert prod.admin is not None
    assert (prod.admin.host, prod.admin.port, prod.admin.file_name, prod.admin.interval) == (
        "0.0.0.0", 8085, "./stats.db", 20.0)
    assert prod.admin.sql_transport == "browser"
    file_t, stdout_t, syslog_t = prod.logging
    # the first two come from the included file, with their own file and line
    assert file_t.file.endswith("logging-targets.xml") and file_t.line == 3
    assert file_t.file_name == "/var/amps/logs/%Y%m%d%H%M%S-%n.log"
    assert file_t.rotation_threshold == 2_000_000_000
    assert file_t.exclude_errors == ("00-0001", "12-1.*")
    assert stdout_t.levels == ("trace", "info")  # debug is the obsolete name of info
    assert stdout_t.include_errors == ("00-0015",)
    assert syslog_t.file == str(PRODUCTION)
    assert (syslog_t.protocol, syslog_t.level, syslog_t.ident, syslog_t.facility) == (
        "syslog", "critical", "amps-hub", "LOG_LOCAL3")
    assert syslog_t.options == ("LOG_CONS", "LOG_NDELAY", "LOG_PID")


def test_transaction_log(prod: Config) -> None:
    tl = prod.transaction_log
    assert tl is not None
    assert tl.journal_directory == "/var/amps/journal"
    assert tl.journal_archive_directory == "/mnt/archive/journal"
    assert tl.preallocated_journal_files == 4
    assert tl.journal_size == 2 * 1024 * MiB  # MinJournalSize is a synonym
    assert tl.flush_interval == pytest.approx(500e-6)
    assert tl.inactive_client_ack_expiration == 86400.0
    assert (tl.durability, tl.retention_size, tl.retention_age) == ("strict", 500 * 1024 * MiB, 30 * 86400.0)
    assert tl.topics == (("orders", "json"), ("^ORDERS_.*", "json"), (".*", "json-strict"))
    assert tl.topics[1].name == "^ORDERS_.*" and tl.topics[1].message_type == "json"
    assert tl.records("orders", "json")
    assert tl.records("ORDERS_RISK", "json")
    assert not tl.records("neworders", "json")  # a literal name matches only itself
    assert tl.records("anything", "json-strict")
    assert not tl.records("anything", "json")


def test_topic_matching_rules() -> None:
    from amps_emulator.config.model import topic_matches

    assert topic_matches("orders", "orders")
    assert not topic_matches("orders", "neworders")  # literal names are exact
    assert topic_matches("ORDERS_.*", "X_ORDERS_1")  # regexes are searched, as AMPS does
    assert not topic_matches("^ORDERS_.*", "X_ORDERS_1")
    assert topic_matches("^ORDERS$|^ORDERS_ANALYTICS_DIRECT$", "ORDERS_ANALYTICS_DIRECT")


def test_sow_topics(prod: Config) -> None:
    orders, store, quotes = prod.sow_topics
    assert (orders.name, orders.message_type, orders.durability) == ("orders", "json", "persistent")
    assert orders.keys == ("/orderId", "/customerId")
    assert orders.key_domain == "orders-domain"
    assert orders.file_name == "/var/amps/sow/%n.sow"
    assert orders.resolved_file_name == "/var/amps/sow/orders.json.sow"
    assert (orders.expiration_enabled, orders.expiration) == (True, None)  # Expiration: enabled
    assert orders.hash_indexes == (("/region",), ("/zipCode", "/customerType"))
    assert orders.indexes == ("/status",)
    # a topic name with slashes stays one file name
    assert store.resolved_file_name == "/var/amps/sow/%2FADMIN%2Fbookmark_store.json.sow"
    assert (quotes.durability, quotes.file_name, quotes.expiration_enabled, quotes.expiration) == (
        "transient", None, True, 3600.0)
    assert quotes.recovery_point == "now"
    assert prod.sow_topic("orders", "json") is orders


def test_queues_of_each_kind(prod: Config) -> None:
    q, local, group = prod.queues
    assert (q.kind, local.kind, group.kind) == ("queue", "local", "group_local")
    assert q.underlying_topic == "^ORDERS$|^ORDERS_ANALYTICS_DIRECT$"
    assert q.default_publish_target == "ORDERS_ANALYTICS_DIRECT"
    assert (q.semantics, q.lease_period, q.max_per_subscription_backlog, q.max_backlog) == (
        "at-least-once", 60.0, 10, 10_000)
    assert (q.fairness_model, q.leasing, q.max_cancels, q.max_deliveries) == ("fast", "strict", 3, 10)
    assert (q.expiration, q.expiration_model, q.priority, q.filter) == (
        86400.0, "earliest", "/price * /qty", "/region = 'EMEA'")
    assert (q.recovery_point, q.file_backed_metadata, q.deferred_ack_expiration) == (
        "20240102T123500Z", True, 900.0)
    assert (local.semantics, local.fairness_model) == ("at-most-once", "round-robin")  # AMO default
    assert (local.barrier_expression, local.expiration, local.underlying_topic) == ("/type = 'EOD'", 30.0, "orders")
    assert (local.lease_period, local.max_backlog, local.target_queue_depth) == (None, None, None)
    assert (group.initial_owner, group.group_local_queue_domain, group.target_queue_depth) == (
        "amps-1", "CONSUME_INSTANCES", 5000)
    assert group.fairness_model == "proportional"  # ALO default


def test_views_and_conflated_topics(prod: Config) -> None:
    by_region, joined = prod.views
    assert by_region.underlying_topic == "orders" and by_region.joins == ()
    assert by_region.projection == (
        "COUNT(/orderId) AS /orderCount", "SUM(IF(/qty > 100, /qty, 0)) AS /bigQty", "/region")
    assert by_region.grouping == ("/region",)
    assert by_region.filter == "/status <> 'cancelled'"  # XML entities decoded
    assert (by_region.conflation, by_region.hash_indexes) == ("inline", (("/region",),))
    assert joined.underlying_topic is None
    assert joined.joins == ("[orders]./symbol = [quotes]./symbol",)
    assert joined.join_null_equivalency is True
    (c,) = prod.conflated_topics
    assert (c.name, c.underlying_topic, c.interval, c.filter, c.hash_indexes) == (
        "orders-5s", "orders", 5.0, "/region = 'A'", (("/status",),))


def test_actions(prod: Config) -> None:
    archive, guard = prod.actions
    (on,) = archive.on
    assert on.module == "amps-action-on-schedule"
    assert on.option("Every") == "Saturday at 00:30"
    assert on.option("Name") == "Weekly archive"
    assert [(s.kind, s.module) for s in archive.steps] == [("do", "amps-action-do-archive-journal")]
    assert archive.do[0].option("Age") == "7d"
    assert [s.kind for s in guard.steps] == ["if", "do"]
    assert guard.conditions[0].option("GreaterThan") == "99%"
    assert guard.do[0].module == "amps-action-do-shutdown" and guard.do[0].options == ()


def test_structures_are_frozen_and_encodable(prod: Config) -> None:
    with pytest.raises(AttributeError):
        prod.name = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        prod.transports[0].port = 1  # type: ignore[misc]
    again = msgspec.json.decode(msgspec.json.encode(prod), type=Config)
    assert again == prod


# --- the seed-003 dead-letter example, verbatim ------------------------------------------

# The SOW and Actions sections come verbatim from seed 003 (shared with the integration test).
DEAD_LETTER = (paths.FIXTURES / "seed003_dead_letter.xml").read_text()
JOBS = xml("""
    <AMPSConfig>
        <Name>jobs</Name>
        <TransactionLog>
            <JournalDirectory>./journals</JournalDirectory>
            <Topic>
                <Name>.*</Name>
                <MessageType>json</MessageType>
            </Topic>
        </TransactionLog>
{dead_letter}        <Transports>
            <Transport>
                <Name>json-tcp</Name>
                <Type>tcp</Type>
                <InetAddr>9007</InetAddr>
                <MessageType>json</MessageType>
                <Protocol>amps</Protocol>
            </Transport>
        </Transports>
    </AMPSConfig>
""".replace("{dead_letter}", DEAD_LETTER))


def test_dead_letter_example() -> None:
    cfg = loads_config(JOBS)
    assert cfg.warnings == ()
    jobs, failed = cfg.queues
    assert (jobs.name, jobs.max_cancels, jobs.max_deliveries, jobs.underlying_topic) == ("Jobs", 3, 10, "Jobs")
    assert (failed.name, failed.max_cancels, failed.max_deliveries) == ("FailedJobs", 0, 0)
    (action,) = cfg.actions
    (on,) = action.on
    (do,) = action.do
    assert (on.module, on.option("Topic"), on.option("MessageType")) == (
        "amps-action-on-sow-expire-message", "Jobs", "json")
    assert (do.module, do.option("Topic"), do.option("MessageType")) == (
        "amps-action-do-publish-message", "FailedJobs", "json")
    assert do.option("Data") == '{ "message": {{AMPS_DATA}}, "reason": "{{AMPS_REASON}}" }'


# --- legacy synonyms ---------------------------------------------------------------------

def test_legacy_synonyms() -> None:
    cfg = loads_config(xml("""
        <AMPSConfig>
            <Name>legacy</Name>
            <TransactionLog>
                <JournalDirectory>./j</JournalDirectory>
                <Topic><Name>.*</Name><MessageType>nvfix</MessageType></Topic>
            </TransactionLog>
            <TopicMetaData>
                <TopicDefinition>
                    <Topic>/ett/order</Topic>
                    <MessageType>nvfix</MessageType>
                    <Key>/orderId</Key>
                    <FileName>./sow/%n.sow</FileName>
                    <Duration>transient</Duration>
                </TopicDefinition>
                <QueueDefinition>
                    <Topic>work</Topic>
                    <MessageType>nvfix</MessageType>
                </QueueDefinition>
                <ViewDefinition>
                    <Topic>TOTAL_VALUE</Topic>
                    <MessageType>nvfix</MessageType>
                    <UnderlyingTopic>/ett/order</UnderlyingTopic>
                    <Projection><Field>/109</Field><Field>SUM(/14 * /6) AS /71406</Field></Projection>
                    <Grouping><Field>/109</Field></Grouping>
                </ViewDefinition>
                <ReplicaDefinition>
                    <Topic>order-c</Topic>
                    <MessageType>nvfix</MessageType>
                    <UnderlyingTopic>/ett/order</UnderlyingTopic>
                </ReplicaDefinition>
            </TopicMetaData>
            <Transports>
                <Transport><Name>t</Name><Type>tcp</Type><InetAddr>9007</InetAddr></Transport>
            </Transports>
        </AMPSConfig>
    """))
    (topic,) = cfg.sow_topics
    assert (topic.name, topic.durability, topic.resolved_file_name) == (
        "/ett/order", "transient", "./sow/%2Fett%2Forder.nvfix.sow")
    assert cfg.queues[0].name == "work" and cfg.queues[0].kind == "queue"
    assert cfg.views[0].name == "TOTAL_VALUE"
    assert cfg.conflated_topics[0].name == "order-c"
    assert cfg.conflated_topics[0].interval == 5.0  # AMPS default
    assert cfg.transports[0].protocol == "amps"  # default protocol
    assert cfg.transports[0].message_type is None


# --- includes and environment variables --------------------------------------------------

def test_include_relative_to_including_file_and_nested(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "parts").mkdir()
    (tmp_path / "conf" / "main.xml").write_text(xml("""
        <AMPSConfig>
            <Name>inc</Name>
            <Include>parts/transports.xml</Include>
            <SOW>
                <Include>parts/topics.xml</Include>
            </SOW>
        </AMPSConfig>
    """))
    (tmp_path / "conf" / "parts" / "transports.xml").write_text(xml("""
        <Transports>
            <Transport><Name>a</Name><Type>tcp</Type><InetAddr>${PORT_A}</InetAddr></Transport>
            <Include>more.xml</Include>
        </Transports>
    """))
    (tmp_path / "conf" / "parts" / "more.xml").write_text(
        "<Transport><Name>b</Name><Type>tcp</Type><InetAddr>9100</InetAddr></Transport>\n")
    (tmp_path / "conf" / "parts" / "topics.xml").write_text(xml("""
        <Topic><Name>t1</Name><MessageType>json</MessageType><Durability>transient</Durability></Topic>
        <Topic><Name>t2</Name><MessageType>json</MessageType><FileName>${AMPS_CONFIG_DIRECTORY}/%n.sow</FileName></Topic>
    """))
    monkeypatch.chdir(tmp_path)  # include paths must resolve against the including file, not the cwd
    cfg = load_config("conf/main.xml", env={"PORT_A": "9099"})
    assert [(t.name, t.port) for t in cfg.transports] == [("a", 9099), ("b", 9100)]
    assert cfg.transports[1].file == os.path.join("conf", "parts", "more.xml")
    assert [t.name for t in cfg.sow_topics] == ["t1", "t2"]
    assert cfg.sow_topics[1].file_name == f"{tmp_path / 'conf'}/%n.sow"


def test_env_substitution_in_text(tmp_path: Path) -> None:
    cfg = loads_config(xml("""
        <AMPSConfig>
            <Name>${NAME}-${SUFFIX}</Name>
            <TransactionLog><JournalDirectory>${DATA}/journal</JournalDirectory></TransactionLog>
        </AMPSConfig>
    """), env={"NAME": "amps", "SUFFIX": "7", "DATA": str(tmp_path)})
    assert cfg.name == "amps-7"
    assert cfg.transaction_log is not None
    assert cfg.transaction_log.journal_directory == f"{tmp_path}/journal"
    assert cfg.transaction_log.topics == ()


def test_units_in_context() -> None:
    cfg = loads_config(xml("""
        <AMPSConfig>
            <Name>u</Name>
            <MaxFrameSize>512KB</MaxFrameSize>
            <ClientOutboundLimit>10MB</ClientOutboundLimit>
            <Transports>
                <Transport><Name>t</Name><Type>tcp</Type><InetAddr>9007</InetAddr></Transport>
            </Transports>
            <SOW>
                <Queue>
                    <Name>q</Name><MessageType>json</MessageType>
                    <LeasePeriod>500ms</LeasePeriod><Expiration>1h</Expiration>
                    <MaxBacklog>10k</MaxBacklog><DeferredAckExpiration>2m</DeferredAckExpiration>
                </Queue>
            </SOW>
            <TransactionLog><JournalDirectory>./j</JournalDirectory></TransactionLog>
        </AMPSConfig>
    """))
    t = cfg.transports[0]
    assert (t.max_frame_size, t.client_outbound_limit) == (512 * 1024, 10 * MiB)  # instance defaults
    q = cfg.queues[0]
    assert (q.lease_period, q.expiration, q.max_backlog, q.deferred_ack_expiration) == (0.5, 3600.0, 10_000, 120.0)


def test_limits_before_logon_and_connection_caps() -> None:
    cfg = loads_config(xml("""
        <AMPSConfig>
            <Name>u</Name>
            <MaxFrameSizeBeforeLogon>64KB</MaxFrameSizeBeforeLogon>
            <MaxConnections>1k</MaxConnections>
            <Transports>
                <Transport><Name>default</Name><Type>tcp</Type><InetAddr>9007</InetAddr></Transport>
                <Transport><Name>own</Name><Type>tcp</Type><InetAddr>9008</InetAddr>
                    <MaxFrameSizeBeforeLogon>2MB</MaxFrameSizeBeforeLogon>
                    <MaxConnections>5</MaxConnections></Transport>
            </Transports>
        </AMPSConfig>
    """))
    default, own = cfg.transports
    assert (default.max_frame_size_before_logon, default.max_connections) == (64 * 1024, 1000)
    assert (own.max_frame_size_before_logon, own.max_connections) == (2 * MiB, 5)
    plain = loads_config(xml("""<AMPSConfig><Name>p</Name><Transports><Transport><Name>t</Name>
        <Type>tcp</Type><InetAddr>9007</InetAddr></Transport></Transports></AMPSConfig>"""))
    assert (plain.transports[0].max_frame_size_before_logon, plain.transports[0].max_connections) \
        == (1 * MiB, None)  # None: a share of the open-file limit (server.net.admission)
    with pytest.raises(ConfigError, match="MaxConnections must be greater than zero"):
        loads_config(xml("""<AMPSConfig><Name>p</Name><Transports><Transport><Name>t</Name>
            <Type>tcp</Type><InetAddr>9007</InetAddr><MaxConnections>0</MaxConnections>
            </Transport></Transports></AMPSConfig>"""))


# --- sample and default ------------------------------------------------------------------

def test_sample_config_loads_cleanly() -> None:
    text = sample_config()
    assert "<!--" in text and "<AMPSConfig>" in text
    cfg = loads_config(text, filename="sample.xml")
    assert cfg.warnings == ()  # everything in the sample is implemented
    assert cfg.transports and cfg.admin and cfg.logging and cfg.transaction_log
    assert cfg.sow_topics and cfg.queues and cfg.views and cfg.conflated_topics and cfg.actions


def test_sample_config_starts_where_the_builtin_config_leaves_off() -> None:
    """Same transport, same SOW topic and key, same data files: a user who moves from the
    built-in config to the sample keeps the orders published so far."""
    sample, builtin = loads_config(sample_config(), filename="sample.xml"), default_config()
    first = sample.transports[0]
    (t,) = builtin.transports
    assert (first.name, first.inet_addr, first.message_type, first.protocol) == \
        (t.name, t.inet_addr, t.message_type, t.protocol)
    (orders,) = builtin.sow_topics
    mine = sample.sow_topic("orders", "json")
    assert mine is not None
    assert (mine.keys, mine.resolved_file_name, mine.durability) == \
        (orders.keys, orders.resolved_file_name, orders.durability)
    assert sample.transaction_log is not None and builtin.transaction_log is not None
    assert sample.transaction_log.journal_directory == builtin.transaction_log.journal_directory
    assert sample.transaction_log.records("orders", "json")


def test_default_config_shape(tmp_path: Path) -> None:
    cfg = default_config()
    (t,) = cfg.transports
    assert (t.host, t.port, t.type, t.protocol, t.message_type) == ("127.0.0.1", 9007, "tcp", "amps", "json")
    assert cfg.transaction_log is not None
    assert cfg.transaction_log.journal_directory == "./amps-data/journal"
    assert cfg.transaction_log.topics == ((".*", "json"),)
    assert cfg.transaction_log.durability == "group"
    assert cfg.transaction_log.records("any/topic", "json")
    assert cfg.sow_directory == "./amps-data/sow"
    (orders,) = cfg.sow_topics  # a first sow query works out of the box
    assert (orders.name, orders.message_type, orders.keys, orders.durability) == \
        ("orders", "json", ("/id",), "persistent")
    assert orders.resolved_file_name == "./amps-data/sow/orders.json.sow"
    assert cfg.warnings == () and cfg.source == "<default>"
    other = default_config(data_dir=tmp_path)
    assert other.transaction_log is not None
    assert other.transaction_log.journal_directory == str(tmp_path / "journal")
    assert other.sow_directory == str(tmp_path / "sow")
    assert other.sow_topics[0].resolved_file_name == str(tmp_path / "sow" / "orders.json.sow")


def test_sow_directory_extension_supplies_file_names() -> None:
    cfg = loads_config(xml("""
        <AMPSConfig>
            <Name>d</Name>
            <SOWDirectory>/data/sow</SOWDirectory>
            <SOW><Topic><Name>a</Name><MessageType>json</MessageType></Topic></SOW>
        </AMPSConfig>
    """))
    assert cfg.sow_topics[0].resolved_file_name == "/data/sow/a.json.sow"
    with pytest.raises(ConfigError, match="needs a <FileName>"):
        loads_config("<AMPSConfig><Name>d</Name><SOW><Topic><Name>a</Name>"
                     "<MessageType>json</MessageType></Topic></SOW></AMPSConfig>")
