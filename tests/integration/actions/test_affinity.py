"""``amps-action-on-message-affinity`` with the official Python client: processors subscribe to
a control topic and each record of the data topic is assigned to one of them, as in the User
Guide's example (orders, a view of their symbols, an assignments topic)."""

from __future__ import annotations

import json
import logging

import AMPS
import pytest

from amps_emulator.config import loads_config
from tests.integration.actions.test_actions import TRANSPORTS, Box, keyed
from tests.support.servers import ServerThread, until

ASSIGNMENTS = "symbol_processor_assignments"


def affinity_action(data_topic: str, control: str, data_filter: str = "",
                    value: str = "SYMBOL=/symbol") -> str:
    """The User Guide's example action, with an audit publish of every event added."""
    flt = f"<DataFilter>{data_filter}</DataFilter>" if data_filter else ""
    return f"""<Action>
  <On><Module>amps-action-on-message-affinity</Module><Options><MessageType>json</MessageType>
    <DataTopic>{data_topic}</DataTopic><ControlTopic>{control}</ControlTopic>{flt}</Options></On>
  <Do><Module>amps-action-do-extract-values</Module><Options><Data>{{{{AMPS_DATA}}}}</Data>
    <MessageType>json</MessageType><Value>{value}</Value></Options></Do>
  <Do><Module>amps-action-do-publish-message</Module><Options><MessageType>json</MessageType>
    <Topic>{control}</Topic><Data>{{"client_name":"{{{{AMPS_CLIENT_NAME}}}}","symbol":"{{{{SYMBOL}}}}",
    "event":"{{{{AMPS_AFFINITY_ACTION}}}}","reason":"{{{{AMPS_AFFINITY_REASON}}}}"}}</Data></Options></Do>
  <Do><Module>amps-action-do-publish-message</Module><Options><MessageType>json</MessageType>
    <Topic>affinity_audit</Topic><Data>{{"client":"{{{{AMPS_CLIENT_NAME}}}}","symbol":"{{{{SYMBOL}}}}",
    "event":"{{{{AMPS_AFFINITY_ACTION}}}}","reason":"{{{{AMPS_AFFINITY_REASON}}}}"}}</Data></Options></Do>
  <If><Module>amps-action-if-condition</Module><Options>
    <Condition>"{{{{AMPS_AFFINITY_ACTION}}}}" == "unassign"</Condition></Options></If>
  <Do><Module>amps-action-do-delete-sow</Module><Options><Topic>{control}</Topic>
    <MessageType>json</MessageType><Filter>/symbol = "{{{{SYMBOL}}}}"</Filter></Options></Do>
</Action>"""


SYMBOLS_VIEW = """<View><Name>symbols</Name><MessageType>json</MessageType>
  <UnderlyingTopic>orders</UnderlyingTopic><Projection><Field>/symbol</Field></Projection>
  <Grouping><Field>/symbol</Field></Grouping></View>"""


def server(d, sow: str, actions: str) -> ServerThread:
    xml = f"""<AMPSConfig><Name>affinity-test</Name>
<Admin><InetAddr>127.0.0.1:0</InetAddr></Admin>
{TRANSPORTS}
<SOW>{sow}</SOW>
<Actions>{actions}</Actions>
</AMPSConfig>"""
    return ServerThread(loads_config(xml, "affinity.xml")).start()


def assignments_sow(d) -> str:
    return (f"<Topic><Name>{ASSIGNMENTS}</Name><MessageType>json</MessageType><Key>/symbol</Key>"
            "<Durability>transient</Durability></Topic>")


