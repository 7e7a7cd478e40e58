"""Configs as real AMPS deployments write them, served through the official client: logical
SOW topics of a ``Pattern`` container, a queue named like a regex, ReuseAddr, custom
``<Protocols>`` and one topic name defined for several message types."""

from __future__ import annotations

import json
import socket

import AMPS
import pytest

from tests.support.clients import clients_for
from tests.support.servers import config_xml, start_server


def _rows(c, topic: str) -> list[tuple[str, dict]]:
    return sorted((m.get_topic(), json.loads(m.get_data()))
                  for m in c.sow(topic, timeout=5000) if m.get_command() == "sow")


PATTERN_SOW = """<SOW>
  <Topic><Name>/orders/special</Name><MessageType>json</MessageType><Key>/id</Key>
    <Durability>transient</Durability></Topic>
  <Topic><Name>RegexOrders</Name><Pattern>^/orders/</Pattern><MessageType>json</MessageType>
    <Key>/id</Key><FileName>{d}/sow/%n.sow</FileName></Topic>
  <RegexTopic><Name>^px\\.</Name><MessageType>json</MessageType><Key>/id</Key>
    <Durability>transient</Durability></RegexTopic>
</SOW>"""


def test_pattern_topic_holds_one_logical_sow_topic_per_published_name(tmp_path):
    xml = config_xml(tmp_path, txlog_topics=("RegexOrders", "^px\\."), extra=PATTERN_SOW.format(d=tmp_path))
    srv = start_server(xml)
    try:
        make = clients_for(srv.uri)
        c = next(make)()
        sub = c.sow_and_subscribe("/orders/A", timeout=5000)  # a logical topic not yet published to
        for topic, body in (("/orders/A", {"id": 1, "v": 1}), ("/orders/B", {"id": 1, "v": 2}),
                            ("/orders/A", {"id": 1, "v": 3}), ("/orders/special", {"id": 1, "v": 4}),
                            ("px.EUR", {"id": 7, "v": 5}), ("/elsewhere/A", {"id": 1, "v": 6})):
            c.publish(topic, json.dumps(body))
        c.publish_flush(5000)
        # the same key in different logical topics: different records
        assert _rows(c, "/orders/A") == [("/orders/A", {"id": 1, "v": 3})]
        assert _rows(c, "/orders/B") == [("/orders/B", {"id": 1, "v": 2})]
        # the exact definition takes precedence over the pattern
        assert _rows(c, "/orders/special") == [("/orders/special", {"id": 1, "v": 4})]
        assert _rows(c, "^/orders/[AB]$") == [("/orders/A", {"id": 1, "v": 3}),
                                             ("/orders/B", {"id": 1, "v": 2})]
        assert _rows(c, "px.EUR") == [("px.EUR", {"id": 7, "v": 5})]
        # a regex query matching the pattern's text is a query, not a new logical topic
        assert _rows(c, "/orders/.*") == [("/orders/A", {"id": 1, "v": 3}),
                                         ("/orders/B", {"id": 1, "v": 2}),
                                         ("/orders/special", {"id": 1, "v": 4})]
        assert srv.call(lambda: srv.server.sow_service.sow.get("/orders/.*")) is None
        got = []
        for m in sub:
            if m.get_command() == "publish":
                got.append(json.loads(m.get_data())["v"])
            if len(got) == 2:
                break
        assert got == [1, 3]  # only the subscribed logical topic
        with pytest.raises(AMPS.InvalidTopicException):  # matches no container: not a SOW topic
            c.sow("/elsewhere/A", timeout=5000)
    finally:
        srv.stop()
    # restart: logical topics come back from the container's storage and the journal
    srv = start_server(xml)
    try:
        c = next(clients_for(srv.uri))()
        assert _rows(c, "^/orders/") == [("/orders/A", {"id": 1, "v": 3}),
                                        ("/orders/B", {"id": 1, "v": 2})]
        assert _rows(c, "px.EUR") == [("px.EUR", {"id": 7, "v": 5})]  # transient: from the journal
    finally:
        srv.stop()


