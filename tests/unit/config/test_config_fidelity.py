"""What AMPS accepts loads: the config-level rules of issue 10, one case each."""

from __future__ import annotations

import pytest

from amps_emulator.config import ConfigError, loads_config

T = ("<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>9007</InetAddr>"
     "<Protocol>{p}</Protocol>{extra}</Transport></Transports>")


def cfg(body: str, name: str = "n", protocol: str = "amps", extra: str = ""):
    return loads_config(f"<AMPSConfig><Name>{name}</Name>{T.format(p=protocol, extra=extra)}{body}</AMPSConfig>")


def errors(body: str, **kw) -> list[str]:
    with pytest.raises(ConfigError) as info:
        cfg(body, **kw)
    return [e.reason for e in info.value.errors]


def test_instance_name_with_spaces_warns_and_path_characters_still_fail():
    c = cfg("", name="Javascript QuickStart Demo")
    assert c.name == "Javascript QuickStart Demo"
    assert ["spaces" in w.reason for w in c.warnings] == [True]
    assert "invalid instance name" in errors("", name="a/b")[0]


def test_reuse_addr_is_read():
    assert cfg("").transports[0].reuse_addr is True
    assert cfg("", extra="<ReuseAddr>false</ReuseAddr>").transports[0].reuse_addr is False
    assert "ReuseAddr" in errors("", extra="<ReuseAddr>maybe</ReuseAddr>")[0]


def test_protocol_names_resolve_through_protocols_and_unknown_ones_are_errors():
    protocols = ("<Protocols><Protocol><Name>mine</Name><Module>json</Module></Protocol>"
                 "<Protocol><Name>web</Name><Module>websocket</Module></Protocol></Protocols>")
    t = cfg(protocols, protocol="mine").transports[0]
    assert (t.protocol, t.protocol_name) == ("amps", "mine")
    w = cfg(protocols, protocol="web").transports[0]  # served as a WebSocket transport
    assert (w.protocol, w.protocol_name) == ("websocket", "web")
    assert "unknown protocol 'mien'" in errors(protocols, protocol="mien")[0]
    assert "did you mean 'mine'" in errors(protocols, protocol="mien")[0]
    assert "missing required element <Module>" in errors(
        "<Protocols><Protocol><Name>x</Name></Protocol></Protocols>")[0]


def test_admin_without_inet_addr_is_no_admin_server():
    c = cfg("<Admin><Interval>5s</Interval></Admin>")
    assert c.admin is None and c.warnings == ()
    c = cfg("<Admin><InetAddr>8085</InetAddr><Interval>5s</Interval></Admin>")
    assert (c.admin.port, c.admin.interval) == (8085, 5.0) and c.warnings == ()


SOW_SAME_NAME = """<SOW>
  <Topic><Name>m</Name><MessageType>xml</MessageType><Key>/a/k</Key><Durability>transient</Durability></Topic>
  <Topic><Name>m</Name><MessageType>json</MessageType><Key>/k</Key><Durability>transient</Durability></Topic>
  <View><Name>v</Name><MessageType>xml</MessageType><UnderlyingTopic>m</UnderlyingTopic>
    <Projection><Field>/k</Field></Projection><Grouping><Field>/k</Field></Grouping></View>
</SOW>"""


def test_one_name_for_several_message_types_keeps_each_type():
    c = cfg(SOW_SAME_NAME)
    assert [(t.name, t.message_type, t.keys) for t in c.sow_topics] == [
        ("m", "xml", ("/a/k",)), ("m", "json", ("/k",))]
    assert [(v.name, v.message_type) for v in c.views] == [("v", "xml")]
    assert c.warnings == ()


