"""The replication link between two journals in one process: handshake and refusal, a peer
that is not an emulator, selection (Topic/MessageType/Filter, PassThrough, loops), resync
that sends only what is missing, duplicates dropped but acknowledged, conflated acks."""

from __future__ import annotations

import threading

import pytest

from amps_emulator.config.model import Destination, DestinationTransport, ReplicationAddress, ReplicationTopic
from amps_emulator.journal import FileJournal, MemoryJournal
from amps_emulator.journal.housekeeping import perform
from amps_emulator.journal.identity import PATH, SEEN, origin_timestamp, path_of, upstream_group
from amps_emulator.journal.record import JournalRecord, RecordKind
from amps_emulator.protocol.codec import FrameDecoder, frame
from amps_emulator.replication import Hello, LinkRefused, NotAnEmulator, Receiver, Selection, Sender
from amps_emulator.replication.bootstrap import BootstrapSource
from amps_emulator.replication.link import ack_position
from amps_emulator.replication.wire import (
    BootstrapAsk,
    Route,
    RouteTopic,
    TopicFacts,
    check_peer,
    classify_first_frame,
    fact_key,
)
from amps_emulator.sow.testing import FakeClock
from tests.support.journals import SlowGunzip


class Applied:
    """The ApplyPort: what the server would apply."""

    def __init__(self) -> None:
        self.records: list[JournalRecord] = []

    def apply_replicated(self, rec: JournalRecord) -> None:
        self.records.append(rec)


def dest(*topics: ReplicationTopic, name: str = "B", group: str = "G", pass_through: str | None = None,
         ack: float | None = None) -> Destination:
    return Destination(
        name=name, group=group, sync_type="sync",
        transports=(DestinationTransport(type="amps-replication",
                                         addresses=(ReplicationAddress("localhost", 1, "1"),)),),
        topics=topics or (ReplicationTopic(message_type="json"),), pass_through=pass_through,
        ack_conflation_interval=ack)


def pipe(sender: Sender, receiver: Receiver, now: float = 0.0) -> int:
    """Move every pending frame from sender to receiver and the ack back; returns the records
    moved (a frame carries a batch of them)."""
    before = sender.messages_out
    frames = sender.poll()
    dec = FrameDecoder()
    for payload in dec.feed(b"".join(frames)):
        receiver.handle(payload)
    ack = receiver.take_ack(now)
    if ack is not None:
        (payload,) = FrameDecoder().feed(ack)
        sender.on_ack(ack_position(payload))
    return sender.messages_out - before


def pub(j: MemoryJournal, topic: str = "orders", body: bytes = b'{"a":1}', client: str = "pub",
        s: int | None = None, **kw) -> JournalRecord:
    return j.append(topic=topic, client_name=client, body=body, client_seq=s, message_type="json", **kw)


def test_publish_on_a_arrives_on_b_with_its_bookmark_and_the_ack_comes_back():
    a, b = MemoryJournal(), MemoryJournal()
    port = Applied()
    snd = Sender(a, Selection(dest(), "B"), local_name="A", local_group="G")
    rcv = Receiver(b, port)
    snd.start(b.high_water_marks())
    sent = [pub(a, s=i, expiration=60) for i in (1, 2, 3)]
    sent.append(a.append(topic="orders", client_name="pub", kind=RecordKind.SOW_DELETE, message_type="json",
                         body=b"/a = 1"))
    assert pipe(snd, rcv) == 4
    assert [r.bookmark for r in port.records] == [r.bookmark for r in sent]
    assert [r.kind for r in port.records] == [1, 1, 1, RecordKind.SOW_DELETE]
    assert all(origin_timestamp(r) == origin_timestamp(s) for r, s in zip(port.records, sent, strict=True))
    assert port.records[0].expiration == 60 and path_of(port.records[0]) == ("A",)
    assert upstream_group(port.records[0]) == "G"
    assert snd.acked_through == a.last_position and snd.in_flight == 0
    assert b.last_seq_for_client("pub") == 3  # B's logon ack would promise s=3 to this publisher


