"""The link streams ``repl_batch`` frames (``replication.batch``): a client's run of publishes
travels as one plain run in columns, anything else record by record; a frame ends where the
``sv`` changes or its bytes are reached; what the peer itself sent is stepped over; a
malformed batch, or a peer of the first protocol version, ends the link."""

from __future__ import annotations

import msgspec
import pytest

from amps_emulator.config.model import ReplicationTopic
from amps_emulator.journal import FileJournal, JournalRecord, MemoryJournal, RecordKind
from amps_emulator.journal.identity import origin_timestamp, path_of
from amps_emulator.protocol.bookmarks import Bookmark, publisher_id_for
from amps_emulator.protocol.codec import FrameDecoder, ProtocolError, frame, split_frame
from amps_emulator.replication import Hello, NotAnEmulator, Receiver, Selection, Sender, batch
from amps_emulator.replication.batch import InFlight, PlainRun, Records, decode_parts, encode_parts
from amps_emulator.replication.link import ack_position
from amps_emulator.replication.wire import classify_first_frame

from .test_replication_link import Applied, dest, pipe


def parts_of(frames: list[bytes]) -> list[list[PlainRun | Records]]:
    out = []
    for payload in FrameDecoder().feed(b"".join(frames)):
        h, body = split_frame(payload)
        assert h["c"] == "repl_batch" and h["via"] == "A" and h["ug"] == "G"
        out.append(decode_parts(body))
    return out


def runs(j: MemoryJournal, client: str, first_s: int, n: int, topic: str = "orders") -> list:
    """A client's run of ``n`` publishes (bodies of 8 bytes for a one-letter client name)."""
    return j.append_publishes(topic, "json", client, [b'{"%s":%d} ' % (client.encode(), i % 10)
                                                      for i in range(n)],
                              list(range(first_s, first_s + n)))


def test_a_run_of_publishes_travels_as_one_plain_run_and_arrives_as_published():
    a, b = MemoryJournal(), MemoryJournal()
    sent = runs(a, "p1", 1, 5)
    sent.append(a.append(topic="orders", client_name="p1", message_type="json", body=b"{}",
                         correlation_id="c1", client_seq=6))
    sent.append(a.append(topic="orders", client_name="p1", kind=RecordKind.SOW_DELETE,
                         message_type="json", headers={"filter": "/a = 1"}))
    sent += runs(a, "p2", 1, 3) + runs(a, "p1", 7, 2)
    snd = Sender(a, Selection(dest(), "B"), local_name="A", local_group="G")
    snd.start({})
    frames = snd.poll()
    (parts,) = parts_of(frames)
    assert [type(p).__name__ for p in parts] == ["PlainRun", "Records", "PlainRun", "PlainRun"]
    assert [len(p.bodies) if isinstance(p, PlainRun) else len(p.records) for p in parts] == [5, 2, 3, 2]
    assert snd.messages_out == 12 and snd.in_flight == 12
    port = Applied()
    rcv = Receiver(b, port, local_name="B")
    for payload in FrameDecoder().feed(b"".join(frames)):
        rcv.handle(payload)
    got = port.records
    assert [(r.bookmark, r.client_seq, r.kind, r.body, r.correlation_id) for r in got] == \
        [(r.bookmark, r.client_seq, r.kind, r.body, r.correlation_id) for r in sent]
    assert all(path_of(r) == ("A",) and origin_timestamp(r) == s.timestamp
               for r, s in zip(got, sent, strict=True))
    assert got[6].headers["filter"] == "/a = 1"
    (payload,) = FrameDecoder().feed(rcv.take_ack(0.0) or b"")
    snd.on_ack(ack_position(payload))
    assert snd.in_flight == 0 and snd.acked_through == a.last_position
    assert b.last_seq_for_client("p1") == 8 and b.last_seq_for_client("p2") == 3


def test_frames_end_at_their_bytes_and_a_poll_at_its_limit(monkeypatch):
    monkeypatch.setattr(batch, "BATCH_BYTES", 40)
    a, b = MemoryJournal(), MemoryJournal()
    runs(a, "p", 1, 10)  # ten bodies of 8 bytes: a frame ends at the fifth
    snd = Sender(a, Selection(dest(), "B"), local_name="A", local_group="G")
    snd.start({})
    frames = snd.poll(limit=7)
    assert [[len(p.bodies) for p in parts] for parts in parts_of(frames)] == [[5], [2]]
    assert snd.next_position == 8
    port = Applied()
    rcv = Receiver(b, port)
    for payload in FrameDecoder().feed(b"".join(frames)):
        rcv.handle(payload)
    assert pipe(snd, rcv) == 3
    assert [r.client_seq for r in port.records] == list(range(1, 11))


