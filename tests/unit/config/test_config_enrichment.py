"""``SOW/Topic/Preprocessing``, ``SOW/Topic/Enrichment`` and ``SOW/ConflatedTopic/Enrichment``:
read into the model, and refused (with the file and line) where AMPS refuses them."""

from __future__ import annotations

import pytest

from amps_emulator.config import ConfigError, loads_config


def _config(topic_children: str = "", message_type: str = "json", conflated: str = "",
            types: str = "") -> str:
    return f"""<AMPSConfig><Name>cfg</Name>
  {types}
  <Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <Protocol>amps</Protocol></Transport></Transports>
  <SOW>
    <Topic><Name>orders</Name><MessageType>{message_type}</MessageType><Key>/id</Key>
      <Durability>transient</Durability>
      {topic_children}
    </Topic>
    {conflated}
  </SOW>
</AMPSConfig>"""


def _errors(text: str) -> list[tuple[int, str]]:
    with pytest.raises(ConfigError) as info:
        loads_config(text, "enrich.xml")
    return [(e.line, e.reason) for e in info.value.errors]


def test_the_fields_are_read_and_nothing_is_warned():
    cfg = loads_config(_config("""
      <Preprocessing>
        <Field>COALESCE(/id, CONCAT(/customer, /serial)) as /id</Field>
      </Preprocessing>
      <Enrichment>
        <Field>COALESCE(/status OF CURRENT, /status OF PREVIOUS, 'new') AS /status</Field>
        <Field>IF(/src IN ('a','b'), /src, NULL)
               AS /src HINT OPTIONAL</Field>
      </Enrichment>""", conflated="""
    <ConflatedTopic><Name>orders-c</Name><MessageType>json</MessageType>
      <UnderlyingTopic>orders</UnderlyingTopic><Interval>1s</Interval>
      <Enrichment><Field>UPPER(/status) AS /status</Field></Enrichment></ConflatedTopic>"""))
    [topic] = cfg.sow_topics
    assert topic.preprocessing == ("COALESCE(/id, CONCAT(/customer, /serial)) as /id",)
    assert topic.enrichment[0] == "COALESCE(/status OF CURRENT, /status OF PREVIOUS, 'new') AS /status"
    assert len(topic.enrichment) == 2
    assert cfg.conflated_topics[0].enrichment == ("UPPER(/status) AS /status",)
    assert cfg.warnings == ()


@pytest.mark.parametrize("children, reason", [
    ("<Preprocessing><Field>COALESCE(/a OF PREVIOUS, 1) AS /a</Field></Preprocessing>", "OF PREVIOUS"),
    ("<Enrichment><Field>/a + 1</Field></Enrichment>", "needs AS"),
    ("<Enrichment><Field>/a AS /b HINT LATER</Field></Enrichment>", "unknown HINT"),
    ("<Enrichment><Field>[json].[other]./a AS /b</Field></Enrichment>", "topic or message type"),
    ("<Enrichment><Field>/a = AS /b</Field></Enrichment>", "the expression of"),
    ("<Enrichment></Enrichment>", "must contain at least one <Field>"),
    ("<Enrichment><Rule>/a AS /b</Rule></Enrichment>", "<Rule>"),
])
def test_bad_fields_are_errors_at_their_line(children, reason):
    text = _config(children)
    [(line, why)] = _errors(text)
    assert reason in why
    tag = "<Field>" if "<Field>" in children else "<Rule>" if "<Rule>" in children else "<Enrichment>"
    assert line == next(n for n, row in enumerate(text.splitlines(), 1) if tag in row)


def test_a_conflated_topic_cannot_read_the_previous_state():
    [(_, why)] = _errors(_config(conflated="""
    <ConflatedTopic><Name>orders-c</Name><MessageType>json</MessageType>
      <UnderlyingTopic>orders</UnderlyingTopic>
      <Enrichment><Field>COALESCE(/a OF PREVIOUS, 0) AS /a</Field></Enrichment></ConflatedTopic>"""))
    assert "<ConflatedTopic>/<Enrichment>" in why and "OF PREVIOUS" in why


@pytest.mark.parametrize("message_type, types", [
    ("binary", ""),
    ("rows", """<MessageTypes><MessageType><Name>rows</Name><Module>struct</Module>
        <Field>/id = i</Field></MessageType></MessageTypes>"""),
])
def test_types_amps_does_not_enrich_are_refused(message_type, types):
    [(_, why)] = _errors(_config("<Enrichment><Field>1 AS /n</Field></Enrichment>", message_type,
                                 types=types))
    assert "cannot have <Preprocessing> or <Enrichment>" in why


@pytest.mark.parametrize("message_type", ["nvfix", "fix", "xml", "bflat", "msgpack", "bson"])
def test_types_with_fields_are_accepted(message_type):
    field = "'x' AS /58" if message_type == "fix" else "'x' AS /k"
    cfg = loads_config(_config(f"<Preprocessing><Field>{field}</Field></Preprocessing>",
                               message_type), "enrich.xml")
    assert cfg.sow_topics[0].preprocessing == (field,)


@pytest.mark.parametrize("message_type, field, refused", [
    ("fix", "'x' AS /Text", True),
    ("fix", "'x' AS /58", False),
    ("nvfix", "'x' AS /a/b", True),
    ("bflat", "'x' AS /a/b", True),
    ("nvfix", "'x' AS /note", False),
    ("xml", "'x' AS /order/note", False),
])
def test_flat_types_hold_only_flat_fields(message_type, field, refused):
    text = _config(f"<Enrichment><Field>{field}</Field></Enrichment>", message_type)
    if refused:
        [(_, why)] = _errors(text)
        assert "cannot hold the field" in why
    else:
        assert loads_config(text, "enrich.xml").sow_topics[0].enrichment == (field,)
