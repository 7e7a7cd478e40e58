"""The engine's features on every message type, through the official Python client.

Issue 21's engine side (docs/design/beyond-json.md A.3-A.5, A.8): each server reads bodies with its own
codec table; queues, views (also projected into another type), conflated topics, aggregated
subscriptions, pagination, SOW History, ``/AMPS/`` topics, OOF and select lists work on typed
topics as they do on JSON ones. Parametrised over every type AMPS offers them all for: fix,
nvfix, xml, msgpack, bflat, bson and a composite-local type (its ``/AMPS/`` topics aside, which
AMPS does not write for composites). The types AMPS serves with limits (protobuf proto2 and
proto3, struct, composite-global) have their own tests at the end: what they support works,
what the User Guide says they do not is refused. Bodies are built and read with the emulator's
own codecs, which have their own unit and property tests.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from amps_emulator.protocol.msgtypes import MessageTypeDecl, build_registry
from amps_emulator.protocol.msgtypes.composite import join_parts
from tests.support.clients import client_for
from tests.support.servers import start_server

AMPS = pytest.importorskip("AMPS")

#: composite-local over a json part and a binary part (the binary part is never read)
COMPOSITE = "composite-json-binary"
_REG = build_registry([MessageTypeDecl(COMPOSITE, module="composite-local",
                                       parts=("json", "binary"))])
MESSAGE_TYPES = f"""<MessageTypes><MessageType><Name>{COMPOSITE}</Name>
  <Module>composite-local</Module><MessageType>json</MessageType><MessageType>binary</MessageType>
</MessageType></MessageTypes>"""


@dataclass(frozen=True)
class Kind:
    """One message type: how a body with fields ``k`` (key), ``n`` (number), ``g`` (group)
    is written, and the paths AMPS addresses them by."""

    name: str
    encode: Callable[[dict[str, Any]], bytes]
    decode: Callable[[bytes], dict[str, Any]]
    path: Callable[[str], str]  # field name -> identifier

    def body(self, **fields: Any) -> bytes:
        return self.encode(fields)


_FIX_TAGS = {"k": "11", "n": "38", "g": "1", "p": "44", "s": "55", "x": "58", "t": "14",
             "c": "53"}
_FIX_NAMES = {v: k for k, v in _FIX_TAGS.items()}


def _flat(name: str) -> Kind:
    codec = _REG.codec(name)
    return Kind(name, codec.encode, lambda b: dict(codec.decode(bytes(b))), lambda f: f"/{f}")


def _fix_decode(b: bytes) -> dict[str, Any]:
    return {_FIX_NAMES.get(t, t): v for t, v in _REG.codec("fix").decode(bytes(b)).items()}


def _xml_decode(b: bytes) -> dict[str, Any]:
    (inner,) = _REG.codec("xml").decode(bytes(b)).values()
    return dict(inner)


def _composite_encode(f: dict[str, Any]) -> bytes:
    return join_parts([_REG.codec("json").encode(f), b"\x00\x01opaque"])


def _composite_decode(b: bytes) -> dict[str, Any]:
    return dict(_REG.codec(COMPOSITE).decode(bytes(b))["0"])


KINDS = [
    Kind("fix", lambda f: _REG.codec("fix").encode({_FIX_TAGS[k]: v for k, v in f.items()}),
         _fix_decode, lambda f: f"/{_FIX_TAGS[f]}"),
    _flat("nvfix"),
    Kind("xml", lambda f: _REG.codec("xml").encode({"o": f}), _xml_decode, lambda f: f"/o/{f}"),
    _flat("msgpack"),
    _flat("bflat"),
    _flat("bson"),
    Kind(COMPOSITE, _composite_encode, _composite_decode, lambda f: f"/0/{f}"),
]
IDS = [k.name for k in KINDS]

TRANSPORT = """<Transports><Transport><Name>any</Name><Type>tcp</Type>
  <InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol></Transport></Transports>"""


def _raw(m) -> bytes:
    return bytes(m.get_data_raw())


def _sow(c, topic: str, flt: str | None = None, **opts: Any) -> list[bytes]:
    cmd = AMPS.Command("sow").set_topic(topic)
    if flt:
        cmd.set_filter(flt)
    if opts.get("orderby"):
        cmd.set_order_by(opts["orderby"])
    if opts.get("top_n") is not None:
        cmd.set_top_n(opts["top_n"])
    if opts.get("options"):
        cmd.set_options(opts["options"])
    if opts.get("bookmark"):
        cmd.set_bookmark(opts["bookmark"])
    return [_raw(m) for m in c.execute(cmd) if m.get_command() == "sow"]


class Box:
    """What an asynchronous command received, as (command, body), taken with a deadline."""

    def __init__(self) -> None:
        self.q: queue.Queue[tuple[str, bytes]] = queue.Queue()
        self.other: list[tuple[str, bytes]] = []  # arrived while another kind was awaited

    def __call__(self, m) -> None:
        self.q.put((m.get_command(), _raw(m)))

    def take(self, n: int, kind: str = "publish") -> list[bytes]:
        out = [body for command, body in self.other if command == kind][:n]
        for body in out:
            self.other.remove((kind, body))
        while len(out) < n:
            command, body = self.q.get(timeout=5)
            if command == kind:
                out.append(body)
            else:
                self.other.append((command, body))
        return out

    def rest(self, client, kind: str = "publish") -> list[bytes]:
        """After a flush round trip: what else arrived (nothing was left in flight)."""
        client.flush(5000)
        out = [body for command, body in self.other if command == kind]
        self.other = [x for x in self.other if x[0] != kind]
        while not self.q.empty():
            command, body = self.q.get_nowait()
            if command == kind:
                out.append(body)
        return out


# -- 1. one codec table per server -------------------------------------------------------------

def _pipe_config(sep: int | None) -> str:
    types = "" if sep is None else (
        f"<MessageTypes><MessageType><Name>fix</Name><FieldSeparator>{sep}</FieldSeparator>"
        "</MessageType></MessageTypes>")
    return f"""<AMPSConfig><Name>sep{sep}</Name>{types}{TRANSPORT}