def test_a_records_own_headers_travel_and_the_links_are_not_doubled():
    """A sow_delete's filter (or keys) is in its headers: it must arrive, or B cannot apply it."""
    a, b = MemoryJournal(), MemoryJournal()
    port = Applied()
    snd = Sender(a, Selection(dest(), "B"), local_name="A", local_group="G")
    snd.start(b.high_water_marks())
    a.append(topic="orders", client_name="pub", kind=RecordKind.SOW_DELETE, message_type="json",
             headers={"filter": "/id = 2"})
    a.append(topic="orders", client_name="pub", kind=RecordKind.SOW_DELETE, message_type="json",
             headers={"sow_keys": "k1,k2"})
    assert pipe(snd, Receiver(b, port)) == 2
    first, second = port.records
    assert first.headers["filter"] == "/id = 2" and "sow_keys" not in first.headers
    assert second.headers["sow_keys"] == "k1,k2"
    assert path_of(first) == ("A",) and upstream_group(first) == "G"


def test_resync_sends_only_what_the_peer_lacks_and_duplicates_are_acked():
    a, b = MemoryJournal(), MemoryJournal()
    for i in range(1, 6):
        pub(a, s=i)
    pub(a, client="other")
    port = Applied()
    rcv = Receiver(b, port)
    first = Sender(a, Selection(dest(), "B"), local_name="A", local_group="G")
    first.start(b.high_water_marks())
    frames = first.poll(limit=3)  # the link breaks after three records
    for payload in FrameDecoder().feed(b"".join(frames)):
        rcv.handle(payload)
    assert [r.client_seq for r in port.records] == [1, 2, 3]
    again = Sender(a, Selection(dest(), "B"), local_name="A", local_group="G")
    assert again.start(b.high_water_marks()) == 4  # the first record B lacks
    assert pipe(again, rcv) == 3
    assert [r.client_seq for r in port.records] == [1, 2, 3, 4, 5, None]
    # a resync overlap or a second path: dropped, still acknowledged
    replay = Sender(a, Selection(dest(), "B"), local_name="A", local_group="G")
    replay.start({})
    rcv = Receiver(b, port)  # a new connection
    assert pipe(replay, rcv) == 6 and rcv.duplicates == 6 and len(port.records) == 6
    assert replay.acked_through == a.last_position


def test_selection_by_topic_message_type_and_filter():
    sel = Selection(dest(ReplicationTopic(name="orders", message_type="json", filter="/qty > 10"),
                         ReplicationTopic(name="^fx/", message_type="json")), "B")
    a = MemoryJournal()
    assert sel.wants(pub(a, body=b'{"qty":11}'))
    assert not sel.wants(pub(a, body=b'{"qty":1}'))
    assert not sel.wants(pub(a, body=b"not json"))
    assert sel.wants(pub(a, topic="fx/eur", body=b"x"))
    assert not sel.wants(pub(a, topic="other"))
    assert not sel.wants(a.append(topic="orders", client_name="p", message_type="xml", body=b"<a/>"))
    assert not sel.wants(a.append(topic="orders", client_name="p", kind=RecordKind.QUEUE_ACK,
                                  message_type="json"))


def test_pass_through_by_upstream_group_and_loop_prevention_in_a_three_instance_chain():
    a, b, c = MemoryJournal(), MemoryJournal(), MemoryJournal()
    pb, pc, pa = Applied(), Applied(), Applied()
    pub(a, s=1)
    ab = Sender(a, Selection(dest(name="B", group="GB"), "B"), local_name="A", local_group="GA")
    ab.start({})
    pipe(ab, Receiver(b, pb))
    # B forwards what came from A only where PassThrough matches A's group
    closed = Sender(b, Selection(dest(name="C", group="GC"), "C"), local_name="B", local_group="GB")
    closed.start({})
    assert pipe(closed, Receiver(c, pc)) == 0
    open_ = Sender(b, Selection(dest(name="C", group="GC", pass_through="^GA$"), "C"), local_name="B",
                   local_group="GB")
    open_.start({})
    assert pipe(open_, Receiver(c, pc)) == 1
    assert path_of(pc.records[0]) == ("A", "B") and pc.records[0].bookmark == pb.records[0].bookmark
    # C never sends it back to A, which is on its path, even with PassThrough .*
    back = Sender(c, Selection(dest(name="A", group="GA", pass_through=".*"), "A"), local_name="C",
                  local_group="GC")
    back.start({})
    assert pipe(back, Receiver(a, pa)) == 0 and pa.records == []


