"""What a ``repl_batch`` frame carries: the records a sender selected, in log order, as parts.

A :class:`PlainRun` is the common case in columns: publishes of one publisher to one topic
that the sender logged at once (a client's run of publishes: one log time) with no correlation
id, SowKey, expiration or headers; it names the shared fields once and lists the sequences,
``s`` and bodies, and the receiver journals it in one call
(``Journal.append_replicated_plain``). Anything else travels as :class:`Records`, each record
as the sender logged it (``Journal.append_replicated_run``).

The body of the frame is a MessagePack array of parts, each an array whose first element is its
tag (1: plain run, 2: records).
"""

from __future__ import annotations

from collections import deque
from typing import Any, cast

import msgspec

from amps_emulator.journal.record import JournalRecord, RecordKind

_PUBLISH = int(RecordKind.PUBLISH)


class PlainRun(msgspec.Struct, array_like=True, tag=1, frozen=True, gc=False):
    """Publishes of one publisher to one topic, logged at once upstream, with no options."""

    topic: str
    message_type: str
    client_name: str
    publisher_id: int
    timestamp: int  # upstream log time: their origin time
    last_position: int  # upstream position of the last
    sequences: list[int]
    client_seqs: list[int] | None
    bodies: list[bytes]


class Records(msgspec.Struct, array_like=True, tag=2, frozen=True, gc=False):
    """Records as the sender logged them (upstream positions, log times and headers)."""

    records: list[JournalRecord]


Part = PlainRun | Records

_encoder = msgspec.msgpack.Encoder()
encode_parts = _encoder.encode
_encode_parts_into = _encoder.encode_into
_json_encode = msgspec.json.encode
decode_parts = msgspec.msgpack.Decoder(list[Part]).decode


def is_plain(rec: JournalRecord) -> bool:
    """Whether ``rec`` can go in a :class:`PlainRun`: a publish with no options or headers."""
    return not rec.headers and rec.kind == _PUBLISH and rec.correlation_id is None \
        and rec.sow_key is None and rec.expiration is None


#: a batch frame holds at most this many bytes of bodies (and at least one record)
BATCH_BYTES = 1 << 20


class InFlight:
    """The upstream positions a sender sent and its peer has not acknowledged yet, as ranges
    of consecutive positions (a plain run is one)."""

    def __init__(self) -> None:
        self._ranges: deque[list[int]] = deque()  # [first, last], ascending
        self.count = 0  # positions in them
        self.last = 0  # the last position sent (0: none since :meth:`clear`)

    def add(self, first: int, last: int) -> None:
        self.last = last
        ranges = self._ranges
        if ranges and ranges[-1][1] == first - 1:
            ranges[-1][1] = last
        else:
            ranges.append([first, last])
        self.count += last - first + 1

    def ack(self, position: int) -> None:
        """Everything up to ``position`` is acknowledged."""
        ranges = self._ranges
        while ranges and ranges[0][0] <= position:
            head = ranges[0]
            if head[1] <= position:
                ranges.popleft()
                self.count -= head[1] - head[0] + 1
            else:
                self.count -= position + 1 - head[0]
                head[0] = position + 1

    @property
    def first(self) -> int | None:
        """The first position in flight (None: none is)."""
        return self._ranges[0][0] if self._ranges else None

    def clear(self) -> None:
        self._ranges.clear()
        self.count = 0
        self.last = 0


class Frames:
    """The ``repl_batch`` frames one poll of a sender makes: parts for as long as the records
    share their ``sv`` and :data:`BATCH_BYTES` is not reached, then a frame. The sender
    (``via``, of Group ``group``) notes every record sent in ``sent`` (positions in flight);
    :attr:`messages` and :attr:`bytes` say what went."""

    def __init__(self, via: str, group: str, sent: InFlight) -> None:
        self.via = via
        self.group = group
        self.sent = sent
        self.limit = BATCH_BYTES
        self.frames: list[bytes | bytearray] = []
        self.parts: list[Part] = []
        self.sv: str | None = None
        self.size = 0  # bytes of bodies in this frame's parts
        self.count = 0  # records in them
        self.messages = self.bytes = 0  # records and bytes in the frames made
        #: the open plain run: its first record, columns (in the poll's hands) and last position
        self.first: JournalRecord | None = None
        self.columns: tuple[list[int], list[int | None] | None, list[bytes]] = ([], None, [])
        self.last = 0
        self.records: list[JournalRecord] = []  # the open Records part

    def seen(self, sv: str | None) -> None:
        """The next record's ``sv``: another one, or a full frame, closes the frame."""
        if (sv != self.sv or self.size >= self.limit) and (
                self.first is not None or self.records or self.parts):
            self._frame()
        self.sv = sv

    def plain(self, rec: JournalRecord,
              columns: tuple[list[int], list[int] | None, list[bytes]] | None = None, size: int = 0
              ) -> tuple[list[int], list[int | None] | None, list[bytes]]:
        """Open a plain run at ``rec`` (:func:`is_plain`); its columns, which the poll extends
        with the rest of the run (setting :attr:`last` and :attr:`size`). ``columns``: the
        sequences, ``s`` and bodies of ``rec`` and the records after it in its run (the
        journal's, ``Journal.run_columns``), taken as they are, ``size`` bytes of bodies."""
        self._part()
        self.first = rec
        if columns is None:
            self.last = rec.position
            self.columns = ([rec.sequence], None if rec.client_seq is None else [rec.client_seq],
                            [rec.body])
            self.size += len(rec.body)
        else:
            seqs, client_seqs, bodies = columns
            self.last = rec.position + len(bodies) - 1
            self.columns = (seqs, cast("list[int | None] | None", client_seqs), bodies)
            self.size += size
        return self.columns

    def record(self, rec: JournalRecord) -> None:
        """A record that goes as it is logged (a :class:`Records` part)."""
        if self.first is not None:
            self._part()
        self.records.append(rec)
        self.size += len(rec.body)

    def _part(self) -> None:
        """Close the open part."""
        first = self.first
        if first is not None:
            seqs, client_seqs, bodies = self.columns
            # (a run's records all have an ``s``, or none has)
            self.parts.append(PlainRun(first.topic, first.message_type, first.client_name,
                                       first.publisher_id, first.timestamp, self.last, seqs,
                                       cast("list[int] | None", client_seqs), bodies))
            self.sent.add(self.last - len(seqs) + 1, self.last)  # (one run: consecutive)
            self.count += len(seqs)
            self.first = None
        elif self.records:
            self.parts.append(Records(self.records))
            for rec in self.records:
                self.sent.add(rec.position, rec.position)
            self.count += len(self.records)
            self.records = []

    def _frame(self) -> None:
        self._part()
        h: dict[str, Any] = {"c": "repl_batch", "via": self.via, "ug": self.group}
        if self.sv is not None:
            h["sv"] = self.sv
        f = bytearray(4)  # (the length prefix, set below) + header, then the parts encoded onto it
        f += _json_encode(h)
        _encode_parts_into(self.parts, f, -1)
        f[:4] = (len(f) - 4).to_bytes(4, "big")  # (``protocol.codec.frame``'s layout)
        self.frames.append(f)
        self.messages += self.count
        self.bytes += len(f)
        self.parts = []
        self.size = self.count = 0

    def close(self) -> list[bytes | bytearray]:
        """The frames, the last one closed."""
        if self.first is not None or self.records or self.parts:
            self._frame()
        return self.frames


__all__ = ["BATCH_BYTES", "Frames", "InFlight", "Part", "PlainRun", "Records", "decode_parts", "encode_parts",
           "is_plain"]