def test_queue_named_like_a_regex_takes_its_own_name_literally(tmp_path):
    xml = config_xml(tmp_path, txlog_topics=("orders.queue", "ordersXqueue"), extra="""<SOW>
      <Queue><Name>orders.queue</Name><MessageType>json</MessageType></Queue></SOW>""")
    srv = start_server(xml)
    try:
        c = next(clients_for(srv.uri))()
        c.publish("ordersXqueue", json.dumps({"n": 1}))  # would match the name as a regex
        c.publish("orders.queue", json.dumps({"n": 2}))
        c.publish_flush(5000)
        got = []
        for m in c.subscribe("orders.queue", timeout=5000):
            got.append(json.loads(m.get_data())["n"])
            if m.get_data():
                break
        c.flush(5000)
        assert got == [2]
        assert srv.call(lambda: len(srv.server.queue_service.covering("ordersXqueue"))) == 0
    finally:
        srv.stop()


def test_reuse_addr_and_custom_protocol_and_sample_style_definitions(tmp_path):
    xml = f"""<AMPSConfig>
  <Name>Javascript QuickStart Demo</Name>
  <Admin><FileName>{tmp_path}/stats.db</FileName></Admin>
  <Protocols>
    <Protocol><Name>amps-custom</Name><Module>amps</Module></Protocol>
    <Protocol><Name>websocket-portal</Name><Module>websocket</Module>
      <WWWAuthenticate>Basic realm="x"</WWWAuthenticate></Protocol>
  </Protocols>
  <Transports>
    <Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <ReuseAddr>false</ReuseAddr><MessageType>json</MessageType><Protocol>amps-custom</Protocol></Transport>
    <Transport><Name>ws</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <Protocol>websocket-portal</Protocol></Transport>
  </Transports>
  <SOW>
    <Topic><Name>messages-sow</Name><MessageType>xml</MessageType><Key>/hi/n</Key>
      <Durability>transient</Durability></Topic>
    <Topic><Name>messages-sow</Name><MessageType>json</MessageType><Key>/n</Key>
      <Durability>transient</Durability></Topic>
    <Topic><Name>messages-sow</Name><MessageType>nvfix</MessageType><Key>/n</Key>
      <Durability>transient</Durability></Topic>
  </SOW>
</AMPSConfig>"""
    from amps_emulator.config import loads_config
    from tests.support.servers import ServerThread

    cfg = loads_config(xml)
    t, ws = cfg.transports
    assert (ws.protocol, ws.protocol_name) == ("websocket", "websocket-portal")
    assert (t.protocol, t.protocol_name, t.reuse_addr) == ("amps", "amps-custom", False)
    assert cfg.admin is None
    # AMPS keys topics by (message type, name): each definition is its own topic
    assert [(s.name, s.message_type) for s in cfg.sow_topics] == [
        ("messages-sow", "xml"), ("messages-sow", "json"), ("messages-sow", "nvfix")]
    srv = ServerThread(cfg)
    srv.start()
    try:
        c = AMPS.Client("fidelity")
        c.connect(srv.uri)
        c.logon(5000)
        c.publish("messages-sow", json.dumps({"n": 1, "x": "a"}))
        c.publish("messages-sow", json.dumps({"n": 1, "x": "b"}))  # keyed by the json /n
        c.publish_flush(5000)
        assert _rows(c, "messages-sow") == [("messages-sow", {"n": 1, "x": "b"})]
        c.close()
    finally:
        srv.stop()


def test_reuse_addr_sets_so_reuseaddr_on_the_listening_socket(tmp_path):
    import asyncio

    from amps_emulator.config import loads_config
    from amps_emulator.server.app import Server

    def opt(flag: str) -> int:
        cfg = loads_config(f"""<AMPSConfig><Name>r</Name><Transports><Transport><Name>t</Name>
          <Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><ReuseAddr>{flag}</ReuseAddr>
          </Transport></Transports></AMPSConfig>""")

        async def run() -> int:
            srv = Server(cfg)
            await srv.start()
            try:
                sock = srv.listeners[0].server.sockets[0]
                return sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR)
            finally:
                await srv.stop()

        return asyncio.run(run())

    assert opt("true") != 0
    assert opt("false") == 0
