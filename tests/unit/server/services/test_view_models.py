"""Model tests for views: after random publishes and deletes on the underlying topics, every
view (one topic with a filter, a view over it, a left outer join of two topics, a chain of
three) holds exactly what computing it from scratch gives."""

from __future__ import annotations

import collections
import json
import random
from types import SimpleNamespace

import pytest

from amps_emulator.config import loads_config
from amps_emulator.server.core.message import Message
from amps_emulator.server.core.router import Router
from amps_emulator.server.services.views import DerivedTopics, derived_specs
from amps_emulator.sow import Sow
from amps_emulator.sow.aggregate import parse_aggregation
from amps_emulator.sow.testing import js

CONFIG = """<AMPSConfig><Name>v</Name>
<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
  <MessageType>json</MessageType><Protocol>amps</Protocol></Transport></Transports>
<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
    <Durability>transient</Durability></Topic>
  <Topic><Name>customers</Name><MessageType>json</MessageType><Key>/cid</Key>
    <Durability>transient</Durability></Topic>
  <Topic><Name>regions</Name><MessageType>json</MessageType><Key>/rid</Key>
    <Durability>transient</Durability></Topic>
  <View><Name>per_sym</Name><MessageType>json</MessageType><UnderlyingTopic>orders</UnderlyingTopic>
    <Projection><Field>/sym</Field><Field>SUM(/qty) AS /qty</Field><Field>COUNT(/id) AS /n</Field>
    </Projection><Grouping><Field>/sym</Field></Grouping><Filter>/qty > 2</Filter></View>
  <View><Name>big_syms</Name><MessageType>json</MessageType><UnderlyingTopic>per_sym</UnderlyingTopic>
    <Projection><Field>/sym</Field><Field>/n</Field></Projection>
    <Grouping><Field>/sym</Field></Grouping><Filter>/n >= 2</Filter></View>
  <View><Name>per_cust</Name><MessageType>json</MessageType>
    <UnderlyingTopic><Join>[orders].[/cust]=[customers].[/cid]</Join></UnderlyingTopic>
    <Projection><Field>[orders].[/cust] AS /cust</Field><Field>[customers].[/name] AS /name</Field>
      <Field>SUM([orders].[/qty]) AS /qty</Field></Projection>
    <Grouping><Field>[orders].[/cust]</Field></Grouping></View>
  <View><Name>per_region</Name><MessageType>json</MessageType>
    <UnderlyingTopic><Join>[orders].[/cust]=[customers].[/cid]</Join>
      <Join>[customers].[/region]=[regions].[/rid]</Join></UnderlyingTopic>
    <Projection><Field>[regions].[/label] AS /label</Field>
      <Field>COUNT([orders].[/id]) AS /n</Field></Projection>
    <Grouping><Field>[regions].[/label]</Field></Grouping></View>
</SOW></AMPSConfig>"""


def make_server():
    cfg = loads_config(CONFIG, "views.xml")
    from amps_emulator.server.services.sow_service import spec_from_config

    sow = Sow([spec_from_config(t) for t in cfg.sow_topics] + derived_specs(cfg))
    srv = SimpleNamespace(router=Router(), stats=collections.Counter(), derived=None,
                          topics_in={}, topics_out={},
                          turn=SimpleNamespace(request=lambda: None), wallclock=lambda: 0.0,
                          actions=SimpleNamespace(on_publish=False))
    srv.sow_service = SimpleNamespace(get=sow.get)
    srv.derived = DerivedTopics(srv, cfg)
    srv.derived.start()
    return srv, sow


def publish(srv, sow, topic, doc):
    t = sow.get(topic)
    res = t.publish(js(doc))
    msg = Message(topic, res.record.data, None, None, res.record.sow_key, None, "",
                  res.record.doc)
    msg.set_previous(res.previous)
    srv.derived.published(topic, msg)


def delete(srv, sow, topic, flt):
    recs = sow.get(topic).delete_by_filter(flt).records
    srv.derived.removed(topic, recs, "deleted")


def canon(docs) -> list[str]:
    return sorted(json.dumps(d, sort_keys=True) for d in docs)


def contents(sow, name):
    return canon(r.doc for r in sow.get(name).query().records)