<SOW><Topic><Name>O</Name><MessageType>fix</MessageType><Key>/11</Key>
  <Durability>transient</Durability></Topic></SOW></AMPSConfig>"""


def test_two_servers_in_one_process_read_with_their_own_codecs() -> None:
    """One server's ``fix`` splits on ``|``, the other's on SOH: each reads its own bodies by
    its own table, however the two start and interleave."""
    pipe, soh = start_server(_pipe_config(124)), start_server(_pipe_config(None))
    try:
        cp, cs = client_for(pipe, "pipe", "fix"), client_for(soh, "soh", "fix")
        cp.publish("O", "11=A|55=IBM|")
        cs.publish("O", "11=A\x0155=IBM\x01")
        cp.publish_flush()
        cs.publish_flush()
        assert _sow(cp, "O", "/55 = 'IBM'") == [b"11=A|55=IBM|"]
        assert _sow(cs, "O", "/55 = 'IBM'") == [b"11=A\x0155=IBM\x01"]
        # a server started after both does not change what the first two read
        third = start_server(_pipe_config(59))
        third.stop()
        cp.publish("O", "11=B|55=MSFT|")
        cp.publish_flush()
        assert _sow(cp, "O", "/55 = 'MSFT'") == [b"11=B|55=MSFT|"]
        assert _sow(cs, "O", "/55 = 'MSFT'") == []
        cp.close()
        cs.close()
    finally:
        pipe.stop()
        soh.stop()


def test_the_body_readers_have_no_module_state() -> None:
    import amps_emulator.protocol.bodies as bodies

    registries = [build_registry([MessageTypeDecl("fix", field_separator=sep)]) for sep in (124, 1)]
    one, two = (bodies.Bodies(r) for r in registries)
    assert one.decode_typed(b"55=IBM|", "fix") == {"55": "IBM"}
    assert two.decode_typed(b"55=IBM\x01", "fix") == {"55": "IBM"}
    assert not [n for n, v in vars(bodies).items()
                if not n.startswith("__") and isinstance(v, (dict, list, set, bodies.Bodies))]


# -- 2. queues of every type ------------------------------------------------------------------

def _queue_config(d) -> str:
    queues = "".join(
        f"""<Queue><Name>jobs</Name><MessageType>{k.name}</MessageType>
          <Filter>{k.path('n')} &gt; 10</Filter><Priority>{k.path('p')}</Priority>
          <MaxPerSubscriptionBacklog>1</MaxPerSubscriptionBacklog></Queue>
        <Queue><Name>gate</Name><MessageType>{k.name}</MessageType>
          <BarrierExpression>{k.path('g')} = 1</BarrierExpression>
          <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog></Queue>
        <Queue><Name>picks</Name><MessageType>{k.name}</MessageType>
          <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog></Queue>""" for k in KINDS)
    logged = "".join(f"<Topic><Name>.*</Name><MessageType>{k.name}</MessageType></Topic>"
                     for k in KINDS)
    return f"""<AMPSConfig><Name>queues</Name>{MESSAGE_TYPES}{TRANSPORT}
<TransactionLog><JournalDirectory>{d}/journal</JournalDirectory>{logged}
  <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
