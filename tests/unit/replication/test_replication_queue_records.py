"""Queue records on the replication link (docs/design/replication.md section 4): the acks, expiries,
at-most-once sends and transfers of the replicated queues travel with their headers; a
LocalQueue's never leave; a transfer request is a frame of its own."""

from __future__ import annotations

import pytest

from amps_emulator.journal import MemoryJournal
from amps_emulator.journal.record import RecordKind
from amps_emulator.protocol.codec import FrameDecoder, ProtocolError, split_frame
from amps_emulator.queues import Ack, Transfer, decode_event, encode_event
from amps_emulator.replication import Receiver, Selection, Sender
from amps_emulator.replication.wire import transfer_request, transfer_request_frame
from tests.unit.replication.test_replication_link import Applied, dest, pipe, pub


def queue_record(j: MemoryJournal, queue: str, event, headers=None):
    kind, body = encode_event(event)
    return j.append(topic=queue, client_name="A", kind=kind, body=body, message_type="json",
                    headers=headers)


def test_only_the_replicated_queues_records_travel_and_keep_their_headers():
    a, b = MemoryJournal(), MemoryJournal()
    pub(a, topic="work")
    queue_record(a, "jobs", Ack(1, "1|1|"))
    queue_record(a, "local-jobs", Ack(1, "1|1|"))
    queue_record(a, "group-jobs", Transfer(1, "1|1|", "B"), headers={"x-emu-queue-domain": "pair"})
    cancel_kind = RecordKind.QUEUE_CANCEL  # a lease's cancel only changes counters here
    a.append(topic="jobs", client_name="A", kind=cancel_kind, body=b"\x91\x01", message_type="json")
    sel = Selection(dest(), "B", queues=frozenset({"jobs", "group-jobs"}))
    port = Applied()
    snd = Sender(a, sel, local_name="A", local_group="G")
    snd.start({})
    assert pipe(snd, Receiver(b, port)) == 3
    kinds = [(r.topic, r.kind) for r in port.records]
    assert kinds == [("work", RecordKind.PUBLISH), ("jobs", RecordKind.QUEUE_ACK),
                     ("group-jobs", RecordKind.QUEUE_TRANSFER)]
    assert decode_event(port.records[1].kind, port.records[1].body) == Ack(1, "1|1|")
    assert port.records[2].headers["x-emu-queue-domain"] == "pair"
    # and not back to where they came from
    back = Sender(b, Selection(dest(name="A"), "A", queues=frozenset({"jobs", "group-jobs"})),
                  local_name="B", local_group="G")
    back.start({})
    assert back.poll() == []


def test_without_queue_names_no_queue_record_is_selected():
    a = MemoryJournal()
    rec = queue_record(a, "jobs", Ack(1, "1|1|"))
    assert not Selection(dest(), "B").wants(rec)


def test_transfer_request_frames():
    (payload,) = FrameDecoder().feed(transfer_request_frame("jobs", ["1|2|", "1|3|"]))
    h, _ = split_frame(payload)
    assert h["c"] == "repl_qreq" and transfer_request(h) == ("jobs", ["1|2|", "1|3|"])
    with pytest.raises(ProtocolError):
        transfer_request({"c": "repl_qreq"})