def test_acks_wait_for_the_conflation_interval():
    a, b = MemoryJournal(), MemoryJournal()
    snd = Sender(a, Selection(dest(), "B"), local_name="A", local_group="G")
    rcv = Receiver(b, Applied(), ack_interval=1.0)
    snd.start({})
    pub(a, s=1)
    pipe(snd, rcv, now=10.0)
    assert snd.acked_through == 1
    pub(a, s=2)
    pipe(snd, rcv, now=10.5)
    assert snd.acked_through == 1 and snd.in_flight == 1  # within the interval: no ack yet
    ack = rcv.take_ack(11.0)
    assert ack is not None
    (payload,) = FrameDecoder().feed(ack)
    snd.on_ack(ack_position(payload))
    assert snd.acked_through == 2


def facts(keys: tuple[str, ...] | None = ("/id",), queue: str | None = None) -> dict[str, TopicFacts]:
    return {fact_key("orders", "json"): TopicFacts(txlog=True, sow_keys=keys, queue=queue, underlying=None)}


ALL = {fact_key("orders", "json"): frozenset({"txlog", "sow", "keys", "queue", "queue_underlying"})}


@pytest.mark.parametrize(("remote", "expected_group", "reason"), [
    (Hello(name="A", group="G", hw={}), "G", "own Name"),
    (Hello(name="B", group="H", hw={}), "G", "Group 'H'"),
    (Hello(name="B", group="G", hw={}, facts={}), "G", "validation txlog"),
    (Hello(name="B", group="G", hw={}, facts=facts(keys=None)), "G", "validation sow"),
    (Hello(name="B", group="G", hw={}, facts=facts(keys=("/other",))), "G", "validation keys"),
])
def test_handshake_refusals(remote, expected_group, reason):
    local = Hello(name="A", group="G", hw={}, facts=facts())
    with pytest.raises(LinkRefused, match=reason):
        check_peer(local, remote, expected_group=expected_group, expected_name=None, checks=ALL)


def test_a_queue_here_must_be_the_same_queue_there():
    local = Hello(name="A", group="G", hw={}, facts=facts(queue="queue"))
    for remote_queue in (None, "local"):
        with pytest.raises(LinkRefused, match="validation queue"):
            check_peer(local, Hello(name="B", group="G", hw={}, facts=facts(queue=remote_queue)),
                       expected_group="G", expected_name=None, checks=ALL)
    check_peer(local, Hello(name="B", group="G", hw={}, facts=facts(queue="queue")), expected_group="G",
               expected_name=None, checks=ALL)


def test_handshake_round_trip_and_accepted_peer():
    hello = Hello(name="B", group="G", hw={2**63 + 5: 17}, facts=facts())
    (payload,) = FrameDecoder().feed(hello.encode())
    got = classify_first_frame(payload)
    assert got == hello
    check_peer(Hello(name="A", group="G", hw={}, facts=facts()), got, expected_group="G", expected_name="B",
               checks=ALL)
    relaxed = {fact_key("orders", "json"): frozenset({"txlog", "queue", "queue_underlying"})}
    check_peer(Hello(name="A", group="G", hw={}, facts=facts()),
               Hello(name="B", group="G", hw={}, facts=facts(keys=("/x",))), expected_group="G",
               expected_name=None, checks=relaxed)


@pytest.mark.parametrize("first", [
    b"\x00\x00\x00\x10garbage-bytes!!!",  # not a JSON header at all
    frame({"c": "logon", "client_name": "amps-replication-peer"}),  # an AMPS-style command
    frame({"c": "repl_hello", "v": "amps/5", "name": "x", "group": "g"}),  # another protocol version
])
def test_anything_but_an_emulator_hello_is_named(first):
    (payload,) = FrameDecoder().feed(first)
    with pytest.raises(NotAnEmulator):
        classify_first_frame(payload)