<SOW>{queues}</SOW></AMPSConfig>"""


@pytest.fixture(scope="module")
def queue_srv(tmp_path_factory):
    s = start_server(_queue_config(tmp_path_factory.mktemp("typed-queues")))
    yield s
    s.stop()


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_a_typed_queue_filters_prioritises_and_auto_acks(queue_srv, kind: Kind) -> None:
    pub = client_for(queue_srv, f"qpub-{kind.name}", kind.name)
    js = client_for(queue_srv, f"qjson-{kind.name}", "json")
    work = AMPS.Client(f"qwork-{kind.name}")
    try:
        bodies = [kind.body(k="a", n=5, p=1), kind.body(k="b", n=20, p=1),
                  kind.body(k="c", n=30, p=9), kind.body(k="d", n=40, p=5)]
        for b in bodies:
            pub.publish("jobs", b)
        js.publish("jobs", '{"n":50,"p":99}')  # the json topic "jobs": not this queue's
        pub.publish_flush()
        js.publish_flush()
        # the queue's Filter read the typed field: 5 stayed out; the rest, by Priority
        assert sorted(_sow(pub, "jobs")) == sorted(bodies[1:])
        work.connect(f"tcp://127.0.0.1:{queue_srv.server.listeners[0].port}/amps/{kind.name}")
        work.logon(5000)
        work.set_auto_ack(True)
        work.set_ack_batch_size(1)
        got = Box()
        work.subscribe(got, "jobs", options="max_backlog=1")
        # one at a time (max_backlog=1): each next one came because auto-ack acked the last
        assert got.take(3) == [bodies[2], bodies[3], bodies[1]]
    finally:
        for c in (pub, js, work):
            c.close()


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_a_typed_queue_barrier_and_a_subscriber_filter_on_a_tag(queue_srv, kind: Kind) -> None:
    pub = client_for(queue_srv, f"bpub-{kind.name}", kind.name)
    work = client_for(queue_srv, f"bwork-{kind.name}", kind.name)
    work.set_ack_batch_size(1)
    try:
        gate = [kind.body(k="1", n=1), kind.body(k="2", n=2), kind.body(k="3", n=3, g=1),
                kind.body(k="4", n=4)]
        held: queue.Queue[tuple[bytes, str]] = queue.Queue()  # (body, bookmark)
        work.subscribe(lambda m: held.put((_raw(m), m.get_bookmark()))
                       if m.get_command() == "publish" else None, "gate", options="max_backlog=10")
        for b in gate:
            pub.publish("gate", b)
        pub.publish_flush()
        first = [held.get(timeout=5) for _ in range(2)]
        assert [b for b, _ in first] == gate[:2]
        work.flush(5000)  # what the engine would deliver now has been sent: the barrier holds
        assert held.empty()
        for _, bookmark in first:
            work.ack("gate", bookmark)
        assert [held.get(timeout=5)[0] for _ in range(2)] == gate[2:]
        # a subscriber's content filter on a tag of the type
        picks = [kind.body(k=c, n=i) for i, c in enumerate("abcd")]
        for b in picks:
            pub.publish("picks", b)
        pub.publish_flush()
        got = Box()
        work.subscribe(got, "picks", f"{kind.path('k')} IN ('b', 'd')", options="max_backlog=10")
        assert got.take(2) == [picks[1], picks[3]]
        assert got.rest(work) == []
        # a sow query on the queue, filtered on a typed field: what nobody leased
        assert sorted(_sow(pub, "picks", f"{kind.path('n')} >= 0")) == sorted([picks[0], picks[2]])
        # an aggregated query over the queue, written in the queue's type
        agg = AMPS.Command("sow").set_topic("picks").set_options(
            f"grouping=[{kind.path('g')}],projection=[COUNT({kind.path('n')}) AS {kind.path('t')}]")
        (row,) = [kind.decode(_raw(m)) for m in pub.execute(agg) if m.get_command() == "sow"]
        assert _num(row["t"]) == 2.0
    finally:
        pub.close()
        work.close()


# -- 3, 4. views (also projected into another type), conflated topics, aggregation,
# pagination and History of every type ---------------------------------------------------------

def _derived_config(d) -> str:
    parts = []
    for k in KINDS:
        g, n, t = k.path("g"), k.path("n"), k.path("t")
        parts.append(f"""
  <Topic><Name>orders</Name><MessageType>{k.name}</MessageType><Key>{k.path('k')}</Key>
    <FileName>{d}/%n.sow</FileName>
    <History><Window>1d</Window><Granularity>0s</Granularity></History></Topic>
  <View><Name>totals</Name><MessageType>{k.name}</MessageType><UnderlyingTopic>orders</UnderlyingTopic>
    <Grouping><Field>{g}</Field></Grouping>
    <Projection><Field>{g}</Field><Field>SUM({n}) AS {t}</Field></Projection></View>
  <View><Name>totals-{k.name}</Name><MessageType>json</MessageType>
    <UnderlyingTopic>[{k.name}].[orders]</UnderlyingTopic>
    <Grouping><Field>[{k.name}].[orders].{g}</Field></Grouping>
    <Projection><Field>[{k.name}].[orders].{g} AS /g</Field>
      <Field>SUM([{k.name}].[orders].{n} * [{k.name}].[orders].{k.path('p')}) AS /cost</Field></Projection>
  </View>
  <View><Name>jtotals</Name><MessageType>{k.name}</MessageType>
    <UnderlyingTopic>[json].[jorders]</UnderlyingTopic>
    <Grouping><Field>[json].[jorders]./g</Field></Grouping>
    <Projection><Field>[json].[jorders]./g AS {g}</Field>
      <Field>COUNT([json].[jorders]./n) AS {k.path('c')}</Field>
      <Field>SUM([json].[jorders]./n) AS {t}</Field></Projection></View>
  <ConflatedTopic><Name>orders-c</Name><MessageType>{k.name}</MessageType>
    <UnderlyingTopic>orders</UnderlyingTopic><Interval>100ms</Interval></ConflatedTopic>""")
    logged = "".join(f"<Topic><Name>.*</Name><MessageType>{k.name}</MessageType></Topic>"
                     for k in KINDS)
    return f"""<AMPSConfig><Name>derived</Name>{MESSAGE_TYPES}{TRANSPORT}
<TransactionLog><JournalDirectory>{d}/journal</JournalDirectory>{logged}
  <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
<SOW><Topic><Name>jorders</Name><MessageType>json</MessageType><Key>/k</Key>
    <FileName>{d}/%n.sow</FileName></Topic>{"".join(parts)}