class Env:
    def __init__(self, srv: ServerThread) -> None:
        self.srv = srv
        self.clients: list = []
        self.audit = Box()
        self.client("auditor").subscribe(self.audit, "affinity_audit")

    def client(self, name: str):
        c = AMPS.Client(name)
        c.connect(self.srv.uri)
        c.logon(5000)
        self.clients.append(c)
        return c

    def processor(self, name: str):
        """A processor: subscribed to the assignments of its own name (the control topic)."""
        c = self.client(name)
        box = Box()
        c.subscribe(box, ASSIGNMENTS, f"/client_name = '{name}'")
        return c, box

    def events(self, n: int) -> list[tuple]:
        """The first ``n`` audit events (waits for them), as (client, symbol, event, reason)."""
        assert self.audit.wait_for(n), self.audit.items
        return [(b["client"], b["symbol"], b["event"], b["reason"]) for b in self.audit.bodies()]

    def owners(self) -> dict:
        c = self.clients[0]
        return {b["symbol"]: b["client_name"] for b in (
            json.loads(m.get_data()) for m in c.sow(ASSIGNMENTS, timeout=5000)
            if m.get_command() == "sow")}

    def close(self) -> None:
        for c in self.clients:
            try:
                c.close()
            except AMPS.AMPSException:
                pass
        self.srv.stop()


@pytest.fixture
def orders_env(tmp_path):
    srv = server(tmp_path, keyed("orders", tmp_path) + SYMBOLS_VIEW + assignments_sow(tmp_path),
                 affinity_action("symbols", ASSIGNMENTS))
    env = Env(srv)
    yield env
    env.close()


def test_the_user_guide_example_assigns_hands_over_and_unassigns(orders_env):
    env = orders_env
    pub = env.client("publisher")
    for i, sym in enumerate(["IBM", "MSFT", "IBM", "AAPL"], 1):
        pub.publish("orders", json.dumps({"id": i, "symbol": sym}))
    pub.flush(5000)
    p1, box1 = env.processor("p1")  # the first processor gets every symbol there is
    first = env.events(3)
    assert sorted(first) == [("p1", s, "assign", "subscribe") for s in ("AAPL", "IBM", "MSFT")]
    assert box1.wait_for(3)  # through its subscription to the control topic

    p2, box2 = env.processor("p2")  # no rebalancing: p2 gets only new symbols
    pub.publish("orders", '{"id": 5, "symbol": "GOOG"}')
    pub.publish("orders", '{"id": 6, "symbol": "TSLA"}')
    pub.publish("orders", '{"id": 7, "symbol": "IBM"}')  # an update of a group: nothing
    assert env.events(5)[3:] == [("p2", "GOOG", "assign", "publish"),
                                 ("p2", "TSLA", "assign", "publish")]
    assert box2.wait_for(2)

    pub.sow_delete("orders", "/symbol = 'GOOG'")  # its group leaves the view
    assert env.events(6)[5] == ("p2", "GOOG", "unassign", "oof")
    assert env.owners() == {"AAPL": "p1", "IBM": "p1", "MSFT": "p1", "TSLA": "p2"}

    p1.unsubscribe()  # p1's symbols go to p2, each unassigned first
    moved = env.events(12)[6:]
    for sym in ("AAPL", "IBM", "MSFT"):
        at = moved.index(("p1", sym, "unassign", "unsubscribe"))
        assert moved[at + 1] == ("p2", sym, "assign", "unsubscribe")
    assert until(lambda: env.owners() == {s: "p2" for s in ("AAPL", "IBM", "MSFT", "TSLA")})

    p3, _ = env.processor("p3")
    p2.close()  # a disconnect is an unsubscribe too
    moved = env.events(20)[12:]
    assert sorted(e for e in moved if e[2] == "unassign") == [
        ("p2", s, "unassign", "unsubscribe") for s in ("AAPL", "IBM", "MSFT", "TSLA")]
    assert sorted(e for e in moved if e[2] == "assign") == [
        ("p3", s, "assign", "unsubscribe") for s in ("AAPL", "IBM", "MSFT", "TSLA")]
    assert until(lambda: env.owners() == {s: "p3" for s in ("AAPL", "IBM", "MSFT", "TSLA")})


