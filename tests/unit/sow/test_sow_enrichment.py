"""``sow.enrichment``: a topic's Preprocessing and Enrichment written into bodies of each
message type it serves, and a topic's key computed after preprocessing."""

from __future__ import annotations

import msgspec
import pytest

from amps_emulator.protocol.filter import MessageContext
from amps_emulator.protocol.msgtypes import build_registry
from amps_emulator.protocol.reasons import SOW_STORE_FAILED, CommandError
from amps_emulator.sow.enrichment import Enrichment
from amps_emulator.sow.testing import js

REG = build_registry()


def test_json_bodies_keep_their_fields_and_gain_the_computed_ones():
    e = Enrichment(["UPPER(/sym) AS /sym"],
                   ["/qty * /px AS /notional", "COALESCE(/desk OF PREVIOUS, 'none') AS /desk"])
    doc = {"sym": "ibm", "qty": 3, "px": 2.5, "nested": {"a": 1}}
    body, pre = e.preprocess(js(doc), doc)
    assert msgspec.json.decode(body) == pre == {"sym": "IBM", "qty": 3, "px": 2.5, "nested": {"a": 1}}
    assert doc["sym"] == "ibm"  # the caller's document is not written
    body, out = e.enrich(body, pre, {"desk": "rates"})
    assert body == b'{"sym":"IBM","qty":3,"px":2.5,"nested":{"a":1},"notional":7.5,"desk":"rates"}'
    assert out == msgspec.json.decode(body)


def test_a_stage_without_fields_leaves_the_message_alone():
    e = Enrichment([], ["'x' AS /y"])
    assert e.preprocess(b'{"a":1}', {"a": 1}) == (b'{"a":1}', {"a": 1})
    assert (e.pre, e.reads_previous, e.uses_context) == (None, False, False)


@pytest.mark.parametrize("doc", [None, [1, 2], "text"])
def test_a_body_that_is_not_an_object_is_left_as_it_is(doc):
    e = Enrichment(["1 AS /a"], ["2 AS /b"])
    assert e.preprocess(b"raw", doc) == (b"raw", doc)
    assert e.enrich(b"raw", doc, {"b": 1}) == (b"raw", doc)


def test_nvfix_fields_keep_their_text():
    codec = REG.codec("nvfix")
    e = Enrichment([], ["/bid * 2 AS /twice", "/gone AS /gone HINT OPTIONAL",
                        "/absent AS /empty"], codec)
    body = b"sym=IBM\x01bid=1.50\x01gone=\x01id=007\x01"
    out, doc = e.enrich(body, codec.decode(body))
    assert out == b"sym=IBM\x01bid=1.50\x01id=007\x01twice=3.0\x01empty=\x01"
    assert doc == codec.decode(out)


def test_xml_bodies_are_written_under_their_root():
    codec = REG.codec("xml")
    e = Enrichment(["CONCAT(/order/desk, '-', /order/id) AS /order/key"],
                   ["COALESCE(/order/qty OF CURRENT, /order/qty OF PREVIOUS) AS /order/qty"], codec)
    body = b"<order><id>7</id><desk>fx</desk><px>1.50</px></order>"
    body, doc = e.preprocess(body, codec.decode(body))
    assert body == b"<order><id>7</id><desk>fx</desk><px>1.50</px><key>fx-7</key></order>"
    body, doc = e.enrich(body, doc, {"order": {"qty": 12}})
    assert doc == {"order": {"id": 7, "desk": "fx", "px": 1.5, "key": "fx-7", "qty": 12}}


def test_a_value_the_type_cannot_write_refuses_the_publish():
    codec = REG.codec("fix")
    e = Enrichment([], ["'x' AS /Text"], codec)  # fix tags are numbers
    body = b"35=D\x0155=IBM\x01"
    with pytest.raises(CommandError) as info:
        e.enrich(body, codec.decode(body))
    assert info.value.reason == SOW_STORE_FAILED


def test_context_functions_read_the_message_context():
    e = Enrichment([], ["CONCAT(TOPIC_NAME(), '@', AMPS_INSTANCE_NAME(), '/', SOW_KEY()) AS /src"])
    assert e.uses_context
    ctx = MessageContext(topic="orders", sow_key="42", instance_name="east")
    _, doc = e.enrich(b"{}", {}, None, ctx)
    assert doc == {"src": "orders@east/42"}


def test_the_key_comes_from_preprocessing_and_of_previous_from_the_stored_record(sf):
    t = sf.topic(keys=("/bucket",), preprocessing=("/id % 4 AS /bucket",),
                 enrichment=("COALESCE(/seen OF PREVIOUS, 0) + 1 AS /seen",))
    e = t.enrichment
    assert e is not None and e.reads_previous
    for i in (1, 5, 9, 2):
        doc = {"id": i}
        body, doc = e.preprocess(js(doc), doc)
        key = t.key_for(doc)
        body, doc = e.enrich(body, doc, t.previous_doc(key))
        t.publish(body, doc=doc, key=key)
    rows = sorted((r.doc["bucket"], r.doc["id"], r.doc["seen"]) for r in t.query().records)
    assert rows == [(1, 9, 3), (2, 2, 1)]


def test_a_topic_without_rules_has_no_enrichment(sf):
    assert sf.topic(keys=("/id",)).enrichment is None