def test_queue_named_like_a_regex_without_underlying_topic_is_literal():
    c = cfg("<SOW><Queue><Name>orders.queue</Name><MessageType>json</MessageType></Queue></SOW>"
            "<TransactionLog><JournalDirectory>j</JournalDirectory>"
            "<Topic><Name>orders.queue</Name><MessageType>json</MessageType></Topic></TransactionLog>")
    (q,) = c.queues
    assert (q.underlying_topic, q.underlying_literal) == ("orders.queue", True)
    assert c.warnings == ()
    # a regex UnderlyingTopic still needs its DefaultPublishTarget
    assert "DefaultPublishTarget" in errors(
        "<SOW><Queue><Name>q</Name><MessageType>json</MessageType><UnderlyingTopic>a.*</UnderlyingTopic>"
        "</Queue></SOW><TransactionLog><JournalDirectory>j</JournalDirectory></TransactionLog>")[0]


def test_queue_without_transaction_log_is_an_error_at_the_queue():
    (e,) = errors("<SOW><Queue><Name>q</Name><MessageType>json</MessageType></Queue></SOW>")
    assert "needs a <TransactionLog>" in e


def test_pattern_topics():
    c = cfg("<SOW><Topic><Name>All</Name><Pattern>^/x/</Pattern><MessageType>json</MessageType>"
            "<Key>/id</Key><Durability>transient</Durability></Topic>"
            "<Topic><Name>/x/special</Name><MessageType>json</MessageType><Durability>transient</Durability></Topic>"
            "<RegexTopic><Name>^y\\.</Name><MessageType>json</MessageType><Durability>transient</Durability>"
            "</RegexTopic></SOW>")
    assert c.pattern_topic("/x/a").name == "All"
    assert c.pattern_topic("/x/special") is None  # its own definition wins
    assert c.pattern_topic("y.1").name == "^y\\."
    assert c.pattern_topic("z") is None
    assert "cannot keep <History>" in errors(
        "<SOW><Topic><Name>A</Name><Pattern>^a</Pattern><MessageType>json</MessageType>"
        "<Durability>transient</Durability><History><Window>1h</Window><Granularity>1s</Granularity>"
        "</History></Topic></SOW>")[0]
    assert "invalid <Pattern>" in errors(
        "<SOW><Topic><Name>A</Name><Pattern>(</Pattern><MessageType>json</MessageType>"
        "<Durability>transient</Durability></Topic></SOW>")[0]


def test_derived_topics_the_emulator_cannot_build_are_warned_at_load_time():
    c = cfg("""<SOW>
      <Queue><Name>q</Name><MessageType>json</MessageType></Queue>
      <Topic><Name>All</Name><Pattern>^/x/</Pattern><MessageType>json</MessageType><Key>/id</Key>
        <Durability>transient</Durability></Topic>
      <View><Name>v</Name><MessageType>json</MessageType><UnderlyingTopic>q</UnderlyingTopic>
        <Projection><Field>/k</Field></Projection><Grouping><Field>/k</Field></Grouping></View>
      <ConflatedTopic><Name>c</Name><MessageType>json</MessageType><UnderlyingTopic>All</UnderlyingTopic>
        <TopicFormat>%n-c</TopicFormat></ConflatedTopic>
      <ConflatedTopic><Name>cc</Name><MessageType>json</MessageType><UnderlyingTopic>c</UnderlyingTopic>
        </ConflatedTopic></SOW>
      <TransactionLog><JournalDirectory>j</JournalDirectory>
        <Topic><Name>q</Name><MessageType>json</MessageType></Topic></TransactionLog>""")
    assert [v.name for v in c.views] == ["v"]  # a view over a queue is built
    (family,) = c.conflated_topics  # one conflated topic per logical topic of All
    assert family.over_pattern and family.logical_name("/x/a") == "/x/a-c"
    assert c.conflated_logical("/x/a-c") == (family, "/x/a")
    assert c.pattern_topic("/x/a-c") is None and c.pattern_topic("/x/a").name == "All"
    assert c.conflated_logical("/x/a-c-c") is None  # not one of a conflated topic
    assert len(c.warnings) == 1 and "conflated topics of a Topic with a <Pattern>" in c.warnings[0].reason