def test_new_records_go_to_the_least_loaded_processor(orders_env):
    env = orders_env
    pub = env.client("publisher")
    env.processor("a")
    env.processor("b")
    for i, sym in enumerate("ABCDEF", 1):
        pub.publish("orders", json.dumps({"id": i, "symbol": sym}))
    got = env.events(6)
    assert [e[0] for e in got] == ["a", "b", "a", "b", "a", "b"]
    env.clients[-2].unsubscribe()  # a goes: its three to b
    env.events(12)
    env.processor("c")
    pub.publish("orders", '{"id": 9, "symbol": "G"}')  # c has none, b six
    assert env.events(13)[12] == ("c", "G", "assign", "publish")


def test_a_record_leaving_the_data_filter_or_the_topic_is_unassigned(tmp_path):
    srv = server(tmp_path, keyed("tickets", tmp_path) + assignments_sow(tmp_path),
                 affinity_action("tickets", ASSIGNMENTS, "/status = 'open'", "SYMBOL=/id"))
    env = Env(srv)
    try:
        pub = env.client("publisher")
        env.processor("w")
        pub.publish("tickets", '{"id": 1, "status": "open"}')
        pub.publish("tickets", '{"id": 2, "status": "closed"}')  # not in the filter
        pub.publish("tickets", '{"id": 3, "status": "open"}')
        assert env.events(2) == [("w", "1", "assign", "publish"), ("w", "3", "assign", "publish")]
        pub.publish("tickets", '{"id": 1, "status": "closed"}')
        pub.publish("tickets", '{"id": 2, "status": "open"}')
        pub.sow_delete("tickets", "/id = 3")
        assert env.events(5)[2:] == [("w", "1", "unassign", "oof"), ("w", "2", "assign", "publish"),
                                     ("w", "3", "unassign", "oof")]
    finally:
        env.close()


def test_a_queue_data_topic_is_warned_about_and_never_runs(tmp_path, caplog):
    queue = ("<Queue><Name>work</Name><MessageType>json</MessageType>"
             "<UnderlyingTopic>work</UnderlyingTopic></Queue>")
    xml_dir = tmp_path
    with caplog.at_level(logging.WARNING, logger="amps_emulator.actions"):
        srv = ServerThread(loads_config(f"""<AMPSConfig><Name>q</Name>
{TRANSPORTS}
<TransactionLog><JournalDirectory>{xml_dir}/journal</JournalDirectory>
  <Topic><Name>work</Name><MessageType>json</MessageType></Topic></TransactionLog>
<SOW>{queue}{assignments_sow(tmp_path)}</SOW>
<Actions>{affinity_action("work", ASSIGNMENTS)}</Actions></AMPSConfig>""", "q.xml")).start()
    try:
        assert any("'work' is a queue" in r.getMessage() for r in caplog.records)
        c = AMPS.Client("w")
        c.connect(srv.uri)
        c.logon(5000)
        c.subscribe(lambda m: None, ASSIGNMENTS)
        c.publish("work", '{"id": 1}')
        c.flush(5000)
        assert srv.call(lambda: srv.server.actions.affinities[0].entries) == {}
        c.close()
    finally:
        srv.stop()


def test_a_large_topic_is_assigned_in_slices_of_the_loop(tmp_path):
    srv = server(tmp_path, keyed("orders", tmp_path) + assignments_sow(tmp_path),
                 affinity_action("orders", ASSIGNMENTS, value="SYMBOL=/id"))
    env = Env(srv)
    try:
        pub = env.client("publisher")
        n = 5000
        for i in range(n):
            pub.publish("orders", json.dumps({"id": i}))
        pub.flush(10000)
        aff = srv.server.actions.affinities[0]
        pumps = []
        original = aff._pump

        def counted() -> None:
            pumps.append(len(aff.entries))
            original()

        srv.call(lambda: setattr(aff, "_pump", counted))
        env.processor("w")
        assert until(lambda: srv.call(lambda: len(aff.entries)) == n, 60)
        assert len(pumps) > 2 and pumps == sorted(pumps)  # several passes of the loop
    finally:
        env.close()
