"""One contract suite, run against every Journal implementation (nats store_test.go style)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amps_emulator.journal import (
    EPOCH,
    NOW,
    Bookmark,
    BookmarkTimestamp,
    FileJournal,
    Journal,
    JournalClosedError,
    MemoryJournal,
    RecordKind,
    format_timestamp,
    parse_bookmark,
    publisher_id_for,
)
from amps_emulator.sow.testing import FakeClock


@pytest.fixture(params=["memory", "file"])
def make(request, tmp_path):
    """Factory: make(**options) -> journal of the parametrised implementation."""
    opened = []
    counter = iter(range(1000))

    def factory(**kw):
        if request.param == "memory":
            j = MemoryJournal(**kw)
        else:
            j, report = FileJournal.open(tmp_path / f"j{next(counter)}", **kw)
            assert report.created
        opened.append(j)
        return j

    factory.kind = request.param
    yield factory
    for j in opened:
        j.close()


def publish(j, i, client="pub-a", **kw):
    return j.append(topic=kw.pop("topic", "orders"), client_name=client, body=f"m{i}".encode(), **kw)


def first_read_from(j, pos):
    """Position of the first (non-internal) record a replay from ``pos`` delivers."""
    return next((x.position for x in j.read(pos)), j.next_position)


def commit(j):
    j.flush()
    return j.sync()


# ---------------------------------------------------------------- basics
def test_implements_protocol(make):
    j = make()
    assert isinstance(j, Journal)
    assert (j.first_position, j.last_position, j.next_position) == (1, 0, 1)
    assert list(j.read()) == []


def test_append_then_read_returns_every_field_in_order(make):
    j = make(clock=FakeClock(1_800_000_000.0))
    recs = [
        j.append(
            topic="orders",
            client_name="alice",
            body=b'{"id":1}',
            client_seq=7,
            correlation_id="cid-1",
            sow_key="k1",
            expiration=30,
            message_type="json",
            headers={"o": "replace"},
        ),
        j.append(topic="quotes", client_name="bob", kind=RecordKind.DELTA_PUBLISH, body=b"\x00\xff"),
        j.append(topic="orders", client_name="alice", kind=RecordKind.SOW_DELETE, sow_key="k1"),
        j.append(topic="q", client_name="svc", kind=RecordKind.QUEUE_ACK, body=b""),
    ]
    assert [r.position for r in recs] == [1, 2, 3, 4]
    assert list(j.read()) == recs  # read from the write buffer
    commit(j)
    assert list(j.read()) == recs  # and from storage
    first = recs[0]
    assert (first.client_seq, first.correlation_id, first.sow_key, first.expiration) == (7, "cid-1", "k1", 30)
    assert (first.message_type, first.headers, first.body) == ("json", {"o": "replace"}, b'{"id":1}')
    assert recs[1].client_seq is None and recs[1].kind == RecordKind.DELTA_PUBLISH
    assert [r.position for r in j.read(3)] == [3, 4]
    assert list(j.read(5)) == []


def test_internal_kinds_cannot_be_appended(make):
    j = make()
    with pytest.raises(ValueError):
        j.append(topic="t", client_name="c", kind=RecordKind.CHECKPOINT)


def test_bookmarks_unique_and_monotonic(make):
    j = make(segment_size=2048)
    clients = ["a", "b", "c"]
    recs = [publish(j, i, client=clients[i % 3]) for i in range(200)]
    commit(j)
    bms = [r.bookmark for r in j.read()]
    assert len(set(bms)) == len(bms) == 200
    assert all(x.sequence < y.sequence for x, y in zip(bms, bms[1:]))  # monotonic in log order
    for c in clients:
        mine = [r for r in recs if r.client_name == c]
        assert {r.publisher_id for r in mine} == {publisher_id_for(c)}
        assert all(x.sequence < y.sequence for x, y in zip(mine, mine[1:]))
        assert j.last_sequence_for_publisher(publisher_id_for(c)) == mine[-1].sequence
        assert j.last_bookmark_for_client(c) == mine[-1].bookmark
    assert recs[0].bookmark_str == f"{publisher_id_for('a')}|{recs[0].sequence}|"
    assert parse_bookmark(recs[5].bookmark_str) == recs[5].bookmark
    assert j.last_bookmark_for_client("nobody") is None


def test_positions_strictly_increase_across_segments(make):
    j = make(segment_size=1024)
    for i in range(300):
        publish(j, i)
        if i % 17 == 0:
            commit(j)
    commit(j)
    positions = [r.position for r in j.read()]
    assert len(positions) == 300
    assert all(a < b for a, b in zip(positions, positions[1:]))
    assert [r.body for r in j.read()] == [f"m{i}".encode() for i in range(300)]


# ---------------------------------------------------------------- bookmark lookups
def test_position_after_bookmark(make):
    j = make(segment_size=1500, clock=FakeClock(1_800_000_000.0))
    recs = [publish(j, i, client="ab"[i % 2]) for i in range(120)]
    commit(j)
    for extra in range(3):  # half on disk, some still buffered
        recs.append(publish(j, 1000 + extra, client="a"))
    positions = [r.position for r in recs]

    for i, r in enumerate(recs):
        expected = positions[i + 1] if i + 1 < len(recs) else j.next_position
        assert r.position < j.position_after_bookmark(r.bookmark) <= expected
        assert first_read_from(j, j.position_after_bookmark(r.bookmark)) == expected
        assert j.position_after_bookmark(r.bookmark_str) == j.position_after_bookmark(r.bookmark)
    assert j.position_after_bookmark(EPOCH) == j.first_position == 1
    assert j.position_after_bookmark("0") == 1
    assert j.position_after_bookmark("recent") == 1
    assert j.position_after_bookmark(NOW) == j.next_position
    assert j.position_after_bookmark("0|1|") == j.next_position
    a, b = recs[10], recs[11]
    assert a.publisher_id != b.publisher_id
    # a sequence this publisher does not have, but later ones exist: start at its next record
    # (docs/design/replication.md 3.3: resolve by publisher and sequence, never by position)
    later = next(r for r in recs if r.publisher_id == a.publisher_id and r.sequence > b.sequence)
    if b.sequence not in {r.sequence for r in recs if r.publisher_id == a.publisher_id}:
        assert j.position_after_bookmark(Bookmark(a.publisher_id, b.sequence)) == later.position
    # unknown publisher; sequence in the future
    assert j.position_after_bookmark(Bookmark(12345, a.sequence)) is None
    assert j.position_after_bookmark(Bookmark(a.publisher_id, j.next_position + 5)) is None
    assert j.position_after_bookmark(Bookmark(0, 5)) is None
    # comma list: the earliest of those found
    lst = f"{recs[50].bookmark_str},{recs[20].bookmark_str},{publisher_id_for('zz')}|3|"
    assert first_read_from(j, j.position_after_bookmark(lst)) == positions[21]
    assert j.position_after_bookmark(f"{publisher_id_for('zz')}|3|,99|99|") is None


def test_position_at_time(make):
    clock = FakeClock(1_800_000_000.0)
    j = make(segment_size=1500, clock=clock)
    recs = []
    for i in range(100):
        recs.append(publish(j, i))
        if i % 3 == 2:
            clock.advance(1.0)
        if i == 60:
            commit(j)
    ts = [r.timestamp for r in recs]
    assert ts == sorted(ts)
    for r in recs:
        first_same = next(x for x in recs if x.timestamp == r.timestamp)
        assert first_read_from(j, j.position_at_time(r.timestamp)) == first_same.position
        assert j.position_at_time(r.timestamp) > next((x.position for x in recs if x.timestamp < r.timestamp), 0) - 1
        pos = j.position_after_bookmark(BookmarkTimestamp(r.timestamp))
        assert pos == j.position_at_time(r.timestamp)
    assert j.position_at_time(0) == 1
    assert j.position_at_time(ts[-1] + 1) == j.next_position
    text = format_timestamp(recs[30].timestamp)
    expected = next(x for x in recs if x.timestamp >= recs[30].timestamp).position
    assert first_read_from(j, j.position_after_bookmark(text)) == expected


def test_timestamps_never_go_backwards(make):
    clock = FakeClock(1_800_000_000.0)
    j = make(clock=clock)
    a = publish(j, 1)
    clock.advance(-60)  # wall clock stepped back
    b = publish(j, 2)
    clock.advance(120)
    c = publish(j, 3)
    assert a.timestamp == 1_800_000_000_000_000
    assert b.timestamp == a.timestamp
    assert c.timestamp == a.timestamp + 60_000_000


def test_range_positions(make):
    clock = FakeClock(1_800_000_000.0)
    j = make(clock=clock)
    recs = []
    for i in range(10):
        recs.append(publish(j, i))
        clock.advance(1)
    commit(j)
    p = [r.position for r in recs]
    b2, b6 = recs[2].bookmark_str, recs[6].bookmark_str
    assert j.range_positions(parse_bookmark(f"[{b2}:{b6}]")) == (p[2], p[6] + 1)
    assert j.range_positions(parse_bookmark(f"({b2}:{b6})")) == (p[3], p[6])
    t3, t5 = format_timestamp(recs[3].timestamp), format_timestamp(recs[5].timestamp)
    assert j.range_positions(parse_bookmark(f"[{t3}:{t5}]")) == (p[3], p[6])
    assert j.range_positions(parse_bookmark(f"({t3}:{t5})")) == (p[4], p[5])
    assert j.range_positions(parse_bookmark(f"[0:{b6})")) == (1, p[6])
    assert j.range_positions(parse_bookmark(f"[{b2}:now]")) == (p[2], j.next_position)
    assert j.position_after_bookmark(parse_bookmark(f"({b2}:{b6}]")) == p[3]
    assert j.range_positions(parse_bookmark("[77|1|:now]")) == (None, j.next_position)


def test_record_at(make):
    j = make()
    recs = [publish(j, i) for i in range(5)]
    commit(j)
    more = publish(j, 5)
    assert j.record_at(recs[2].position) == recs[2]
    assert j.record_at(more.position) == more
    assert j.record_at(0) is None
    assert j.record_at(j.next_position) is None


# ---------------------------------------------------------------- reading while appending
def test_read_while_appending_catches_up(make):
    j = make(segment_size=1024)
    for i in range(50):
        publish(j, i)
    commit(j)
    it = j.read(1)
    got = [next(it) for _ in range(10)]
    for i in range(50, 80):  # appended while the reader is mid-way, some flushed, some not
        publish(j, i)
        if i == 65:
            commit(j)
    got.extend(it)
    assert [r.body for r in got] == [f"m{i}".encode() for i in range(80)]
    assert list(it) == []
    publish(j, 80)
    assert [r.body for r in j.read(got[-1].position + 1)] == [b"m80"]


def test_reader_in_write_buffer_survives_flush(make):
    j = make()
    for i in range(5):
        publish(j, i)
    it = j.read(2)
    assert next(it).body == b"m1"  # from the unflushed buffer
    commit(j)  # buffer moves to storage under the reader
    publish(j, 5)
    assert [r.body for r in it] == [b"m2", b"m3", b"m4", b"m5"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.sampled_from(["append", "append", "append", "commit", "flush", "next"]), max_size=120))
def test_reader_matches_model_under_interleaving(make, ops):
    j = make(segment_size=600)
    bodies: list[bytes] = []
    it = j.read(1)
    seen: list[bytes] = []
    last = None  # the last record read; set whenever ``seen`` is not empty
    for op in ops:
        if op == "append":
            bodies.append(publish(j, len(bodies)).body)
        elif op == "commit":
            commit(j)
        elif op == "flush":
            j.flush()
        else:
            r = next(it, None)
            if r is None:
                it = j.read(j.next_position if not seen else j.position_after_bookmark(last.bookmark))
            else:
                seen.append(r.body)
                last = r
    if seen:
        seen.extend(r.body for r in j.read(j.position_after_bookmark(last.bookmark)))
    else:
        seen = [r.body for r in j.read()]
    assert seen == bodies


# ---------------------------------------------------------------- de-duplication & durability
def test_publish_dedup(make):
    j = make()
    assert not j.is_duplicate("pub", 1)
    assert j.last_seq_for_client("pub") == 0
    for s in (100, 101, 105):
        j.append(topic="t", client_name="pub", client_seq=s)
    j.append(topic="t", client_name="other", client_seq=3)
    assert j.is_duplicate("pub", 100) and j.is_duplicate("pub", 105) and j.is_duplicate("pub", 2)
    assert not j.is_duplicate("pub", 106)
    assert not j.is_duplicate("other", 4) and j.is_duplicate("other", 3)
    assert j.last_seq_for_client("pub", persisted=False) == 105
    commit(j)
    assert j.last_seq_for_client("pub") == 105
    assert j.last_seq_for_client("other") == 3
    assert j.last_seq_for_client("never") == 0


def test_commit_makes_everything_durable(make):
    j = make()
    for i in range(10):
        publish(j, i)
    assert commit(j) == j.last_position == 10
    assert j.durable_position == 10


def test_closed_journal_rejects_appends(make):
    j = make()
    publish(j, 0)
    j.close()
    with pytest.raises(JournalClosedError):
        publish(j, 1)


# ---------------------------------------------------------------- retention (both implementations)
def test_retention_by_size_removes_oldest_whole_segments_but_not_pinned(make):
    j = make(segment_size=1000, retention_bytes=3000)
    recs = []
    for i in range(200):
        recs.append(publish(j, i))
        if i % 10 == 9:
            commit(j)
    commit(j)
    pinned = recs[40].position  # a live replay's next position
    res = j.enforce_retention([pinned, recs[150].position])
    assert res.blocked_by_pin == pinned
    assert 1 < j.first_position <= pinned  # older segments went, the pinned one stayed
    assert next(j.read(pinned)) == recs[40]
    res = j.enforce_retention([])
    assert res.removed and res.records_removed > 0
    assert j.first_position > pinned
    remaining = [r.body for r in j.read()]
    assert remaining == [f"m{i}".encode() for i in range(200 - len(remaining), 200)]
    assert j.position_after_bookmark(EPOCH) == j.first_position
    assert j.enforce_retention([]).removed == ()  # now within budget


def test_retention_by_age(make):
    clock = FakeClock(1_800_000_000.0)
    j = make(segment_size=800, retention_age=3600, clock=clock)
    for i in range(40):
        publish(j, i)
    commit(j)
    old_end = j.last_position
    clock.advance(1800)
    for i in range(40, 80):
        publish(j, i)
    commit(j)
    assert j.enforce_retention([]).removed == ()
    clock.advance(2000)  # the first batch is now 3800 s old, the second 2000 s
    res = j.enforce_retention([])
    assert res.removed
    bodies = [r.body for r in j.read()]
    assert b"m0" not in bodies and b"m79" in bodies and b"m40" in bodies
    assert j.first_position <= old_end + 2  # nothing of the newer batch went