</SOW></AMPSConfig>"""


@pytest.fixture(scope="module")
def derived_srv(tmp_path_factory):
    s = start_server(_derived_config(tmp_path_factory.mktemp("typed-derived")))
    yield s
    s.stop()


def _num(v: Any) -> float:
    return float(v)


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_views_of_a_type_and_projected_across_types(derived_srv, kind: Kind) -> None:
    c = client_for(derived_srv, f"view-{kind.name}", kind.name)
    js = client_for(derived_srv, f"view-json-{kind.name}", "json")
    try:
        for b in (kind.body(k="A", g=7, n=10, p=2), kind.body(k="B", g=7, n=5, p=4),
                  kind.body(k="C", g=8, n=1, p=1)):
            c.publish("orders", b)
        c.publish_flush()
        # a view of the type, its records written in the type
        view = {kind.decode(b)["g"]: kind.decode(b) for b in _sow(c, "totals")}
        assert {g: _num(v["t"]) for g, v in view.items()} == {7: 15.0, 8: 1.0}
        # the same topic projected into json (A.5, scenario 11): [type].[topic]./path
        totals = sorted((json.loads(b)["g"], json.loads(b)["cost"]) for b in _sow(js, f"totals-{kind.name}"))
        assert totals == [(7, 40), (8, 1)]
        # a json topic projected into the type
        base = 10 * (IDS.index(kind.name) + 1)  # (the json topic is shared by the kinds)
        for i, (g, n) in enumerate([(base + 1, 3), (base + 1, 4), (base + 2, 9)]):
            js.publish("jorders", json.dumps({"k": f"{kind.name}{i}", "g": g, "n": n}))
        js.publish_flush()
        jt = {kind.decode(b)["g"]: kind.decode(b) for b in _sow(c, "jtotals")}
        assert {g: (_num(v["c"]), _num(v["t"])) for g, v in jt.items()
                if g in (base + 1, base + 2)} == {base + 1: (2.0, 7.0), base + 2: (1.0, 9.0)}
        # a subscriber of the view gets each change in the type; the json view of the
        # same topic name is another topic
        got = Box()
        c.subscribe(got, "totals")
        c.publish("orders", kind.body(k="C", g=8, n=6, p=1))
        c.publish_flush()
        (update,) = got.take(1)
        assert _num(kind.decode(update)["t"]) == 6.0
        with pytest.raises(AMPS.AMPSException):
            _sow(js, "totals")  # no json view named totals
    finally:
        c.close()
        js.close()


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_a_conflated_topic_of_a_type_keeps_the_latest_bytes(derived_srv, kind: Kind) -> None:
    c = client_for(derived_srv, f"confl-{kind.name}", kind.name)
    try:
        got = Box()
        c.subscribe(got, "orders-c", f"{kind.path('k')} = 'Z'")
        bodies = [kind.body(k="Z", g=1, n=i) for i in range(5)]
        for b in bodies:
            c.publish("orders", b)
        c.publish_flush()
        seen = []
        while not seen or seen[-1] != bodies[-1]:
            seen += got.take(1)
        assert set(seen) <= set(bodies) and len(seen) < len(bodies)  # conflated, byte-identical
        assert _sow(c, "orders-c", f"{kind.path('k')} = 'Z'") == [bodies[-1]]
    finally:
        c.close()


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_aggregation_pagination_and_history_on_a_type(derived_srv, kind: Kind) -> None:
    c = client_for(derived_srv, f"agg-{kind.name}", kind.name)
    try:
        rows = [kind.body(k=f"r{i}", g=i % 2, n=n, s=f"x{i}") for i, n in enumerate([9, 100, 20, 3])]
        for b in rows:
            c.publish("orders", b)
        c.publish_flush()
        where = f"{kind.path('s')} BEGINS WITH 'x'"
        # pagination: orderby a typed field sorts numerically (100 after 20 descending, not
        # as text), top_n and skip_n
        assert _sow(c, "orders", where, orderby=f"{kind.path('n')} DESC", top_n=2) == [rows[1], rows[2]]
        page2 = AMPS.Command("sow").set_topic("orders").set_filter(where) \
            .set_order_by(f"{kind.path('n')} ASC").set_options("skip_n=1,top_n=2")
        assert [_raw(m) for m in c.execute(page2) if m.get_command() == "sow"] == [rows[0], rows[2]]
        # an aggregated query and subscription: the groups written in the topic's type
        g, n, t = kind.path("g"), kind.path("n"), kind.path("t")
        agg = AMPS.Command("sow_and_subscribe").set_topic("orders").set_filter(where) \
            .set_options(f"grouping=[{g}],projection=[{g},SUM({n}) AS {t}]")
        box = Box()
        c.execute_async(agg, box)
        first = {kind.decode(b)["g"]: _num(kind.decode(b)["t"]) for b in box.take(2, "sow")}
        assert first == {0: 29.0, 1: 103.0}
        c.publish("orders", kind.body(k="r3", g=1, n=4, s="x3"))
        c.publish_flush()
        (changed,) = box.take(1)
        assert (kind.decode(changed)["g"], _num(kind.decode(changed)["t"])) == (1, 104.0)
        # History: the state as of a time before the change, read with the type's filter
        ts = max(m.get_timestamp() for m in c.execute(
            AMPS.Command("sow").set_topic("orders").set_filter(where).set_options("timestamp"))
            if m.get_command() == "sow" and m.get_data_raw() != kind.body(k="r3", g=1, n=4, s="x3"))
        c.publish("orders", kind.body(k="r0", g=0, n=1000, s="x0"))
        c.publish_flush()
        then = _sow(c, "orders", f"{where} AND {n} > 50", bookmark=ts)
        now = _sow(c, "orders", f"{where} AND {n} > 50")
        assert then == [rows[1]]
        assert sorted(now) == sorted([rows[1], kind.body(k="r0", g=0, n=1000, s="x0")])
    finally:
        c.close()


# -- 6. OOF (match, delete, expire) and select lists on typed bodies --------------------------

def _oof_config(d) -> str:
    topics = "".join(
        f"""<Topic><Name>oofs</Name><MessageType>{k.name}</MessageType><Key>{k.path('k')}</Key>
          <Expiration>enabled</Expiration><FileName>{d}/%n.sow</FileName></Topic>""" for k in KINDS)
    return f"""<AMPSConfig><Name>oof</Name>{MESSAGE_TYPES}{TRANSPORT}<SOW>{topics}</SOW></AMPSConfig>"""


@pytest.fixture(scope="module")
def oof_srv(tmp_path_factory):
    s = start_server(_oof_config(tmp_path_factory.mktemp("typed-oof")))
    yield s
    s.stop()


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_oof_and_select_lists_on_a_type(oof_srv, kind: Kind) -> None:
    c = client_for(oof_srv, f"oof-{kind.name}", kind.name)
    try:
        k, n = kind.path("k"), kind.path("n")
        for key, num in (("A", 20), ("B", 30)):
            c.publish("oofs", kind.body(k=key, n=num, x="drop"))
        c.execute(AMPS.Command("publish").set_topic("oofs").set_expiration(1)
                  .set_data(kind.body(k="E", n=40, x="drop")))
        c.publish_flush()
        box = Box()
        sub = AMPS.Command("sow_and_subscribe").set_topic("oofs").set_filter(f"{n} > 10") \
            .set_options(f"oof,select=[-/,+{k},+{n}]")
        c.execute_async(sub, box)
        # the select list, written in the type: the key and the number, not x
        assert sorted(kind.decode(b)["k"] for b in box.take(3, "sow")) == ["A", "B", "E"]
        c.publish("oofs", kind.body(k="A", n=5, x="drop"))  # out of the filter: oof match
        c.publish("oofs", kind.body(k="C", n=50, x="drop"))  # in: a selected publish
        c.publish_flush()
        (pub,) = box.take(1)
        assert kind.decode(pub) == {"k": "C", "n": 50}
        c.sow_delete("oofs", f"{k} = 'B'")  # oof deleted
        oofs = box.take(3, "oof")  # ... and E expires: oof expired
        assert sorted((kind.decode(b)["k"], kind.decode(b)["n"]) for b in oofs) == [
            ("A", 5), ("B", 30), ("E", 40)]
        assert all(set(kind.decode(b)) == {"k", "n"} for b in oofs)
        # a select list on a query and on a sow_delete by data of the type
        assert [kind.decode(b) for b in _sow(c, "oofs", f"{k} = 'C'", options=f"select=[-/,+{n}]")] \
            == [{"n": 50}]
        c.execute(AMPS.Command("sow_delete").set_topic("oofs")
                  .set_data(kind.body(k="C", n=50, x="drop")).add_ack_type("completed"))
        assert _sow(c, "oofs", f"{k} = 'C'") == []
    finally:
        c.close()


# -- 5. /AMPS/ topics in the subscribing connection's type -------------------------------------

#: how each type names the ClientStatus and SOWStats fields (User Guide, "Event Topics")
_EVENT_PATHS = {
    "fix": {"client_name": "/20067", "event": "/20066", "topic": "/20068", "sub_id": "/20070",
            "stats_topic": "/20066", "records": "/20067", "stats_type": "/20007"},
    "nvfix": {"client_name": "/client_name", "event": "/event", "topic": "/topic",
              "sub_id": "/sub_id", "stats_topic": "/topic", "records": "/record_count",
              "stats_type": "/message_type"},
    "xml": {"client_name": "/ClientStatus/ClientName", "event": "/ClientStatus/Event",
            "topic": "/ClientStatus/Tpc", "sub_id": "/ClientStatus/SubId",
            "stats_topic": "/SOWStats/Topic", "records": "/SOWStats/Records",
            "stats_type": "/SOWStats/MessageType"},
    "msgpack": {"client_name": "/ClientStatus/client_name", "event": "/ClientStatus/event",
                "topic": "/ClientStatus/topic", "sub_id": "/ClientStatus/sub_id",
                "stats_topic": "/SOWStats/topic", "records": "/SOWStats/record_count",
                "stats_type": "/SOWStats/message_type"},
}
_EVENT_PATHS["json"] = _EVENT_PATHS["msgpack"]
_EVENT_PATHS["bson"] = _EVENT_PATHS["msgpack"]
_EVENT_PATHS["bflat"] = _EVENT_PATHS["nvfix"]
EVENT_TYPES = ["fix", "nvfix", "xml", "msgpack", "json", "bflat", "bson"]


def _field(tree: Any, path: str) -> Any:
    for step in path.strip("/").split("/"):
        tree = tree[step]
    return tree


def _events_config(d) -> str:
    return f"""<AMPSConfig><Name>events</Name><SOWStatsInterval>200ms</SOWStatsInterval>
{TRANSPORT}<SOW>
  <Topic><Name>orders</Name><MessageType>nvfix</MessageType><Key>/k</Key>
    <Durability>transient</Durability></Topic>
  <Topic><Name>/AMPS/SOWStats</Name><MessageType>fix</MessageType><Key>/20066</Key>
    <Durability>transient</Durability></Topic>
