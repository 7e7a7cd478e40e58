"""Every message type served through the server, tested with the official Python client.

Per type (docs/design/beyond-json.md A.3/A.8): pub/sub with a content filter on a typed field, a keyed SOW
(latest per key), delta merge where AMPS offers it, bookmark replay byte-identical, and type
scoping (the same topic name over json is another topic). Bodies are built with the type's
own codec (the codecs have their own unit and property tests); what the server delivers is
compared byte for byte with what was published.
"""

from __future__ import annotations

import queue
import struct
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from amps_emulator.protocol.msgtypes import MessageTypeDecl, build_registry
from tests.support.clients import client_for, uri_for
from tests.support.samples import SAMPLES, Program
from tests.support.servers import start_server

AMPS = pytest.importorskip("AMPS")

_REG = build_registry([MessageTypeDecl("composite-json-binary", module="composite-local",
                                       parts=("json", "binary"))])


def _composite(tree: dict) -> bytes:
    part = _REG.codec("json").encode(tree)
    blob = bytes(range(7))
    return struct.pack(">I", len(part)) + part + struct.pack(">I", len(blob)) + blob


@dataclass
class Kind:
    name: str
    #: a body with key ``k`` and numeric field ``n`` (and optional extra fields)
    body: Callable[..., bytes]
    key: str  # the SOW Key
    num: str  # the path of ``n`` in a filter
    delta: bool = True


def _flat(name: str) -> Callable[..., bytes]:
    codec = _REG.codec(name)
    return lambda k, n, **more: codec.encode({"k": k, "n": n, **more})


KINDS = [
    Kind("fix", lambda k, n, **more: _REG.codec("fix").encode(
        {"11": k, "38": n, **{str(58 + i): v for i, v in enumerate(more.values())}}), "/11", "/38"),
    Kind("nvfix", _flat("nvfix"), "/k", "/n"),
    Kind("xml", lambda k, n, **more: _REG.codec("xml").encode({"o": {"k": k, "n": n, **more}}),
         "/o/k", "/o/n"),
    Kind("msgpack", _flat("msgpack"), "/k", "/n"),
    Kind("bflat", _flat("bflat"), "/k", "/n"),
    Kind("composite-json-binary", lambda k, n, **more: _composite({"k": k, "n": n, **more}),
         "/0/k", "/0/n"),
]

CONFIG = """<AMPSConfig><Name>msgtypes</Name>
<MessageTypes>
  <MessageType><Name>composite-json-binary</Name><Module>composite-local</Module>
    <MessageType>json</MessageType><MessageType>binary</MessageType></MessageType>
</MessageTypes>
<Transports>
  <Transport><Name>any</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol></Transport>
  <Transport><Name>json-only</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <Protocol>amps</Protocol><MessageType>json</MessageType></Transport>
</Transports>
<TransactionLog><JournalDirectory>{d}/journal</JournalDirectory>
  {txlog}
</TransactionLog>
<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/k</Key><FileName>{d}/%n.sow</FileName></Topic>
  {sow}
</SOW>
<Admin><InetAddr>127.0.0.1:0</InetAddr></Admin>
</AMPSConfig>"""


@pytest.fixture(scope="module")
def typed_srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("msgtypes")
    txlog = "\n".join(f"<Topic><Name>.*</Name><MessageType>{k.name}</MessageType></Topic>"
                      for k in KINDS) + "<Topic><Name>.*</Name><MessageType>json</MessageType></Topic>"
    sow = "\n".join(f"<Topic><Name>orders</Name><MessageType>{k.name}</MessageType>"
                    f"<Key>{k.key}</Key><FileName>{d}/%n.sow</FileName></Topic>"
                    f"<Topic><Name>keyless</Name><MessageType>{k.name}</MessageType>"
                    f"<Key>{k.key}</Key><Key>{k.num}</Key><FileName>{d}/%n.sow</FileName></Topic>"
                    for k in KINDS)
    s = start_server(CONFIG.format(d=d, txlog=txlog, sow=sow))
    yield s
    s.stop()


def _sow(c, topic: str, flt: str | None = None) -> list[bytes]:
    cmd = AMPS.Command("sow").set_topic(topic)
    if flt:
        cmd.set_filter(flt)
    return [m.get_data_raw() for m in c.execute(cmd) if m.get_command() == "sow"]