def test_ack_conflation_interval_spaces_the_downstream_acks():
    a, b = MemoryJournal(), MemoryJournal()
    snd = Sender(a, Selection(dest(ack=0.5), "B"), local_name="A", local_group="G")
    rcv = Receiver(b, Applied(), ack_interval=0.5)
    snd.start(b.high_water_marks())
    pub(a, s=1)
    assert pipe(snd, rcv, now=10.0) == 1 and snd.acked_through == 1
    pub(a, s=2)
    assert pipe(snd, rcv, now=10.2) == 1
    assert snd.acked_through == 1 and rcv.pending and rcv.ack_wait(10.2) == pytest.approx(0.3)
    ack = rcv.take_ack(10.5)
    assert ack is not None and ack_position(next(iter(FrameDecoder().feed(ack)))) == 2
    assert not rcv.pending


def test_the_hello_carries_the_destinations_ack_conflation_interval():
    hello = Hello(name="A", group="G", hw={}, ack_interval=0.25)
    (payload,) = FrameDecoder().feed(hello.encode())
    assert classify_first_frame(payload).ack_interval == 0.25
    (payload,) = FrameDecoder().feed(Hello(name="A", group="G", hw={}).encode())
    assert classify_first_frame(payload).ack_interval is None


def test_upstream_acks_wait_for_the_safe_position_of_the_records_path():
    """``safe(path, group)`` bounds the ack: a chain's own sync destination holds it."""
    a, b = MemoryJournal(), MemoryJournal()
    limit = {"pos": 0}
    seen: list[tuple[tuple[str, ...], str | None]] = []

    def safe(path: tuple[str, ...], group: str | None) -> int:
        seen.append((path, group))
        return limit["pos"]

    snd = Sender(a, Selection(dest(), "B"), local_name="A", local_group="G")
    rcv = Receiver(b, Applied(), safe=safe)
    snd.start(b.high_water_marks())
    pub(a, s=1)
    assert pipe(snd, rcv) == 1 and snd.acked_through == 0
    assert seen == [(("A",), "G")]
    limit["pos"] = b.last_position
    ack = rcv.take_ack(0.0)
    assert ack is not None and ack_position(next(iter(FrameDecoder().feed(ack)))) == 1


ALL_CHECKS = frozenset({"txlog", "replicate", "sow", "keys", "cascade", "replicate_filter", "queue",
                        "queue_underlying", "queue_passthrough"})


def route(group: str, *, filt: str | None = None, checks: tuple[str, ...] = tuple(sorted(ALL_CHECKS)),
          pass_through: str | None = None) -> Route:
    return Route(name=group, group=group, pass_through=pass_through,
                 topics=(RouteTopic(name=".*", message_type="json", filter=filt, validations=checks),))


@pytest.mark.parametrize(("routes", "my_filter", "queue", "reason"), [
    ((), None, None, "validation replicate"),  # B does not replicate back to G
    ((route("H"),), None, None, "validation replicate"),  # only onward, not back
    ((route("G", filt="/x > 1"),), "/x > 2", None, "validation replicate_filter"),
    ((route("G"), route("H", checks=("txlog",))), None, None, "validation cascade"),
    ((route("G"),), None, "queue", "validation queue_passthrough"),  # no PassThrough of G
    ((route("G", filt="/x > 2"),), "/x > 2", None, None),
    ((route("G", pass_through="^G$"),), None, "queue", None),
])
def test_replicate_filter_cascade_and_queue_pass_through_checks(routes, my_filter, queue, reason):
    local = Hello(name="A", group="G", hw={}, facts=facts(queue=queue))
    remote = Hello(name="B", group="G2", hw={}, facts=facts(queue=queue), routes=routes)
    keep = {fact_key("orders", "json"): ALL_CHECKS}

    def call() -> None:
        check_peer(local, remote, expected_group="G2", expected_name=None, checks=keep,
                   filters={fact_key("orders", "json"): my_filter})

    if reason is None:
        call()
    else:
        with pytest.raises(LinkRefused, match=reason):
            call()


