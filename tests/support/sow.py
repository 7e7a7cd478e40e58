"""The SOW topics most SOW tests through the official client use (``SOW_XML``: persisted,
transient, expiring, composite-key topics and the SOW bookmark store's topic), the config
around them (``sow_config``) and ``query``: a SOW query's records as (key, document)."""

from __future__ import annotations

import json

from tests.support.servers import config_xml

SOW_XML = """<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{d}/sow/%n.sow</FileName><HashIndex><Key>/sym</Key></HashIndex></Topic>
  <Topic><Name>orders-eu</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{d}/sow/%n.sow</FileName></Topic>
  <Topic><Name>explicit</Name><MessageType>json</MessageType>
    <FileName>{d}/sow/%n.sow</FileName></Topic>
  <Topic><Name>positions</Name><MessageType>json</MessageType><Key>/acct</Key><Key>/sym</Key>
    <FileName>{d}/sow/%n.sow</FileName></Topic>
  <Topic><Name>cache</Name><MessageType>json</MessageType><Key>/id</Key>
    <Durability>transient</Durability></Topic>
  <Topic><Name>quotes</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{d}/sow/%n.sow</FileName><Expiration>enabled</Expiration></Topic>
  <Topic><Name>/ADMIN/bookmark_store</Name><MessageType>json</MessageType>
    <Key>/clientName</Key><Key>/subId</Key><FileName>{d}/sow/bookmark_store.sow</FileName></Topic>
</SOW>"""


def sow_config(d) -> str:
    return config_xml(d, extra=SOW_XML.format(d=d))


def query(c, topic, flt=None, **kw) -> list[tuple[str, dict]]:
    out = []
    for m in c.sow(topic, flt, timeout=5000, **kw):
        if m.get_command() == "sow":
            out.append((m.get_sow_key(), json.loads(m.get_data())))
    return out