</SOW></AMPSConfig>"""


@pytest.fixture(scope="module")
def events_srv(tmp_path_factory):
    s = start_server(_events_config(tmp_path_factory.mktemp("events")))
    yield s
    s.stop()


@pytest.mark.parametrize("mt", EVENT_TYPES)
def test_client_status_arrives_in_the_connections_type(events_srv, mt: str) -> None:
    paths = _EVENT_PATHS[mt]
    codec = _REG.codec(mt)
    watcher = client_for(events_srv, f"watcher-{mt}", mt)
    try:
        got = Box()
        # a content filter on the event's own field names, as the type spells them
        watcher.subscribe(got, "/AMPS/ClientStatus", f"{paths['client_name']} = 'watched-{mt}'")
        watched = client_for(events_srv, f"watched-{mt}", "nvfix")
        watched.subscribe(lambda m: None, "orders", sub_id="s1")
        watched.execute(AMPS.Command("sow").set_topic("orders"))
        watched.close()
        events = [codec.decode(b) for b in got.take(5)]
        assert [_field(e, paths["event"]) for e in events] == [
            "logon", "subscribe", "sow", "unsubscribe", "disconnect"]
        assert all(_field(e, paths["client_name"]) == f"watched-{mt}" for e in events)
        assert [_field(events[i], paths["topic"]) for i in (1, 2, 3)] == ["orders"] * 3
        assert _field(events[1], paths["sub_id"]) == "s1"
    finally:
        watcher.close()


def test_a_binary_connection_gets_no_event_topic_messages(events_srv) -> None:
    binary = client_for(events_srv, "binary-watcher", "binary")
    json_watch = client_for(events_srv, "json-watcher", "json")
    try:
        nothing, some, catch_all, internal = Box(), Box(), Box(), Box()
        binary.subscribe(nothing, "/AMPS/ClientStatus")
        json_watch.subscribe(some, "/AMPS/ClientStatus", "/ClientStatus/client_name = 'seen'")
        # a regex reaches the event topics only when it names them [unverified]
        json_watch.subscribe(catch_all, ".*", "/ClientStatus/client_name = 'seen'")
        json_watch.subscribe(internal, "^/AMPS/.*", "/ClientStatus/client_name = 'seen'")
        client_for(events_srv, "seen", "json").close()
        assert len(some.take(2)) == 2  # logon, disconnect
        assert len(internal.take(2)) == 2
        assert nothing.rest(binary) == []
        assert catch_all.rest(json_watch) == []
    finally:
        binary.close()
        json_watch.close()


@pytest.mark.parametrize("mt", EVENT_TYPES)
def test_sow_stats_arrive_in_the_connections_type_and_a_sow_topic_keeps_them(events_srv,
                                                                          mt: str) -> None:
    paths = _EVENT_PATHS[mt]
    codec = _REG.codec(mt)
    c = client_for(events_srv, f"stats-{mt}", mt)
    pub = client_for(events_srv, f"stats-pub-{mt}", "nvfix")
    try:
        pub.publish("orders", f"k={mt}\x01n=1\x01")
        pub.publish_flush()
        got = Box()
        c.subscribe(got, "/AMPS/SOWStats", f"{paths['stats_topic']} = 'orders'")
        (stats,) = [codec.decode(b) for b in got.take(1)]
        assert _field(stats, paths["stats_type"]) == "nvfix"
        assert int(_field(stats, paths["records"])) >= 1
        # the fix SOW topic /AMPS/SOWStats keeps the latest per topic (Key /20066)
        fix = client_for(events_srv, f"stats-fix-{mt}", "fix")
        stored = {r["20066"]: r for r in map(_REG.codec("fix").decode, _sow(fix, "/AMPS/SOWStats"))}
        fix.close()
        assert stored["orders"]["20007"] == "nvfix"
    finally:
        c.close()
        pub.close()


# -- replication: a Destination's Filter reads a typed record with the instance's codecs --------

def _repl_node(name: str, d, *, listen: int | None = None, dest: int | None = None) -> str:
    repl = "" if listen is None else (
        f"<Transport><Name>repl</Name><Type>amps-replication</Type>"
        f"<InetAddr>127.0.0.1:{listen}</InetAddr></Transport>")
    destination = "" if dest is None else f"""<Replication><Destination>
        <Name>B</Name><Group>B</Group><SyncType>async</SyncType>
        <Topic><Name>orders</Name><MessageType>nvfix</MessageType><Filter>/x = 'yes'</Filter>
          <ExcludeValidation>replicate</ExcludeValidation></Topic>
        <Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:{dest}</InetAddr>
          <ReconnectTimeout>0.05</ReconnectTimeout></Transport></Destination></Replication>"""
    return f"""<AMPSConfig><Name>{name}</Name>