def test_hello_carries_recorded_topics_and_routes():
    hello = Hello(name="B", group="G", hw={}, txlog=((r"^news", "json"),), routes=(route("G"),))
    (payload,) = FrameDecoder().feed(hello.encode())
    got = classify_first_frame(payload)
    assert got == hello
    assert got.records("news-eu", "json") and not got.records("orders", "json")
    assert not got.records("news-eu", "xml")


def test_a_write_to_a_link_whose_peer_went_away_is_a_connection_error():
    """uvloop raises RuntimeError for a write on a closed transport; the link treats it as the
    peer gone (and reconnects) instead of ending its connector."""
    from amps_emulator.server.services.replication import send

    class Closed:
        def is_closing(self) -> bool:
            return True

        def write(self, data: bytes) -> None:
            raise RuntimeError("unable to perform operation on <TCPTransport closed=True>")

    with pytest.raises(ConnectionResetError):
        send(Closed(), b"x")


def test_a_links_wakeup_returns_once_set_and_leaves_nothing_behind():
    """``stream.Wakeup``: a wait returns at once while it is set, else once it is set; a
    cancelled wait (the server stops) leaves no future to set."""
    import asyncio

    from amps_emulator.replication.stream import Wakeup

    async def run() -> None:
        wake = Wakeup()
        wake.set()
        await asyncio.wait_for(wake.wait(), 1)  # (set: at once)
        wake.clear()
        assert not wake.is_set()
        waiting = asyncio.ensure_future(wake.wait())
        await asyncio.sleep(0)
        assert not waiting.done()
        asyncio.get_running_loop().call_soon(wake.set)
        await asyncio.wait_for(waiting, 1)
        wake.clear()
        waiting = asyncio.ensure_future(wake.wait())
        await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        assert wake._waiter is None
        wake.set()  # (nobody waits: nothing to wake)
        assert wake.is_set()

    asyncio.run(run())


def test_a_resync_through_compressed_segments_never_waits_in_poll(tmp_path, monkeypatch):
    clock = FakeClock(1_800_000_000.0)
    a, _ = FileJournal.open(str(tmp_path / "a"), segment_size=4096, clock=clock)
    sent = [pub(a, body=b'{"i":%d}' % i, s=i + 1) for i in range(300)]
    a.flush()
    a.sync()
    clock.advance(100)
    for move in a.plan_store("compress", 10):
        assert a.finish_store(perform(move))
    assert len(a.segments) > 3 and a.segments[0].path.endswith(".gz")
    slow = SlowGunzip().install(monkeypatch)
    b, port = MemoryJournal(), Applied()
    snd = Sender(a, Selection(dest(), "B"), local_name="A", local_group="G")
    woken = threading.Event()
    snd.wake = woken.set  # (the link wakes its loop so)
    rcv = Receiver(b, port)
    snd.start(b.high_water_marks())
    try:
        assert pipe(snd, rcv) == 0  # at once: the oldest segment is being decompressed
        assert slow.entered.wait(10) and not woken.is_set()
    finally:
        slow.release.set()
    while len(port.records) < len(sent):
        if pipe(snd, rcv) == 0:
            assert woken.wait(10)
            woken.clear()
    assert [r.bookmark for r in port.records] == [r.bookmark for r in sent]
    assert snd.acked_through == a.last_position
    a.close()


def received(snd: Sender, woken: threading.Event | None = None) -> list[tuple[str, dict[str, str]]]:
    """What a peer gets from ``snd`` until it has looked at the whole log (waiting for
    ``woken`` whenever it stops for a decompression): bookmarks and headers (``sv``)."""
    port = Applied()
    rcv = Receiver(MemoryJournal(), port)
    while snd.next_position <= snd.journal.last_position:
        if pipe(snd, rcv) == 0 and snd.next_position <= snd.journal.last_position:
            assert woken is not None and woken.wait(10)
            woken.clear()
    return [(r.bookmark_str, dict(r.headers)) for r in port.records]


