"""A run of plain publishes (``Journal.append_publishes``) leaves the journal exactly as the same
publishes appended one by one: the same records, bookmarks and de-duplication marks, the same
segments rolled before the same records, the same bytes on disk."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amps_emulator.journal import FileJournal, MemoryJournal
from amps_emulator.journal.record import RecordKind

# a run: (client, topic, body lengths, client sequences from where, or None)
RUNS = st.lists(st.tuples(st.sampled_from(["pub-a", "pub-b"]), st.sampled_from(["orders", "fills"]),
                          st.lists(st.sampled_from([0, 1, 40, 255, 256, 300, 70_000]), min_size=1,
                                   max_size=12),
                          st.none() | st.integers(0, 30)), min_size=1, max_size=8)
SEGMENT = st.sampled_from([600, 2_000, 50_000, 10_000_000])


def _bodies(n: int, lengths: list[int]) -> list[bytes]:
    return [bytes([65 + (n + i) % 26]) * k for i, k in enumerate(lengths)]


def _feed(journal, runs, one_by_one: bool) -> None:
    seqs_next = {"pub-a": 1, "pub-b": 1}
    for n, (client, topic, lengths, seq_from) in enumerate(runs):
        bodies = _bodies(n, lengths)
        seqs = None
        if seq_from is not None:  # increasing, above what the client sent before (a publish store)
            first = max(seq_from, seqs_next[client])
            seqs = list(range(first, first + len(bodies)))
            seqs_next[client] = first + len(bodies)
        if one_by_one:
            for i, body in enumerate(bodies):
                journal.append(topic=topic, client_name=client, body=body, message_type="json",
                               client_seq=None if seqs is None else seqs[i])
        else:
            journal.append_publishes(topic, "json", client, bodies, seqs)
        if n % 3 == 2:
            journal.flush()
    journal.flush()


def _state(journal) -> tuple:
    records = list(journal.read(1, include_internal=True))
    return (records, journal.next_position, dict(journal._pub_last), dict(journal._client_max),
            [journal.last_seq_for_client(c, persisted=False) for c in ("pub-a", "pub-b")])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=RUNS, segment=SEGMENT)
def test_a_file_journal_holds_a_run_as_the_same_publishes_one_by_one(tmp_path_factory, runs,
                                                                      segment) -> None:
    base = tmp_path_factory.mktemp("runs")
    journals = []
    for name, one_by_one in (("one", True), ("run", False)):
        j, _report = FileJournal.open(base / name, segment_size=segment, clock=lambda: 1_000.0,
                                      index_interval=3)
        _feed(j, runs, one_by_one)
        journals.append(j)
    one, run = journals
    try:
        assert _state(run) == _state(one)
        assert [(s.first_position, s.count, s.last_position, s.size) for s in run.segments] == \
            [(s.first_position, s.count, s.last_position, s.size) for s in one.segments]
        assert [(list(s.index.positions), list(s.index.offsets)) for s in run.segments] == \
            [(list(s.index.positions), list(s.index.offsets)) for s in one.segments]
        for a, b in zip(sorted(os.listdir(base / "one")), sorted(os.listdir(base / "run")),
                        strict=True):
            if a.endswith(".seg") or a == b:
                assert Path(base / "run", b).read_bytes() == Path(base / "one", a).read_bytes(), a
        for pub in ("pub-a", "pub-b"):
            for rec in one.read(1):
                if rec.client_name == pub:
                    assert run.position_of(rec.bookmark) == one.position_of(rec.bookmark)
    finally:
        one.close()
        run.close()


@settings(max_examples=60, deadline=None)
@given(runs=RUNS, segment=SEGMENT)
def test_a_memory_journal_holds_a_run_as_the_same_publishes_one_by_one(runs, segment) -> None:
    one = MemoryJournal(segment_size=segment, clock=lambda: 1_000.0)
    run = MemoryJournal(segment_size=segment, clock=lambda: 1_000.0)
    _feed(one, runs, True)
    _feed(run, runs, False)
    assert _state(run) == _state(one)
    assert [(s.first_position, s.size, s.count) for s in run._segs] == \
        [(s.first_position, s.size, s.count) for s in one._segs]


def test_a_run_is_publish_records_with_the_publishers_bookmarks() -> None:
    j = MemoryJournal(clock=lambda: 5.0)
    j.append(topic="orders", client_name="pub", body=b"{}", message_type="json")
    recs = j.append_publishes("orders", "json", "pub", [b"1", b"2", b"3"], [7, 8, 20])
    assert [(r.position, r.kind, r.sequence, r.client_seq, r.timestamp) for r in recs] == [
        (2, RecordKind.PUBLISH, 7, 7, 5_000_000), (3, RecordKind.PUBLISH, 8, 8, 5_000_000),
        (4, RecordKind.PUBLISH, 20, 20, 5_000_000)]
    assert j.is_duplicate("pub", 20) and not j.is_duplicate("pub", 21)
    assert j.position_of(recs[1].bookmark) == 3