def _raw(m) -> bytes:
    return bytes(m.get_data_raw())


class Box:
    """Messages a subscription received, taken with a deadline (no sleeping)."""

    def __init__(self) -> None:
        self.q: queue.Queue[bytes] = queue.Queue()

    def __call__(self, m) -> None:
        if m.get_command() == "publish":
            self.q.put(_raw(m))

    def take(self, n: int) -> list[bytes]:
        return [self.q.get(timeout=5) for _ in range(n)]

    def empty(self) -> bool:
        return self.q.empty()


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_type(typed_srv, kind: Kind) -> None:
    topic = "orders"
    c = client_for(typed_srv, f"pub-{kind.name}", kind.name)
    js = client_for(typed_srv, f"json-{kind.name}", "json")
    try:
        filtered, alljs = Box(), Box()
        c.subscribe(filtered, topic, f"{kind.num} > 100")
        js.subscribe(alljs, topic)
        a1, b1, a2 = kind.body("A", 150), kind.body("B", 99), kind.body("A", 200)
        for body in (a1, b1, a2):
            c.publish(topic, body)
        c.publish_flush()
        # filter on a typed field: 150 and 200 pass, 99 does not; bytes as published
        assert filtered.take(2) == [a1, a2]
        # keyed SOW: the latest per key, byte-identical
        assert sorted(map(bytes, _sow(c, topic))) == sorted([a2, b1])
        assert [bytes(b) for b in _sow(c, topic, f"{kind.num} > 100")] == [a2]
        # type scoping: the json topic of the same name saw none of it
        js.publish(topic, '{"k":"A","n":1}')
        js.publish_flush()
        assert alljs.take(1) == [b'{"k":"A","n":1}']
        assert filtered.empty()
        assert [bytes(b) for b in _sow(js, topic)] == [b'{"k":"A","n":1}']
        # bookmark replay from the start: every publish of this type, byte-identical
        replay = Box()
        c.bookmark_subscribe(replay, topic, "0")
        assert replay.take(3) == [a1, b1, a2]
        # delta merge: the stored record keeps its fields and takes the delta's; a delta
        # subscriber receives what changed plus the key (not the unchanged n)
        if kind.delta:
            deltas = Box()
            c.delta_subscribe(deltas, topic)
            delta = kind.body("A", 200, x="y")
            c.delta_publish(topic, delta)
            c.publish_flush()
            codec = _REG.codec(kind.name)
            (merged,) = _sow(c, topic, f"{kind.num} = 200")
            assert "'y'" in repr(codec.decode(bytes(merged)))
            (got,) = deltas.take(1)
            tree = repr(codec.decode(got))
            assert "'y'" in tree and "'A'" in tree and "200" not in tree
    finally:
        c.close()
        js.close()


def _partial(kind: Kind, **fields: object) -> bytes:
    """A body of ``kind`` with only the given logical fields (``k``, ``n``, ``x``)."""
    if kind.name == "fix":
        tags = {"k": "11", "n": "38", "x": "58"}
        return _REG.codec("fix").encode({tags[f]: v for f, v in fields.items()})
    if kind.name == "xml":
        return _REG.codec("xml").encode({"o": fields})
    if kind.name.startswith("composite"):
        return _composite(fields)
    return _REG.codec(kind.name).encode(fields)


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_a_message_missing_key_fields_is_keyed_on_empty_values(typed_srv, kind: Kind) -> None:
    """sow/keys.py: a Key field without a value counts as empty (60East's FAQ on SowKeys and
    its NVFIX sample pair), for a key partly missing and one entirely missing."""
    from amps_emulator.protocol.topics import qualify
    from amps_emulator.sow import generate_sow_key

    c = client_for(typed_srv, f"keyless-{kind.name}", kind.name)
    try:
        live = Box()
        c.subscribe(live, "keyless")
        partly = _partial(kind, n=150)  # Key field k missing, n present
        none1, none2 = _partial(kind, x="a"), _partial(kind, x="b")  # both Key fields missing
        for body in (partly, none1, none2):
            c.publish("keyless", body)
        c.publish_flush()
        assert live.take(3) == [partly, none1, none2]  # every one delivered, bytes as sent
        stored = {m.get_sow_key(): bytes(m.get_data_raw())
                  for m in c.execute(AMPS.Command("sow").set_topic("keyless"))
                  if m.get_command() == "sow"}
        # the two keyless messages are one record (the latest), under the empty values' key
        domain = typed_srv.call(
            lambda: typed_srv.server.sow_service.get(qualify("keyless", kind.name)).spec.domain)
        assert stored == {generate_sow_key(domain, ["", "150"]): partly,
                          generate_sow_key(domain, ["", ""]): none2}
        admin = typed_srv.http(f"/emulator/sow/keyless?type={kind.name}")
        assert admin["count"] == 2
        assert sorted(r["sow_key"] for r in admin["records"]) == sorted(stored)
    finally:
        c.close()