def test_a_filter_decides_for_each_record_of_a_run():
    a, b = MemoryJournal(), MemoryJournal()
    a.append_publishes("orders", "json", "p", [b'{"q":%d}' % i for i in range(6)], None)
    sel = Selection(dest(ReplicationTopic(name="orders", message_type="json", filter="/q > 2")), "B")
    snd = Sender(a, sel, local_name="A", local_group="G")
    snd.start({})
    port = Applied()
    assert pipe(snd, Receiver(b, port)) == 3
    assert [r.body for r in port.records] == [b'{"q":3}', b'{"q":4}', b'{"q":5}']


def test_what_the_peer_sent_is_stepped_over_and_the_next_sv_names_it():
    a, b = MemoryJournal(), MemoryJournal()
    ab = Sender(a, Selection(dest(), "B"), local_name="A", local_group="G")
    ab.start({})
    from_a = runs(a, "pa", 1, 4)
    pipe(ab, Receiver(b, Applied(), local_name="B"))
    runs(b, "pb", 1, 2)
    ba = Sender(b, Selection(dest(name="A"), "A"), local_name="B", local_group="G")
    ba.start({})
    (payload,) = FrameDecoder().feed(b"".join(ba.poll()))
    h, body = split_frame(payload)
    assert [len(p.bodies) for p in decode_parts(body)] == [2] and ba.messages_out == 2
    assert msgspec.json.decode(h["sv"]) == {"": from_a[-1].bookmark_str}


def test_plain_runs_of_a_refused_topic_are_dropped_counted_and_acknowledged():
    a, b = MemoryJournal(), MemoryJournal()
    runs(a, "p", 1, 3, topic="secret")
    runs(a, "p", 4, 2, topic="orders")
    snd = Sender(a, Selection(dest(), "B"), local_name="A", local_group="G")
    snd.start({})
    port = Applied()
    rcv = Receiver(b, port, admit=lambda topic: topic != "secret")
    assert pipe(snd, rcv) == 5
    assert rcv.refused == 3 and [r.client_seq for r in port.records] == [4, 5]
    assert snd.acked_through == a.last_position


@pytest.mark.parametrize("body", [
    b"\x01\x02",  # not MessagePack
    encode_parts([PlainRun("t", "json", "p", 7, 1, 3, [1, 2], None, [b"x"])]),  # columns differ
    encode_parts([PlainRun("t", "json", "p", 0, 1, 3, [1], None, [b"x"])]),  # no publisher
    encode_parts([PlainRun("t", "json", "p", -1, 1, 3, [1], None, [b"x"])]),  # nor one
    encode_parts([Records([JournalRecord(position=1, kind=-1, topic="t", publisher_id=7, sequence=1,
                                         timestamp=1, client_name="p")])]),  # no kind
    msgspec.msgpack.encode([[9, "what"]]),  # an unknown part
    # a topic that is not UTF-8 (msgspec raises UnicodeDecodeError, not a DecodeError)
    encode_parts([PlainRun("t", "json", "p", 7, 1, 3, [1], None, [b"x"])]).replace(b"\xa1t", b"\xa1\xff"),
])
def test_a_malformed_batch_ends_the_link(body):
    rcv = Receiver(MemoryJournal(), Applied())
    with pytest.raises(ProtocolError):
        rcv.handle(frame({"c": "repl_batch", "via": "A", "ug": "G"}, body)[4:])


def test_a_peer_of_the_first_protocol_version_is_named_and_refused():
    old = msgspec.structs.replace(Hello(name="A", group="G", hw={}), version="emu-repl/1").encode()
    with pytest.raises(NotAnEmulator, match="emu-repl/1"):
        classify_first_frame(old[4:])


def test_a_sender_keeps_at_most_its_window_in_flight():
    a, b = MemoryJournal(), MemoryJournal()
    runs(a, "p", 1, 10)
    snd = Sender(a, Selection(dest(), "B"), local_name="A", local_group="G")
    snd.window = 4
    snd.start({})
    rcv = Receiver(b, Applied())
    frames = snd.poll()
    assert snd.in_flight == 4 and snd.window_full and snd.poll() == []
    for payload in FrameDecoder().feed(b"".join(frames)):
        rcv.handle(payload)
    (ack,) = FrameDecoder().feed(rcv.take_ack(0.0) or b"")
    snd.on_ack(ack_position(ack))
    assert not snd.window_full and snd.acked_through == 4
    assert pipe(snd, rcv) == 4 and pipe(snd, rcv) == 2 and snd.acked_through == 10


def test_in_flight_ranges_are_acknowledged_in_part_and_whole():
    sent = InFlight()
    sent.add(3, 5)
    sent.add(6, 6)  # (joins the range before it)
    sent.add(9, 12)
    assert sent.count == 8 and sent.first == 3
    sent.ack(4)
    assert sent.count == 6 and sent.first == 5
    sent.ack(10)
    assert sent.count == 2 and sent.first == 11
    sent.ack(99)
    assert sent.count == 0 and sent.first is None


