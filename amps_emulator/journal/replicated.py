"""Appending records another instance replicated here: one at a time
(:meth:`ReplicatedAppends.append_replicated`) or as a run that came over a link in one batch
(:meth:`ReplicatedAppends.append_replicated_run`).

A replicated record keeps its bookmark (publisher id and sequence), its origin time (the
``identity.ORIGIN_TS`` header) and its expiration; it gets a position and a log time here. A
record this instance holds already (:meth:`ReplicatedAppends.is_replicated_duplicate`: its
sequence, or its publisher's ``s``, is at or below what is held) is skipped, which the caller
still acknowledges. The storage keeps a record through the hooks ``_prepare_append`` (roll a
full segment, before the record takes a position) and ``_keep_appended``; a run, through
``_room`` (how many bytes of frames fit before the segment is full: a run counts its frames'
sizes and calls ``_prepare_append`` again only then) and ``_keep_run`` (its records at once).

A run takes the upstream's records as it logged them, and adds the link's headers (the path,
ending with the instance that sent them, what that instance had received, its Group). It
does per run what one record does per record (the clock, the per-publisher sequence index),
so a batch of a thousand records costs a few microseconds each.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from operator import lt
from typing import Any

from amps_emulator import accel

from .api import Durability, JournalClosedError
from .identity import ORIGIN_TS, PATH, SEEN, UPSTREAM_GROUP, SequenceIndex, sender_of
from .record import INTERNAL_KIND_MIN, JournalRecord, RecordKind, append_record_py, frame_size

_LIMIT = 1 << 64
_PUBLISH = int(RecordKind.PUBLISH)


def replicated_run_py(
    buf: bytearray | None,
    record_type: type[JournalRecord],
    topic: str,
    message_type: str,
    client_name: str,
    publisher_id: int,
    timestamp: int,
    position: int,
    sequences: list[int],
    client_seqs: list[int] | None,
    headers: dict[str, str],
    bodies: list[bytes],
    base: int,
    mark: int,
    interval: int,
) -> tuple[list[JournalRecord], list[tuple[int, int]]]:
    """The records of a run of replicated publishes of one publisher to one topic (kind
    PUBLISH, no correlation id, SowKey or expiration) at positions from ``position`` on, each
    with its ``sequences`` entry (and ``client_seqs`` entry: None, none has one) and the one
    ``headers`` dict, and, with ``buf``, their frames appended to it (``append_record_py``'s
    bytes). Returns the records and the index entries: (position, ``base`` + the frame's
    offset in ``buf``) of each record at or past ``mark``, which moves ``interval`` past each
    (as ``base.publish_run_py``). The pure-Python twin of ``_speedups.replicated_run``."""
    recs: list[JournalRecord] = []
    index: list[tuple[int, int]] = []
    for i, body in enumerate(bodies):
        cs = None if client_seqs is None else client_seqs[i]
        seq = sequences[i]
        recs.append(record_type(position, _PUBLISH, topic, publisher_id, seq, timestamp,
                                client_name, cs, None, None, None, message_type, headers, body))
        if buf is not None:
            if position >= mark:
                index.append((position, base + len(buf)))
                mark = position + interval
            append_record_py(buf, _PUBLISH, position, publisher_id, seq, timestamp, cs, topic,
                             message_type, client_name, None, None, None, headers, body)
        position += 1
    return recs, index


if accel.COMPILED:
    from amps_emulator import _speedups

    def replicated_run(
        buf: bytearray | None, record_type: type[JournalRecord], topic: str, message_type: str,
        client_name: str, publisher_id: int, timestamp: int, position: int, sequences: list[int],
        client_seqs: list[int] | None, headers: dict[str, str], bodies: list[bytes], base: int,
        mark: int, interval: int,
    ) -> tuple[list[JournalRecord], list[tuple[int, int]]]:
        """:func:`replicated_run_py` in C; the twin for input outside its plain shapes."""
        args = (buf, record_type, topic, message_type, client_name, publisher_id, timestamp,
                position, sequences, client_seqs, headers, bodies, base, mark, interval)
        out = _speedups.replicated_run(*args)
        return replicated_run_py(*args) if out is None else out
else:
    replicated_run = replicated_run_py
#: the headers a link gives a record (an upstream's own values of them are replaced)
LINK_HEADERS = frozenset({ORIGIN_TS, PATH, UPSTREAM_GROUP, SEEN})


def _link_headers(via: str, seen: str | None, group: str | None) -> dict[str, str]:
    """The headers a link from ``via`` gives a record published there (a record that came to
    ``via`` along a path gets that path before ``via``)."""
    link = {PATH: via}
    if seen is not None:
        link[SEEN] = seen
    if group is not None:
        link[UPSTREAM_GROUP] = group
    return link


def _check_message(kind: int, pid: int, seq: int, cs: int | None, expiration: int | None) -> None:
    """ValueError unless these are a replicable message's: a kind that is not journal-internal,
    a bookmark, an ``s`` and an expiration its frame can hold."""
    if not 0 <= kind < INTERNAL_KIND_MIN:
        raise ValueError(f"record kind {kind} is journal-internal or no kind")
    if not 0 < pid < _LIMIT or not 0 < seq < _LIMIT:
        raise ValueError(f"replicated bookmark {pid}|{seq}| is not a message's bookmark")
    if cs is not None and not 0 <= cs < _LIMIT:
        raise ValueError(f"client sequence {cs} is not in 0..2^64-1")
    if expiration is not None and not -_LIMIT // 2 <= expiration < _LIMIT:
        raise ValueError(f"expiration {expiration} is out of range")


def _check_messages(upstream: Sequence[JournalRecord]) -> None:
    """ValueError for the first of ``upstream`` that is not a replicable message."""
    for up in upstream:
        _check_message(up.kind, up.publisher_id, up.sequence, up.client_seq, up.expiration)


class ReplicatedAppends:
    """The replicated half of a journal's write path (a mixin of ``base.JournalCore``, whose
    state it reads and moves on)."""

    _pubids: dict[str, int]
    _pub_last: dict[int, int]
    _client_max: dict[int, int]
    _client_durable: dict[int, int]
    _unapplied_s: deque[tuple[int, int, int]]
    _next_position: int
    _last_ts: int
    _closed: bool
    _failure: BaseException | None
    _durability: Durability
    _clock: Callable[[], float]
    _seqidx: SequenceIndex | None

    def _prepare_append(self) -> Any:  # pragma: no cover - abstract
        """Make room for the next record (roll or begin a segment); what
        :meth:`_keep_appended` needs."""
        raise NotImplementedError

    def _keep_appended(self, where: Any, rec: JournalRecord) -> None:  # pragma: no cover
        """Store ``rec``, a record just made (``where``: from :meth:`_prepare_append`)."""
        raise NotImplementedError

    def _room(self, where: Any) -> int:  # pragma: no cover - abstract
        """Bytes of frames ``where`` takes before it is full: the record that reaches it is
        the last before the next :meth:`_prepare_append` (which rolls)."""
        raise NotImplementedError

    def _keep_run(self, where: Any, recs: list[JournalRecord]) -> None:  # pragma: no cover
        """Store ``recs``, records just made, all in ``where``."""
        raise NotImplementedError

    def _note_run(self, pid: int, first: int, sequences: list[int],
                  client_seqs: list[int] | None) -> None:  # pragma: no cover - in JournalCore
        """The per-publisher bookkeeping for a run of records just made (``base.JournalCore``)."""
        raise NotImplementedError

    def _note_client_seq(self, position: int, pid: int,
                         client_seq: int) -> None:  # pragma: no cover - in JournalCore
        """Note the ``s`` of a record just made (``base.JournalCore``)."""
        raise NotImplementedError

    def _closed_error(self) -> JournalClosedError:
        return JournalClosedError(
            "journal is closed" if self._failure is None else f"journal failed: {self._failure}")

    def is_replicated_duplicate(self, publisher_id: int, sequence: int, client_seq: int | None) -> bool:
        """True when this instance already holds that message: its publisher's sequence is at
        or below the last one here, or its ``s`` is at or below the highest ``s`` appended for
        that publisher (the same publish reached us by another route, e.g. resent by the
        publisher's store after a failover)."""
        if sequence <= self._pub_last.get(publisher_id, 0):
            return True
        return bool(client_seq) and client_seq is not None \
            and client_seq <= self._client_max.get(publisher_id, 0)

    def append_replicated(
        self,
        *,
        topic: str,
        client_name: str,
        publisher_id: int,
        sequence: int,
        origin_timestamp: int,
        body: bytes = b"",
        kind: int = RecordKind.PUBLISH,
        client_seq: int | None = None,
        correlation_id: str | None = None,
        sow_key: str | None = None,
        expiration: int | None = None,
        message_type: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> JournalRecord | None:
        """Append a record replicated from another instance with its original bookmark, origin
        time (in the ``identity.ORIGIN_TS`` header) and expiration; None (nothing appended)
        when this instance already holds it (:meth:`is_replicated_duplicate`), which the
        caller still acknowledges."""
        where = self._prepare_append()
        if self._closed:
            raise self._closed_error()
        _check_message(int(kind), publisher_id, sequence, client_seq, expiration)
        if self.is_replicated_duplicate(publisher_id, sequence, client_seq):
            return None
        position = self._next_position
        ts = int(self._clock() * 1_000_000)
        if ts < self._last_ts:
            ts = self._last_ts
        self._last_ts = ts
        if client_name:
            self._pubids.setdefault(client_name, publisher_id)
        all_headers = dict(headers) if headers else {}
        all_headers.setdefault(ORIGIN_TS, str(origin_timestamp))
        rec = JournalRecord(
            position=position, kind=int(kind), topic=topic, publisher_id=publisher_id,
            sequence=sequence, timestamp=ts, client_name=client_name, client_seq=client_seq,
            correlation_id=correlation_id, sow_key=sow_key, expiration=expiration,
            message_type=message_type, headers=all_headers, body=bytes(body),
        )
        self._next_position = position + 1
        self._pub_last[publisher_id] = sequence
        if self._seqidx is not None:
            self._seqidx.add(publisher_id, sequence, position)
            sender = sender_of(rec)
            if sender is not None:
                self._seqidx.arrived(sender, position)
        if client_seq is not None:
            self._note_client_seq(position, publisher_id, client_seq)
        self._keep_appended(where, rec)
        return rec

    def _append_plain(self, topic: str, message_type: str, client_name: str, publisher_id: int,
                      sequences: list[int], client_seqs: list[int] | None, headers: dict[str, str],
                      bodies: list[bytes]) -> list[JournalRecord]:  # pragma: no cover - abstract
        """Store a plain replicated run (:meth:`append_replicated_plain`, past its checks),
        making its records with :meth:`_make_replicated_plain`, segment by segment."""
        raise NotImplementedError

    def _make_replicated_plain(self, topic: str, message_type: str, client_name: str,
                               publisher_id: int, sequences: list[int], client_seqs: list[int] | None,
                               headers: dict[str, str], bodies: list[bytes],
                               buf: bytearray | None = None, base: int = 0, mark: int = 0,
                               interval: int = 1) -> tuple[list[JournalRecord], list[tuple[int, int]]]:
        """The records of (part of) a plain replicated run at the next positions, and the
        per-publisher bookkeeping for them; with ``buf``, their frames too (see
        :func:`replicated_run_py` for ``base``, ``mark`` and ``interval``)."""
        if self._closed:
            raise self._closed_error()
        first = self._next_position
        ts = int(self._clock() * 1_000_000)
        if ts < self._last_ts:
            ts = self._last_ts
        self._last_ts = ts
        recs, index = replicated_run(buf, JournalRecord, topic, message_type, client_name,
                                     publisher_id, ts, first, sequences, client_seqs, headers, bodies,
                                     base, mark, interval)
        self._note_run(publisher_id, first, sequences, client_seqs)
        return recs, index

    def append_replicated_plain(self, topic: str, message_type: str, client_name: str,
                                publisher_id: int, origin_timestamp: int, sequences: list[int],
                                client_seqs: list[int] | None, bodies: list[bytes], via: str, *,
                                seen: str | None = None,
                                group: str | None = None) -> tuple[list[JournalRecord], int]:
        """:meth:`append_replicated_run` for a plain run: publishes of one publisher to one
        topic that ``via`` logged at once (at ``origin_timestamp``) with no correlation id,
        SowKey, expiration or headers, given as columns. The records made share one headers
        dict (nothing changes a record's headers). A run whose sequences (or ``s``) do not
        rise is taken record by record."""
        n = len(bodies)
        if not n:
            return [], 0
        if len(sequences) != n or (client_seqs is not None and len(client_seqs) != n):
            raise ValueError("a replicated run's columns differ in length")
        rising = all(map(lt, sequences, sequences[1:])) and (
            client_seqs is None or (client_seqs[0] > 0 and all(map(lt, client_seqs, client_seqs[1:]))))
        if not rising or not 0 < publisher_id < _LIMIT or not 0 < sequences[0] < _LIMIT \
                or not sequences[-1] < _LIMIT or (client_seqs is not None and client_seqs[-1] >= _LIMIT):
            return self.append_replicated_run(
                [JournalRecord(0, _PUBLISH, topic, publisher_id, seq, origin_timestamp, client_name,
                               None if client_seqs is None else client_seqs[i], None, None, None,
                               message_type, {}, bodies[i]) for i, seq in enumerate(sequences)],
                via, seen=seen, group=group)
        last = self._pub_last.get(publisher_id, 0)
        held = self._client_max.get(publisher_id, 0)
        k = 0  # (both rise: what is held here already is a prefix)
        while k < n and (sequences[k] <= last or (client_seqs is not None and client_seqs[k] <= held)):
            k += 1
        if k == n:
            return [], n
        if k:
            sequences, bodies = sequences[k:], bodies[k:]
            client_seqs = None if client_seqs is None else client_seqs[k:]
        headers = _link_headers(via, seen, group)
        headers[ORIGIN_TS] = str(origin_timestamp)
        if client_name and client_name not in self._pubids:
            self._pubids[client_name] = publisher_id
        recs = self._append_plain(topic, message_type, client_name, publisher_id, sequences,
                                  client_seqs, headers, bodies)
        if self._seqidx is not None and recs:
            self._seqidx.arrived_run(via, range(recs[0].position, recs[-1].position + 1))  # (consecutive)
        return recs, k

    def append_replicated_run(self, upstream: Sequence[JournalRecord], via: str, *,
                              seen: str | None = None,
                              group: str | None = None) -> tuple[list[JournalRecord], int]:
        """Append the records instance ``via`` sent in one batch, each as ``via`` logged it
        (its position, log time and headers there): what :meth:`append_replicated` does for
        each, with the link's headers: the path (the record's, then ``via``), ``seen`` (what
        ``via`` had received before them) and ``group`` (``via``'s Group). Returns the records
        appended, in order, and how many were skipped as held here already. A record that is
        not a message (a journal-internal kind, no bookmark) raises ValueError before any
        record of the run is appended."""
        link = _link_headers(via, seen, group)
        pub_last, client_max, pubids = self._pub_last, self._client_max, self._pubids
        prepare, keep, seqidx = self._prepare_append, self._keep_run, self._seqidx
        _check_messages(upstream)  # (first: a bad record leaves nothing of the run appended)
        out: list[JournalRecord] = []
        skipped = 0
        # records with no headers of their own logged at the same time upstream share theirs
        # here (nothing changes a record's headers)
        shared: dict[str, str] = {}
        shared_ts = -1
        room = 0  # bytes the storage takes before its next _prepare_append (0: prepare first)
        made: list[JournalRecord] = []  # records made and not yet kept
        where = None
        ts = int(self._clock() * 1_000_000)
        try:
            for up in upstream:
                kind, pid, seq, cs = up.kind, up.publisher_id, up.sequence, up.client_seq
                if seq <= pub_last.get(pid, 0) or (cs and cs <= client_max.get(pid, 0)):
                    skipped += 1
                    continue
                headers = up.headers
                if headers:
                    prior = headers.get(PATH)
                    headers = {k: v for k, v in headers.items() if k not in LINK_HEADERS}
                    headers.update(link)
                    if prior:
                        headers[PATH] = f"{prior},{via}"
                    headers[ORIGIN_TS] = up.headers.get(ORIGIN_TS) or str(up.timestamp)
                elif up.timestamp == shared_ts:  # (a run logged at once upstream: one dict)
                    headers = shared
                else:
                    shared_ts = up.timestamp
                    headers = shared = {**link, ORIGIN_TS: str(shared_ts)}
                if room <= 0:  # the segment is full (or the run begins): keep what was made,
                    if made:  # then roll
                        keep(where, made)
                        made = []
                    where = prepare()
                    if self._closed:
                        raise self._closed_error()
                    room = self._room(where)
                    if ts < self._last_ts:  # (a roll's checkpoint may have taken a later time)
                        ts = self._last_ts
                position = self._next_position
                cn = up.client_name
                rec = JournalRecord(position, kind, up.topic, pid, seq, ts, cn, cs, up.correlation_id,
                                    up.sow_key, up.expiration, up.message_type, headers, up.body)
                self._next_position = position + 1
                self._last_ts = ts
                pub_last[pid] = seq
                if cn and cn not in pubids:
                    pubids[cn] = pid
                if seqidx is not None:
                    seqidx.add(pid, seq, position)
                if cs is not None:
                    self._note_client_seq(position, pid, cs)
                room -= frame_size(up.topic, up.message_type, cn, up.correlation_id, up.sow_key,
                                   up.expiration, headers, up.body)
                made.append(rec)
                out.append(rec)
            if made:
                keep(where, made)
                made = []
        finally:
            if seqidx is not None and out:
                seqidx.arrived_run(via, [r.position for r in out])
        return out, skipped


__all__ = ["LINK_HEADERS", "ReplicatedAppends"]