def test_fixed_type_transport_refuses_another_type(typed_srv) -> None:
    c = AMPS.Client("fixed-nvfix")
    c.connect(uri_for(typed_srv, "nvfix", 1))
    with pytest.raises(AMPS.AMPSException, match="message type"):
        c.logon(5000)
    c.close()
    ok = client_for(typed_srv, "fixed-json", "json", 1)
    ok.close()


def test_unknown_type_is_refused(typed_srv) -> None:
    c = AMPS.Client("nosuch")
    c.connect(uri_for(typed_srv, "nosuch", 0))
    with pytest.raises(AMPS.AMPSException, match="message type"):
        c.logon(5000)
    c.close()


# -- 60East's FIX, NVFIX and composite sample programs against their own sample.xml ---------


@dataclass
class _AnyType:
    """What :class:`Program` reads of a server: the port its ``127.0.0.1:9027`` becomes (the
    sample.xml transport that accepts every message type)."""

    port: int


@pytest.fixture(scope="module")
def sample_srv(tmp_path_factory):
    if SAMPLES is None or not (SAMPLES / "sample.xml").exists():
        pytest.skip("the amps-python-client source package (samples/) is not unpacked here")
    import os

    import msgspec

    from amps_emulator.config import load_config
    from tests.support.servers import ServerThread

    d = tmp_path_factory.mktemp("sample-xml")
    cwd = os.getcwd()
    os.chdir(d)  # sample.xml's ./sow and ./logs land here
    try:
        cfg = load_config(SAMPLES / "sample.xml")
        cfg = msgspec.structs.replace(cfg, transports=tuple(
            msgspec.structs.replace(t, host="127.0.0.1", port=0) for t in cfg.transports))
        s = ServerThread(cfg).start()
    finally:
        os.chdir(cwd)
    yield s
    s.stop()


@pytest.fixture
def sample(sample_srv, tmp_path):
    port = next(lst.port for lst in sample_srv.server.listeners if lst.name == "amps-any-type-tcp")
    started: list[Program] = []

    def start(name: str, patch: Callable[[str], str] | None = None) -> Program:
        if patch is not None:  # run a patched copy (Program reads the file from SAMPLES)
            (tmp_path / "patched").mkdir(exist_ok=True)
            (tmp_path / "patched" / name).write_text(patch((SAMPLES / name).read_text()))
        p = Program(_AnyType(port), name, tmp_path, tmp_path / "patched" if patch else None)
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()




def _subscribed(srv, topic: str, mt: str) -> None:
    import time

    from amps_emulator.protocol.topics import qualify

    key = qualify(topic, mt)
    deadline = time.monotonic() + 10
    while not any(s.topic == key for c in list(srv.server.broker.by_name.values())
                  for s in list(c.subs.values())):
        assert time.monotonic() < deadline, f"nobody subscribed to {topic} ({mt})"
        time.sleep(0.01)


def test_fix_builder_and_shredder_samples(sample_srv, sample) -> None:
    sub = sample("AMPSFIXShredderSubscriber.py")
    _subscribed(sample_srv, "messages-sow", "fix")
    # sample.xml's first transports are its legacy fix/nvfix/xml ones (served since the legacy
    # protocols are): the json watcher logs on through the any-type amps transport
    any_type = next(i for i, lst in enumerate(sample_srv.server.listeners)
                    if lst.name == "amps-any-type-tcp")
    js = client_for(sample_srv, "json-watch", "json", any_type)
    seen = Box()
    js.subscribe(seen, "messages-sow")
    try:
        sample("AMPSFIXBuilderPublisher.py").finish()
        assert sub.lines(3) == ["0 data", "1 more data", "2 123"]
        assert seen.empty()  # a json subscriber of the same name sees no fix message
    finally:
        js.close()