def test_runs_read_from_the_journals_memory_travel_whole(tmp_path, monkeypatch):
    """A file journal hands the sender the rest of a run at once (``run_columns``): the same
    parts and records as one by one, bounded by what is durable, the limit and the bytes."""
    a, _ = FileJournal.open(tmp_path / "a")
    snd = Sender(a, Selection(dest(), "B"), local_name="A", local_group="G")  # (follows the tail)
    first = runs(a, "p", 1, 6)
    a.flush()
    a.sync()
    runs(a, "p", 7, 3)  # written, not durable yet
    a.flush()
    snd.start({})
    (parts,) = parts_of(snd.poll(limit=4))
    assert [(p.sequences, p.bodies) for p in parts] == [([r.sequence for r in first[:4]],
                                                         [r.body for r in first[:4]])]
    (parts,) = parts_of(snd.poll())
    assert [p.client_seqs for p in parts] == [[5, 6]]  # (the rest of the durable run)
    a.sync()
    monkeypatch.setattr(batch, "BATCH_BYTES", 20)  # the rest would pass it: one by one
    assert [[p.client_seqs for p in parts] for parts in parts_of(snd.poll())] == [[[7, 8, 9]]]
    b = MemoryJournal()
    port = Applied()
    snd2 = Sender(a, Selection(dest(), "B"), local_name="A", local_group="G")  # (from the files)
    snd2.start({})
    assert pipe(snd2, Receiver(b, port)) == 9
    assert [r.client_seq for r in port.records] == list(range(1, 10))
    a.close()


def test_a_run_taken_at_once_is_only_the_records_made_with_the_first(tmp_path):
    """A publish made alone, then another client's run, then a run from a peer: each goes as
    what it is (the one that follows a record is not its run)."""
    a, _ = FileJournal.open(tmp_path / "a")
    snd = Sender(a, Selection(dest(pass_through=".*"), "B"), local_name="A", local_group="G")
    alone = a.append(topic="orders", client_name="p1", message_type="json", body=b"{}", client_seq=1)
    other = runs(a, "p2", 1, 3)
    a.append_replicated_plain("orders", "json", "p3", publisher_id_for("p3"), 5, [1, 2], None,
                              [b"x", b"y"], "C")
    a.flush()
    a.sync()
    snd.start({})
    frames = snd.poll()
    assert [[(type(p).__name__, len(p.bodies) if isinstance(p, PlainRun) else len(p.records))
              for p in parts] for parts in parts_of(frames)] == [
        [("PlainRun", 1), ("PlainRun", 3)], [("Records", 1)], [("Records", 1)]]  # (each: another sv)
    port = Applied()
    rcv = Receiver(MemoryJournal(), port, local_name="B")
    for payload in FrameDecoder().feed(b"".join(frames)):
        rcv.handle(payload)
    assert [(r.client_name, r.bookmark) for r in port.records] == \
        [("p1", alone.bookmark)] + [("p2", r.bookmark) for r in other] + \
        [("p3", Bookmark(publisher_id_for("p3"), 1)), ("p3", Bookmark(publisher_id_for("p3"), 2))]
    assert [path_of(r) for r in port.records] == [("A",)] * 4 + [("C", "A")] * 2
    a.close()


@pytest.mark.parametrize("fields", [
    {},  # no position
    {"pos": "x"}, {"pos": "12"}, {"pos": 1.5}, {"pos": None}, {"pos": True}, {"pos": [3]},  # not an integer
    {"pos": -1},
])
def test_a_malformed_ack_ends_the_link(fields):
    with pytest.raises(ProtocolError, match="malformed replication ack"):
        ack_position(frame({"c": "repl_ack", **fields})[4:])


def test_an_ack_beyond_what_was_sent_ends_the_link_and_changes_nothing():
    """The peer cannot have what it was never sent: acknowledging it would count records in
    flight (and, at a sync destination, the publishers' persisted acks) as held by a peer that
    may not hold them."""
    a = MemoryJournal()
    runs(a, "p", 1, 3)
    snd = Sender(a, Selection(dest(), "B"), local_name="A", local_group="G")
    snd.start({})
    with pytest.raises(ProtocolError, match="beyond"):
        snd.on_ack(1)  # nothing sent yet
    snd.poll()
    runs(a, "p", 4, 2)  # logged, not sent
    for position in (4, 10**9):
        with pytest.raises(ProtocolError, match=f"acknowledges position {position}, beyond 3"):
            snd.on_ack(position)
        assert (snd.in_flight, snd.acked_through) == (3, 0)
    snd.on_ack(0)  # (what the peer had before: nothing moves)
    snd.on_ack(2)
    assert (snd.in_flight, snd.acked_through) == (1, 2)
    snd.on_ack(1)  # an older ack again: nothing moves back
    assert (snd.in_flight, snd.acked_through) == (1, 2)
    snd.poll()
    snd.on_ack(5)
    assert (snd.in_flight, snd.acked_through) == (0, 5)