def test_a_sender_finds_where_to_resume_without_decompressing_on_the_callers_thread(tmp_path, monkeypatch):
    """A reopened journal whose segments are all compressed: where a sender resumes (the
    first record the peer lacks, and what had arrived from other instances before it) is
    found while the segments are decompressed in the worker: ``start`` returns at once, the
    link is woken, and the peer gets exactly what it lacks, with the same ``sv``."""
    clock = FakeClock(1_800_000_000.0)
    path = str(tmp_path / "a")
    a, _ = FileJournal.open(path, segment_size=4096, clock=clock)
    for i in range(150):  # (with records that came here from instance C among them)
        pub(a, body=b'{"i":%d}' % i, s=i + 1)
        if i % 50 == 10:
            a.append_replicated(topic="orders", client_name="c", publisher_id=99, sequence=i + 1,
                                origin_timestamp=1, body=b'{"c":1}', kind=RecordKind.PUBLISH,
                                message_type="json", headers={PATH: "C"})
    a.flush()
    a.sync()
    theirs = {pid: seq if pid == 99 else seq // 2 for pid, seq in a.high_water_marks().items()}
    reference = Sender(a, Selection(dest(), "B"), local_name="A", local_group="G")
    first = reference.start(theirs)
    want = received(reference)
    assert first is not None and first > 50 and any(SEEN in h for _, h in want)
    clock.advance(100)
    for move in a.plan_store("compress", 10):
        assert a.finish_store(perform(move))
    a.close()

    a, _ = FileJournal.open(path, segment_size=4096, clock=clock)  # (its index: built on first use)
    assert len(a.segments) > 3 and a.segments[0].path.endswith(".gz")
    slow = SlowGunzip().install(monkeypatch)
    snd = Sender(a, Selection(dest(), "B"), local_name="A", local_group="G")
    woken = threading.Event()
    snd.wake = woken.set
    try:
        assert snd.start(theirs) is None  # at once: the oldest segment is being decompressed
        assert slow.entered.wait(10) and not woken.is_set()
        assert snd.poll() == []  # (nothing before the position is found)
        assert snd.acked_through < first  # (meanwhile retention keeps the log)
    finally:
        slow.release.set()
    assert woken.wait(10)
    assert received(snd, woken) == want
    assert (snd.acked_through, snd.resync_until) == (reference.acked_through, reference.resync_until)
    a.close()


def test_a_bootstrap_source_reads_compressed_segments_off_the_callers_thread(tmp_path, monkeypatch):
    """A bootstrap source over a reopened journal whose segments are all compressed: the
    sequence index its SOW part looks records up in, and the transaction log it sends, are
    read while the segments are decompressed in the worker (it stops, is woken, reads on from
    where it stopped), and it sends what it sends from plain segments, in order."""
    clock = FakeClock(1_800_000_000.0)
    path = str(tmp_path / "a")
    a, _ = FileJournal.open(path, segment_size=4096, clock=clock)
    for i in range(300):
        pub(a, topic="orders" if i % 3 else "other", body=b'{"i":%d}' % i, s=i + 1)
    a.flush()
    a.sync()
    ask = BootstrapAsk(topics=(("orders", "json"),), data_types=("sow", "txlog"))
    want = list(BootstrapSource(ask, a, {}, local_name="A", local_group="G").log_frames(a.durable_position))
    assert len(want) == 200
    clock.advance(100)
    for move in a.plan_store("compress", 10):
        assert a.finish_store(perform(move))
    a.close()

    for part in ("index", "log"):  # each on a journal just reopened (nothing decompressed yet)
        a, _ = FileJournal.open(path, segment_size=4096, clock=clock)  # (its index: built on use)
        assert len(a.segments) > 3 and a.segments[0].path.endswith(".gz")
        slow = SlowGunzip().install(monkeypatch)
        source = BootstrapSource(ask, a, {}, local_name="A", local_group="G")
        woken = threading.Event()
        source.hold.wake = woken.set
        try:  # at once: the oldest segment is being decompressed
            if part == "index":
                assert not source.ready()
            else:
                assert list(source.log_frames(a.durable_position)) == [] and source.waiting
            assert slow.entered.wait(10)
        finally:
            slow.release.set()
        while not source.ready():
            assert woken.wait(10)
            woken.clear()
        got = list(source.log_frames(a.durable_position))
        while source.waiting:
            assert woken.wait(10)
            woken.clear()
            got += source.log_frames(a.durable_position)
        assert got == want and source.sent == 200
        a.close()