def test_nvfix_builder_and_shredder_samples(sample_srv, sample) -> None:
    sub = sample("AMPSNVFIXShredderSubscriber.py")
    _subscribed(sample_srv, "messages-sow", "nvfix")
    sample("AMPSNVFIXBuilderPublisher.py").finish()
    assert sorted(sub.lines(3)) == ["1 123", "even more data", "sample data"]


def _py39(source: str) -> str:
    """The two calls Python 3.9 removed from ``array`` (``tostring``/``fromstring``), renamed
    to their replacements, and ``CompositeMessageParser.get_field_at``, which the installed
    official client (5.3.5) names ``get_part_raw``; nothing else of the sample changes."""
    return (source.replace(".tostring()", ".tobytes()").replace(".fromstring(", ".frombytes(")
            .replace(".get_field_at(", ".get_part_raw("))


def test_composite_publisher_and_subscriber_samples(sample_srv, sample) -> None:
    sub = sample("CompositeMessageSubscriber.py", _py39)
    _subscribed(sample_srv, "messages", "composite-json-binary")
    sample("CompositeMessagePublisher.py", _py39).finish()
    out = sub.lines(9)
    assert out[0::3] == ["Received message with 2 parts."] * 3
    assert [f'"number":{n}' in line for n, line in zip((3, 6, 9), out[1::3], strict=True)] \
        == [True] * 3
    # the binary part arrives intact: the publisher's 50 doubles (1, 1, 3, 4, 7, 9, ...)
    want = [1.0, 1.0]
    for d in range(2, 50):
        want.append(float(d + want[d - 2]))
    assert all(line.split() == [f"{v:f}" for v in want] for line in out[2::3])


def test_a_typed_sow_topic_is_rebuilt_from_the_journal_after_a_restart(tmp_path) -> None:
    xml = f"""<AMPSConfig><Name>restart</Name>
<Transports><Transport><Name>any</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
  <Protocol>amps</Protocol></Transport></Transports>
<TransactionLog><JournalDirectory>{tmp_path}/journal</JournalDirectory>
  <Topic><Name>orders</Name><MessageType>nvfix</MessageType></Topic></TransactionLog>
<SOW><Topic><Name>orders</Name><MessageType>nvfix</MessageType><Key>/k</Key>
  <Durability>transient</Durability></Topic>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/k</Key>
  <Durability>transient</Durability></Topic></SOW>
</AMPSConfig>"""
    body = b"k=A\x01n=1\x01"
    s = start_server(xml)
    try:
        c = client_for(s, "before", "nvfix")
        c.publish("orders", body)
        c.publish_flush()
        c.close()
        # the journal names the topic as clients do, with its type beside it
        records = s.call(lambda: list(s.server.txlog.journal.read(1)))  # on the server's loop
        (rec,) = [r for r in records if r.body == body]
        assert (rec.topic, rec.message_type) == ("orders", "nvfix")
    finally:
        s.stop()
    s = start_server(xml)
    try:
        nv, js = client_for(s, "after", "nvfix"), client_for(s, "after-json", "json")
        assert [bytes(b) for b in _sow(nv, "orders")] == [body]
        assert _sow(js, "orders") == []
        nv.close()
        js.close()
    finally:
        s.stop()