<Transports><Transport><Name>any</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
  <Protocol>amps</Protocol></Transport>{repl}</Transports>
<TransactionLog><JournalDirectory>{d}/journal</JournalDirectory>
  <Topic><Name>.*</Name><MessageType>nvfix</MessageType></Topic></TransactionLog>
{destination}</AMPSConfig>"""


def test_a_replication_filter_reads_a_typed_record(tmp_path) -> None:
    from tests.support.procserver import free_port

    port = free_port()
    b = start_server(_repl_node("B", tmp_path / "b", listen=port))
    a = start_server(_repl_node("A", tmp_path / "a", dest=port))
    try:
        sub = client_for(b, "on-b", "nvfix")
        got = Box()
        sub.subscribe(got, "orders")
        pub = client_for(a, "on-a", "nvfix")
        bodies = [b"k=1\x01x=yes\x01", b"k=2\x01x=no\x01", b"k=3\x01x=yes\x01"]
        for body in bodies:
            pub.publish("orders", body)
        pub.publish_flush()
        assert got.take(2) == [bodies[0], bodies[2]]  # in order: k=2 was not sent
        pub.close()
        sub.close()
    finally:
        a.stop()
        b.stop()


# -- a paginated subscription and a conflated delta subscription on a type ---------------------

@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_a_paginated_window_and_a_conflated_delta_subscription_on_a_type(oof_srv, kind: Kind) -> None:
    c = client_for(oof_srv, f"page-{kind.name}", kind.name)
    try:
        k, n = kind.path("k"), kind.path("n")
        rows = {key: kind.body(k=key, n=num, x="p") for key, num in (("P1", 100), ("P2", 300), ("P3", 200))}
        for b in rows.values():
            c.publish("oofs", b)
        c.publish_flush()
        window = Box()
        page = AMPS.Command("sow_and_subscribe").set_topic("oofs") \
            .set_filter(f"{k} BEGINS WITH 'P'").set_order_by(f"{n} DESC").set_top_n(2) \
            .set_options(f"select=[-/,+{k},+{n}]")
        c.execute_async(page, window)
        assert [kind.decode(b) for b in window.take(2, "sow")] == [
            {"k": "P2", "n": 300}, {"k": "P3", "n": 200}]
        c.publish("oofs", kind.body(k="P4", n=250, x="p"))  # enters the window, written selected
        c.publish_flush()
        assert [kind.decode(b) for b in window.take(1)] == [{"k": "P4", "n": 250}]
        # a delta subscription conflated over 100ms: one merged delta, in the type
        deltas = Box()
        c.execute_async(AMPS.Command("delta_subscribe").set_topic("oofs")
                        .set_filter(f"{k} = 'P1'").set_options("conflation=100ms"), deltas)
        c.publish("oofs", kind.body(k="P1", n=101, x="p"))
        c.publish("oofs", kind.body(k="P1", n=102, x="q"))
        c.publish_flush()
        (merged,) = deltas.take(1)
        assert kind.decode(merged) == {"k": "P1", "n": 102, "x": "q"}
        c.publish("oofs", kind.body(k="P1", n=103, x="q"))
        c.publish_flush()
        assert [kind.decode(b) for b in deltas.take(1)] == [{"k": "P1", "n": 103}]
    finally:
        c.close()


# -- entitlement filters read a typed body with the type's codec ------------------------------

def test_entitlement_read_and_write_filters_on_a_typed_topic(tmp_path) -> None:
    from tests.support.entitlements import serve, web_config, with_user

    xml = web_config(tmp_path, {
        "alice": {"topic": [{"topic": "test", "read": "/x = 'ok'", "write": "/x = 'ok'"}]},
        "admin": {"topic": [{"topic": ".*", "read": True, "write": True}]}}, sow=False)
    xml = xml.replace("<MessageType>json</MessageType>", "")  # one transport of every type
    srv = serve(tmp_path, xml)
    try:
        def nvfix(user: str):
            c = AMPS.Client(user)
            c.connect(with_user(srv.uri, user).rsplit("/amps", 1)[0] + "/amps/nvfix")
            c.logon(5000)
            return c

        alice, admin = nvfix("alice"), nvfix("admin")
        got = Box()
        alice.subscribe(got, "test")
        alice.execute(AMPS.Command("publish").set_topic("test").set_data("k=1\x01x=ok\x01")
                      .add_ack_type("processed"))
        with pytest.raises(AMPS.NotEntitledException):
            alice.execute(AMPS.Command("publish").set_topic("test").set_data("k=2\x01x=no\x01")
                          .add_ack_type("processed"))
        admin.publish("test", "k=3\x01x=no\x01")  # hidden from alice by her read filter
        admin.publish("test", "k=4\x01x=ok\x01")
        admin.publish_flush()
        assert got.take(2) == [b"k=1\x01x=ok\x01", b"k=4\x01x=ok\x01"]
        alice.close()
        admin.close()
    finally:
        srv.stop()


# -- the types AMPS serves with limits: protobuf (proto2 and proto3), struct, composite-global --
# What the User Guide's message-types chapter says they support works (filters, SOW keys,
# queues, pagination, History, OOF, bookmark replay; delta on proto2; select lists on proto3);
# what it says they do not is refused as the emulator documents it (a View of the type stops
# the start-up; aggregation and select lists get "invalid options"; /AMPS/ topics carry
# nothing to them; delta on a type without it stores and delivers whole messages).

LIMITED_PROTO = """syntax = "{syntax}";
package lim;
message Row {{ {opt}string k = 1; {opt}int64 n = 2; {opt}int64 g = 3; {opt}string x = 4; }}
"""


@dataclass(frozen=True)
class Limited:
    name: str
    delta: bool  # AMPS merges deltas of the type
    select: bool  # AMPS offers select lists on the type


LIMITED = [Limited("rows-pb2", delta=True, select=False), Limited("rows-pb3", delta=False, select=True),
           Limited("rows-st", delta=False, select=False), Limited("rows-cg", delta=False, select=False)]
LIMITED_IDS = [k.name for k in LIMITED]


def _limited_types(d) -> str:
    for syntax in ("proto2", "proto3"):
        (d / f"{syntax}.proto").write_text(LIMITED_PROTO.format(
            syntax=syntax, opt="optional " if syntax == "proto2" else ""))
    return f"""<MessageTypes>
  <MessageType><Name>rows-pb2</Name><Module>protobuf</Module><ProtoPath>{d}</ProtoPath>
    <ProtoFile>proto2.proto</ProtoFile><Type>lim.Row</Type></MessageType>
  <MessageType><Name>rows-pb3</Name><Module>protobuf</Module><ProtoPath>{d}</ProtoPath>
    <ProtoFile>proto3.proto</ProtoFile><Type>lim.Row</Type></MessageType>
  <MessageType><Name>rows-st</Name><Module>struct</Module>
    <Field>/k = 4s</Field><Field>/n = i</Field><Field>/g = i</Field><Field>/x = 4s</Field></MessageType>
  <MessageType><Name>rows-cg</Name><Module>composite-global</Module>
    <MessageType>json</MessageType><MessageType>json</MessageType></MessageType>
