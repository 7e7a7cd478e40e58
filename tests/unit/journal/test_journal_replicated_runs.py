"""A batch of replicated records appended as one run (``append_replicated_run``) or, for a
plain run, as columns (``append_replicated_plain``, with ``_speedups.replicated_run`` and its
twin ``replicated.replicated_run_py``) against the reference: ``append_replicated`` record by
record with the headers a link gives each. Same records, same bytes in the files (segment
rolls included), same per-publisher state; a held record is skipped and counted, a bad one
refuses the run before anything of it is appended."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator.journal import FileJournal, JournalRecord, MemoryJournal, RecordKind
from amps_emulator.journal.identity import ORIGIN_TS, PATH, SEEN, UPSTREAM_GROUP
from amps_emulator.journal.replicated import LINK_HEADERS, replicated_run, replicated_run_py
from amps_emulator.protocol.bookmarks import publisher_id_for
from tests.support.compiled import compiled
from tests.support.compiled import speedups as _speedups

CLOCK = 1_700_000_000.0
CLIENTS = ("pub-a", "pub-b")


def reference(j, upstream: list[JournalRecord], via: str, seen: str | None, group: str | None):
    """What a link appended for each record before batches: ``append_replicated``."""
    out, held = [], 0
    for up in upstream:
        headers = {k: v for k, v in up.headers.items() if k not in LINK_HEADERS}
        prior = up.headers.get(PATH)
        headers[PATH] = f"{prior},{via}" if prior else via
        if seen is not None:
            headers[SEEN] = seen
        if group is not None:
            headers[UPSTREAM_GROUP] = group
        rec = j.append_replicated(
            topic=up.topic, client_name=up.client_name, publisher_id=up.publisher_id,
            sequence=up.sequence, origin_timestamp=int(up.headers.get(ORIGIN_TS) or up.timestamp),
            body=up.body, kind=up.kind, client_seq=up.client_seq, correlation_id=up.correlation_id,
            sow_key=up.sow_key, expiration=up.expiration, message_type=up.message_type,
            headers=headers)
        if rec is None:
            held += 1
        else:
            out.append(rec)
    return out, held


@st.composite
def batches(draw):
    """Upstream records as another instance logged them: per publisher rising sequences (some
    at or below what the downstream will hold already), sometimes an ``s``, options, headers
    of their own or a path they came along."""
    out = []
    seq = {c: draw(st.integers(1, 5)) for c in CLIENTS}
    for pos in range(1, draw(st.integers(1, 40)) + 1):
        client = draw(st.sampled_from(CLIENTS))
        seq[client] += draw(st.integers(1, 3))
        headers = draw(st.sampled_from([{}, {}, {"filter": "/a = 1"},
                                        {PATH: "C", ORIGIN_TS: "123", SEEN: "{}",
                                         UPSTREAM_GROUP: "g"}]))
        out.append(JournalRecord(
            position=pos, kind=draw(st.sampled_from([1, 1, 1, 2, 3])), topic=draw(st.sampled_from("tu")),
            publisher_id=publisher_id_for(client), sequence=seq[client],
            timestamp=1_600_000_000_000_000 + pos // 4, client_name=client,
            client_seq=seq[client] if draw(st.booleans()) else None,
            correlation_id=draw(st.sampled_from([None, "cid"])), expiration=draw(st.sampled_from([None, 9])),
            message_type="json", headers=headers, body=draw(st.binary(max_size=300))))
    return out


def _journals(tmp, name: str, memory: bool):
    if memory:
        return MemoryJournal(segment_size=2048, clock=lambda: CLOCK)
    return FileJournal.open(tmp / name, segment_size=2048, clock=lambda: CLOCK)[0]


def _files(j) -> dict[str, bytes]:
    j.flush()
    return {n: open(os.path.join(j.directory, n), "rb").read()
            for n in sorted(os.listdir(j.directory)) if n.endswith(".journal")}


@settings(max_examples=60, deadline=None)
@given(upstream=batches(), held=st.integers(0, 4), memory=st.booleans(),
       seen=st.sampled_from([None, '{"":"1|2|"}']))
def test_a_run_appends_what_one_by_one_appends(tmp_path_factory, upstream, held, memory, seen):
    tmp = tmp_path_factory.mktemp("run")
    ref, run = _journals(tmp, "ref", memory), _journals(tmp, "run", memory)
    for j in (ref, run):  # the downstream holds some of each publisher's records already
        for c in CLIENTS:
            j.append(topic="t", client_name=c, body=b"x", message_type="json", client_seq=held or None)
    want = reference(ref, upstream, "A", seen, "G")
    got = run.append_replicated_run(upstream, "A", seen=seen, group="G")
    assert got == want
    assert run.high_water_marks() == ref.high_water_marks()
    for c in CLIENTS:
        assert run.last_seq_for_client(c, persisted=False) == ref.last_seq_for_client(c, persisted=False)
    assert run.arrivals_before(run.next_position) == ref.arrivals_before(ref.next_position)
    assert list(run.read(1)) == list(ref.read(1))
    if not memory:
        assert _files(run) == _files(ref)
        run.sync()
        ref.sync()
        for c in CLIENTS:
            assert run.last_seq_for_client(c) == ref.last_seq_for_client(c)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 30), skip=st.integers(0, 5), with_s=st.booleans(), memory=st.booleans(),
       size=st.sampled_from([10, 300, 70_000]))
def test_a_plain_run_appends_what_the_records_would(tmp_path_factory, n, skip, with_s, memory, size):
    tmp = tmp_path_factory.mktemp("plain")
    ref, run = _journals(tmp, "ref", memory), _journals(tmp, "run", memory)
    pid = publisher_id_for("pub-a")
    seqs = [100 + 2 * i for i in range(n)]
    bodies = [b"%d" % i * (size // 3 + 1) for i in range(n)]
    client_seqs = [50 + i for i in range(n)] if with_s else None
    for j in (ref, run):  # holds the first ``skip`` of them already
        if skip:
            j.append_replicated(topic="t", client_name="pub-a", publisher_id=pid,
                                sequence=seqs[0] + 2 * skip - 2, origin_timestamp=1, message_type="json")
    upstream = [JournalRecord(position=i + 1, kind=1, topic="t", publisher_id=pid, sequence=seqs[i],
                              timestamp=777, client_name="pub-a",
                              client_seq=None if client_seqs is None else client_seqs[i],
                              message_type="json", body=bodies[i]) for i in range(n)]
    want = reference(ref, upstream, "A", None, "G")
    got = run.append_replicated_plain("t", "json", "pub-a", pid, 777, seqs, client_seqs, bodies, "A",
                                      group="G")
    assert got == want
    assert len({id(r.headers) for r in got[0]}) <= 1  # one headers dict for the run
    assert run.high_water_marks() == ref.high_water_marks()
    assert run.arrivals_before(run.next_position) == ref.arrivals_before(ref.next_position)
    assert list(run.read(1)) == list(ref.read(1))
    if not memory:
        assert _files(run) == _files(ref)


def test_a_plain_run_whose_sequences_do_not_rise_is_taken_record_by_record():
    ref, run = MemoryJournal(clock=lambda: CLOCK), MemoryJournal(clock=lambda: CLOCK)
    pid = publisher_id_for("p")
    seqs, bodies = [5, 3, 9], [b"a", b"b", b"c"]
    upstream = [JournalRecord(position=i + 1, kind=1, topic="t", publisher_id=pid, sequence=s,
                              timestamp=7, client_name="p", message_type="json", body=bodies[i])
                for i, s in enumerate(seqs)]
    want = reference(ref, upstream, "A", None, None)
    assert run.append_replicated_plain("t", "json", "p", pid, 7, seqs, None, bodies, "A") == want
    assert [r.sequence for r in want[0]] == [5, 9] and want[1] == 1


@pytest.mark.parametrize("bad", [
    {"kind": int(RecordKind.CHECKPOINT)}, {"kind": -1}, {"publisher_id": 0}, {"publisher_id": 1 << 64},
    {"sequence": 0}, {"client_seq": 1 << 64}, {"expiration": 1 << 64}])
def test_a_bad_record_refuses_the_whole_run(bad):
    j = MemoryJournal()
    good = JournalRecord(position=1, kind=1, topic="t", publisher_id=7, sequence=1, timestamp=1,
                         client_name="p", message_type="json")
    fields = {**{f: getattr(good, f) for f in good.__struct_fields__}, "position": 2, "sequence": 2, **bad}
    with pytest.raises(ValueError):
        j.append_replicated_run([good, JournalRecord(**fields)], "A")
    assert j.last_position == 0 and j.high_water_marks() == {}


def test_arrival_runs_step_over_what_came_from_one_instance():
    j = MemoryJournal()
    j.append(topic="t", client_name="local", body=b"", message_type="json")  # 1
    for via, seqs in (("A", [1, 2, 3]), ("B", [1]), ("A", [4, 5])):  # 2-4, 5, 6-7
        ups = [JournalRecord(position=s, kind=1, topic="t", publisher_id=publisher_id_for(via + "p"),
                             sequence=s, timestamp=1, client_name=via + "p", message_type="json")
               for s in seqs]
        j.append_replicated_run(ups, via)
    assert [j.arrival_run("A", p) for p in range(1, 9)] == [None, 4, 4, 4, None, 7, 7, None]
    assert j.arrival_run("B", 5) == 5 and j.arrival_run("C", 2) is None


U64 = st.integers(1, (1 << 64) - 1)


@compiled
@settings(max_examples=80, deadline=None)
@given(sizes=st.lists(st.sampled_from([0, 1, 255, 256, 300, 65535, 65536, 65540]), max_size=8),
       with_s=st.booleans(), base=st.integers(0, 1 << 40), mark=st.integers(0, 30),
       interval=st.integers(1, 5), prefix=st.binary(max_size=20),
       headers=st.dictionaries(st.text(max_size=5), st.text(max_size=8), max_size=4))
def test_the_compiled_run_gives_what_its_twin_gives(sizes, with_s, base, mark, interval, prefix, headers):
    bodies = [bytes([i]) * size for i, size in enumerate(sizes)]  # (bin 8/16/32 lengths)
    n = len(bodies)
    seqs = [1000 + 3 * i for i in range(n)]
    client_seqs = [7 + i for i in range(n)] if with_s else None
    args = ("topic", "json", "pub", 42, 1_600_000_000_000_000, 10, seqs, client_seqs, headers, bodies,
            base, mark, interval)
    buf, twin_buf = bytearray(prefix), bytearray(prefix)
    out = _speedups.replicated_run(buf, JournalRecord, *args)
    assert out is not None
    assert out == replicated_run_py(twin_buf, JournalRecord, *args)
    assert bytes(buf) == bytes(twin_buf)
    assert all(r.headers is headers for r in out[0])
    assert _speedups.replicated_run(None, JournalRecord, *args)[0] == out[0]  # type: ignore[index]


@compiled
def test_the_compiled_run_declines_what_it_does_not_know():
    """A header whose value is not a str: the C function declines, the twin gives the records."""
    args = (None, JournalRecord, "t", "json", "p", 1, 1, 1, [1], None, {"k": 1}, [b"x"], 0, 0, 1)
    assert _speedups.replicated_run(*args) is None
    assert replicated_run(*args) == replicated_run_py(*args)


@pytest.mark.parametrize("memory", [True, False])
def test_a_plain_run_a_frame_cannot_hold_is_refused_with_nothing_appended(tmp_path, memory):
    j = MemoryJournal() if memory else FileJournal.open(tmp_path)[0]
    for pid, seqs, s in ((1 << 64, [1, 2], None), (7, [1, 1 << 64], None), (7, [1, 2], [1, 1 << 64])):
        with pytest.raises(ValueError):
            j.append_replicated_plain("t", "json", "p", pid, 1, seqs, s, [b"a", b"b"], "A")
    assert j.last_position == 0 and j.high_water_marks() == {}