def test_oof_of_a_deleted_record_of_a_stored_typed_topic(tmp_path) -> None:
    s = start_server(f"""<AMPSConfig><Name>oof</Name>
<Transports><Transport><Name>any</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
  <Protocol>amps</Protocol></Transport></Transports>
<SOW><Topic><Name>O</Name><MessageType>fix</MessageType><Key>/11</Key>
  <FileName>{tmp_path}/%n.sow</FileName></Topic></SOW>
</AMPSConfig>""")
    got: queue.Queue[tuple[str, bytes]] = queue.Queue()
    try:
        c = client_for(s, "oof", "fix")
        c.publish("O", "11=A\x0138=150\x01")
        c.publish("O", "11=B\x0138=150\x01")
        c.publish_flush()
        cmd = AMPS.Command("sow_and_subscribe").set_topic("O").set_filter("/38 > 100") \
            .set_options("oof")
        c.execute_async(cmd, lambda m: got.put((m.get_command(), _raw(m))))
        c.publish("O", "11=A\x0138=50\x01")  # out of the filter: oof match
        c.publish_flush()
        c.sow_delete("O", "/11 = 'B'")  # the record, read back from the file: oof deleted
        seen = [got.get(timeout=5) for _ in range(6)]
        assert [x for x in seen if x[0] == "oof"] == [
            ("oof", b"11=A\x0138=50\x01"), ("oof", b"11=B\x0138=150\x01")]
        c.close()
    finally:
        s.stop()


# -- composite parts: each part's fields addressed, keyed and replayed ------------------------

_PARTS_CONFIG = """<AMPSConfig><Name>parts</Name>
<MessageTypes>
  <MessageType><Name>cl</Name><Module>composite-local</Module>
    <MessageType>json</MessageType><MessageType>nvfix</MessageType><MessageType>binary</MessageType></MessageType>
  <MessageType><Name>cg</Name><Module>composite-global</Module>
    <MessageType>json</MessageType><MessageType>nvfix</MessageType><MessageType>binary</MessageType></MessageType>
</MessageTypes>
<Transports><Transport><Name>any</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
  <Protocol>amps</Protocol></Transport></Transports>
<TransactionLog><JournalDirectory>{d}/journal</JournalDirectory>
  <Topic><Name>.*</Name><MessageType>cl</MessageType></Topic>
  <Topic><Name>.*</Name><MessageType>cg</MessageType></Topic></TransactionLog>
<SOW>
  <Topic><Name>parts</Name><MessageType>cl</MessageType><Key>/1/id</Key><FileName>{d}/%n.sow</FileName></Topic>
  <Topic><Name>parts</Name><MessageType>cg</MessageType><Key>/id</Key><FileName>{d}/%n.sow</FileName></Topic>
</SOW>
</AMPSConfig>"""


def _parts(desk: str, qty: int, oid: str, blob: bytes = b"\x00\xffraw") -> bytes:
    """A json part (desk, qty), an nvfix part (id, side) and an opaque binary part."""
    json_part = b'{"desk":"%s","qty":%d}' % (desk.encode(), qty)
    nvfix_part = b"id=%s\x01side=B\x01" % oid.encode()
    return b"".join(struct.pack(">I", len(p)) + p for p in (json_part, nvfix_part, blob))


@pytest.fixture(scope="module")
def parts_srv(tmp_path_factory):
    s = start_server(_PARTS_CONFIG.format(d=tmp_path_factory.mktemp("parts")))
    yield s
    s.stop()


# (type, filter on the first part's field AND the second part's) per composite module
PART_FILTERS = {"cl": "/0/qty > 10 AND /1/id LIKE '^O'", "cg": "/qty > 10 AND /id LIKE '^O'"}


@pytest.mark.parametrize("mt", ["cl", "cg"])
def test_composite_parts_filter_key_and_replay(parts_srv, mt: str) -> None:
    c = client_for(parts_srv, f"parts-{mt}", mt)
    try:
        live = Box()
        c.subscribe(live, "parts", PART_FILTERS[mt])
        bodies = [_parts("eq", 50, "O1"), _parts("eq", 5, "O2"),  # qty out
                  _parts("fx", 70, "X3"),  # id out
                  _parts("fx", 80, "O1", b"\x01other")]  # the same key as the first
        for b in bodies:
            c.publish("parts", b)
        c.publish_flush()
        # the filter read a field of the json part and one of the nvfix part
        assert live.take(2) == [bodies[0], bodies[3]]
        # keyed on the nvfix part's id: O1's latest (its binary part too), O2, X3
        assert sorted(map(bytes, _sow(c, "parts"))) == sorted([bodies[3], bodies[1], bodies[2]])
        assert [bytes(b) for b in _sow(c, "parts", PART_FILTERS[mt])] == [bodies[3]]
        replay = Box()
        c.bookmark_subscribe(replay, "parts", "0")
        assert replay.take(4) == bodies  # byte-identical, the opaque parts included
    finally:
        c.close()