</MessageTypes>"""


@pytest.fixture(scope="module")
def limited_srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("limited")
    topics = "".join(f"""
  <Topic><Name>rows</Name><MessageType>{k.name}</MessageType><Key>/k</Key>
    <FileName>{d}/%n.sow</FileName><History><Window>1d</Window><Granularity>0s</Granularity></History></Topic>
  <Queue><Name>work</Name><MessageType>{k.name}</MessageType><Filter>/n &gt; 6</Filter>
    <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog></Queue>""" for k in LIMITED)
    logged = "".join(f"<Topic><Name>.*</Name><MessageType>{k.name}</MessageType></Topic>"
                     for k in LIMITED)
    s = start_server(f"""<AMPSConfig><Name>limited</Name>{_limited_types(d)}{TRANSPORT}
<TransactionLog><JournalDirectory>{d}/journal</JournalDirectory>{logged}</TransactionLog>
<SOW>{topics}</SOW></AMPSConfig>""")
    yield s
    s.stop()


def _limited_body(srv, mt: str, **f: Any) -> bytes:
    if mt == "rows-cg":  # the key and number in one json part, the rest in the other
        first = {n: f[n] for n in ("k", "n") if n in f}
        rest = {n: v for n, v in f.items() if n not in first}
        return join_parts([json.dumps(first).encode(), json.dumps(rest).encode()])
    if mt == "rows-st":
        f = {"g": 0, "x": "", **f}
    return srv.server.broker.bodies.codec(mt).encode(f)


def _limited_decode(srv, mt: str, body: bytes) -> dict[str, Any]:
    return dict(srv.server.broker.bodies.codec(mt).decode(bytes(body)))


@pytest.mark.parametrize("kind", LIMITED, ids=LIMITED_IDS)
def test_a_limited_type_serves_filters_keys_queues_pages_history_and_replay(limited_srv,
                                                                            kind: Limited) -> None:
    mt = kind.name
    c = client_for(limited_srv, f"lim-{mt}", mt)
    try:
        live = Box()
        c.subscribe(live, "rows", "/n > 6")
        a5, b7 = _limited_body(limited_srv, mt, k="A", n=5), _limited_body(limited_srv, mt, k="B", n=7)
        for b in (a5, b7):
            c.publish("rows", b)
        c.publish_flush()
        ts = max(m.get_timestamp() for m in c.execute(
            AMPS.Command("sow").set_topic("rows").set_options("timestamp"))
            if m.get_command() == "sow")
        a9 = _limited_body(limited_srv, mt, k="A", n=9)
        c.publish("rows", a9)
        c.publish_flush()
        assert live.take(2) == [b7, a9]  # a content filter on a typed field, bytes as sent
        assert sorted(_sow(c, "rows")) == sorted([a9, b7])  # keyed: the latest per key
        assert _sow(c, "rows", "/n > 0", orderby="/n DESC", top_n=1) == [a9]  # pagination
        assert sorted(_sow(c, "rows", "/n > 0", bookmark=ts)) == sorted([a5, b7])  # History
        replay = Box()
        c.bookmark_subscribe(replay, "rows", "0")
        assert replay.take(3) == [a5, b7, a9]  # byte-identical replay
        # a queue of the type: its Filter reads the typed field
        for b in (a5, b7, a9):
            c.publish("work", b)
        c.publish_flush()
        assert sorted(_sow(c, "work")) == sorted([b7, a9])
        got = Box()
        c.subscribe(got, "work", "/k = 'A'", options="max_backlog=10")
        assert got.take(1) == [a9]
    finally:
        c.close()


@pytest.mark.parametrize("kind", LIMITED, ids=LIMITED_IDS)
def test_a_limited_type_refuses_aggregation_and_select_lists_as_documented(limited_srv,
                                                                            kind: Limited) -> None:
    mt = kind.name
    c = client_for(limited_srv, f"lim-refuse-{mt}", mt)
    try:
        c.publish("rows", _limited_body(limited_srv, mt, k="S", n=3, x="drop"))
        c.publish_flush()
        for command in ("sow", "sow_and_subscribe"):
            with pytest.raises(AMPS.InvalidOptionsException):
                c.execute(AMPS.Command(command).set_topic("rows")
                          .set_options("grouping=[/k],projection=[/k,SUM(/n) AS /n]"))
        if kind.select:
            (selected,) = _sow(c, "rows", "/k = 'S'", options="select=[-/,+/k,+/n]")
            # (proto3 reads unset fields as their defaults: compare the bytes written)
            assert selected == _limited_body(limited_srv, mt, k="S", n=3)
        else:
            with pytest.raises(AMPS.InvalidOptionsException):
                _sow(c, "rows", "/k = 'S'", options="select=[-/,+/k,+/n]")
        # /AMPS/ topics: the server builds no message of the type (nothing, not an error)
        events = Box()
        c.subscribe(events, "/AMPS/ClientStatus")
        client_for(limited_srv, f"lim-seen-{mt}", "json").close()
        assert events.rest(c) == []
    finally:
        c.close()


@pytest.mark.parametrize("kind", LIMITED, ids=LIMITED_IDS)
def test_delta_on_a_limited_type_merges_only_where_amps_does(limited_srv, kind: Limited) -> None:
    mt = kind.name
    c = client_for(limited_srv, f"lim-delta-{mt}", mt)
    try:
        c.publish("rows", _limited_body(limited_srv, mt, k="D", n=1, x="old"))
        c.publish_flush()
        deltas = Box()
        c.delta_subscribe(deltas, "rows", "/k = 'D'")
        delta = _limited_body(limited_srv, mt, k="D", n=2)
        c.delta_publish("rows", delta)
        c.publish_flush()
        (stored,) = _sow(c, "rows", "/k = 'D'")
        (got,) = deltas.take(1)
        if kind.delta:  # merged: the stored x kept; the subscriber gets what changed
            assert _limited_decode(limited_srv, mt, stored) == {"k": "D", "n": 2, "x": "old"}
            assert _limited_decode(limited_srv, mt, got) == {"k": "D", "n": 2}
        else:  # the delta is the message: stored and delivered whole, as published
            assert stored == got == delta
    finally:
        c.close()


@pytest.mark.parametrize("mt", [*LIMITED_IDS, "binary"])
def test_a_view_of_a_type_amps_cannot_build_stops_the_start_up(tmp_path, mt: str) -> None:
    from amps_emulator.config import ConfigError, loads_config

    xml = f"""<AMPSConfig><Name>v</Name>{_limited_types(tmp_path)}{TRANSPORT}<SOW>
<Topic><Name>o</Name><MessageType>json</MessageType><Key>/k</Key><Durability>transient</Durability></Topic>
<View><Name>v</Name><MessageType>{mt}</MessageType><UnderlyingTopic>[json].[o]</UnderlyingTopic>
  <Grouping><Field>/g</Field></Grouping><Projection><Field>/g</Field></Projection></View>
</SOW></AMPSConfig>"""
    with pytest.raises(ConfigError) as e:
        loads_config(xml, "views.xml")
    line = 1 + xml.split("\n").index(next(x for x in xml.split("\n") if x.startswith("<View>")))
    assert f"views.xml:{line}:" in str(e.value) and "cannot be a view's type" in str(e.value)
    # the same type may underlie a view of another type
    if mt != "binary":
        ok = xml.replace(f"<MessageType>{mt}</MessageType><UnderlyingTopic>[json].[o]",
                         f"<MessageType>json</MessageType><UnderlyingTopic>[{mt}].[o]").replace(
            "<Topic><Name>o</Name><MessageType>json</MessageType>",
            f"<Topic><Name>o</Name><MessageType>{mt}</MessageType>")
        loads_config(ok, "views.xml")