def expected(sow):
    """Every view computed from scratch from the current records."""
    orders = [r.doc for r in sow.get("orders").query().records]
    customers = [r.doc for r in sow.get("customers").query().records]
    regions = [r.doc for r in sow.get("regions").query().records]

    def agg(rows, grouping, projection):
        spec = parse_aggregation({"grouping": grouping, "projection": projection})
        recs = [SimpleNamespace(doc=d, timestamp=0.0, sow_key="", bookmark="") for d in rows]
        return [r.doc for r in spec.aggregate(recs, "x")]

    per_sym = agg([o for o in orders if isinstance(o.get("qty"), int) and o["qty"] > 2],
                  "[/sym]", "[/sym, SUM(/qty) AS /qty, COUNT(/id) AS /n]")
    big = [{"sym": r["sym"], "n": r["n"]} for r in per_sym if r["n"] >= 2]

    def matches(rows, field, value):
        return [r for r in rows if value not in (None, "") and r.get(field) == value]

    joined, chained = [], []
    for o in orders:
        for c in matches(customers, "cid", o.get("cust")) or [None]:
            joined.append({"o": o, "c": c})
            regs = matches(regions, "rid", c.get("region")) if c else []
            for r in regs or [None]:
                chained.append({"o": o, "r": r})
    per_cust = agg(joined, "[/o/cust]",
                   "[/o/cust AS /cust, /c/name AS /name, SUM(/o/qty) AS /qty]")
    per_region = agg(chained, "[/r/label]", "[/r/label AS /label, COUNT(/o/id) AS /n]")
    return {"per_sym": canon(per_sym), "big_syms": canon(big), "per_cust": canon(per_cust),
            "per_region": canon(per_region)}


@pytest.mark.parametrize("seed", range(5))
def test_views_always_equal_a_computation_from_scratch(seed):
    rng = random.Random(seed)
    srv, sow = make_server()
    for step in range(300):
        r = rng.random()
        if r < 0.5:
            publish(srv, sow, "orders", {"id": rng.randrange(20), "sym": rng.choice("ABC"),
                                         "qty": rng.randrange(6), "cust": rng.randrange(5)})
        elif r < 0.7:
            publish(srv, sow, "customers", {"cid": rng.randrange(5), "name": rng.choice("xyz"),
                                            "region": rng.randrange(3)})
        elif r < 0.8:
            publish(srv, sow, "regions", {"rid": rng.randrange(3), "label": rng.choice("NSEW")})
        elif r < 0.9:
            delete(srv, sow, "orders", f"/id = {rng.randrange(20)}")
        else:
            delete(srv, sow, rng.choice(["customers", "regions"]),
                   f"/cid = {rng.randrange(5)}" if rng.random() < 0.5 else
                   f"/rid = {rng.randrange(3)}")
        want = expected(sow)
        for name, rows in want.items():
            assert contents(sow, name) == rows, (step, name)


@pytest.mark.parametrize("view", [
    """<View><Name>bad</Name><MessageType>json</MessageType><UnderlyingTopic>orders</UnderlyingTopic>
       <Projection><Field>NOSUCH(/qty) AS /q</Field></Projection>
       <Grouping><Field>/sym</Field></Grouping></View>""",
    """<View><Name>bad</Name><MessageType>json</MessageType>
       <UnderlyingTopic><Join>[orders].[/a]=[customers].[/b]</Join>
         <Join>[regions].[/c]=[per_sym].[/d]</Join></UnderlyingTopic>
       <Projection><Field>[orders].[/a]</Field></Projection>
       <Grouping><Field>[orders].[/a]</Field></Grouping></View>""",
])
def test_a_view_the_engine_cannot_build_is_a_config_error_with_its_line(view):
    from amps_emulator.config import ConfigError

    xml = CONFIG.replace("</SOW>", view + "</SOW>")
    cfg = loads_config(xml, "views.xml")
    from amps_emulator.server.services.sow_service import spec_from_config

    sow = Sow([spec_from_config(t) for t in cfg.sow_topics] + derived_specs(cfg))
    srv = SimpleNamespace(router=Router(), stats=collections.Counter(), derived=None,
                          sow_service=SimpleNamespace(get=sow.get))
    with pytest.raises(ConfigError) as e:
        DerivedTopics(srv, cfg)
    issue = e.value.errors[0]
    assert issue.file == "views.xml" and issue.line == xml.count("\n", 0, xml.index("<Name>bad")) + 1
    assert "View bad" in issue.reason
