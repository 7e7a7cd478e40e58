"""A message's bookmark is the same on every instance: (publisher id, the publisher's sequence),
resolved by that pair and not by local log position; replicated records keep their bookmark,
origin time and expiration; duplicates by publisher + sequence (or ``s``) are not appended."""

from __future__ import annotations

import pytest

from amps_emulator.journal import DuplicatePublish, FileJournal, MemoryJournal
from amps_emulator.journal.identity import ORIGIN_TS, SequenceIndex, origin_timestamp
from amps_emulator.protocol.bookmarks import NOW, Bookmark, BookmarkRange, parse_bookmark, publisher_id_for


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture(params=["memory", "file"])
def make(request, tmp_path):
    opened = []

    def _make(name: str = "j", **kw):
        if request.param == "memory":
            j = MemoryJournal(**kw)
        else:
            j, _ = FileJournal.open(tmp_path / name, durability="memory", **kw)
        opened.append(j)
        return j

    yield _make
    for j in opened:
        j.close()


def replicate(src, dst, from_position: int = 1) -> list:
    """Copy ``src``'s records to ``dst`` as replication would; returns what ``dst`` appended."""
    out = []
    for r in src.read(from_position):
        got = dst.append_replicated(
            topic=r.topic, client_name=r.client_name, publisher_id=r.publisher_id, sequence=r.sequence,
            origin_timestamp=origin_timestamp(r), body=r.body, kind=r.kind, client_seq=r.client_seq,
            sow_key=r.sow_key, expiration=r.expiration, message_type=r.message_type)
        if got is not None:
            out.append(got)
    return out


def test_sequence_is_the_publishers_s_or_the_position_and_always_grows(make):
    j = make()
    a = j.append(topic="t", client_name="pub", client_seq=1_700_000_000_000_000_001)
    b = j.append(topic="t", client_name="other")
    c = j.append(topic="t", client_name="pub")  # without s: never below what pub already has
    assert a.bookmark == Bookmark(publisher_id_for("pub"), 1_700_000_000_000_000_001)
    assert b.sequence == b.position == 2
    assert c.sequence == a.sequence + 1
    top = j.append(topic="t", client_name="max", client_seq=(1 << 64) - 1)  # s leaves no room: not used
    assert top.sequence == top.position
    assert j.append(topic="t", client_name="max").sequence == top.position + 1


def test_replicated_records_keep_bookmark_origin_time_and_expiration(make):
    a = make("a", clock=Clock(1000.0))
    b = make("b", clock=Clock(2000.0))
    b.append(topic="t", client_name="local-on-b")
    b.append(topic="t", client_name="local-on-b")
    sent = [a.append(topic="t", client_name="pub", client_seq=s, expiration=30, body=b"m%d" % s)
            for s in (5, 6, 7)]
    got = replicate(a, b)
    assert [r.bookmark for r in got] == [r.bookmark for r in sent]
    assert [r.position for r in got] == [3, 4, 5]  # local positions differ, bookmarks do not
    assert all(r.expiration == 30 and r.timestamp == 2_000_000_000 for r in got)  # logged here at 2000 s
    assert [origin_timestamp(r) for r in got] == [1_000_000_000] * 3  # first logged at 1000 s
    assert got[0].headers[ORIGIN_TS] == "1000000000"
    # the logon ack's s counts replicated messages: the publisher's store resends only the rest
    assert b.last_seq_for_client("pub") == 7 and b.is_duplicate("pub", 7)
    # a bookmark from A means the same on B
    for r in sent:
        assert b.position_after_bookmark(r.bookmark_str) == a.position_after_bookmark(r.bookmark_str) + 2


def test_duplicates_by_sequence_or_s_are_dropped(make):
    a, b = make("a"), make("b")
    for s in (1, 2, 3):
        a.append(topic="t", client_name="pub", client_seq=s)
    assert len(replicate(a, b)) == 3
    assert replicate(a, b) == []  # a second path, a resync overlap
    # the publisher's store resent s=4 to B after a failover, then A's copy arrives: one is kept
    a.append(topic="t", client_name="pub", client_seq=4)
    assert not b.is_duplicate("pub", 4)
    b.append(topic="t", client_name="pub", client_seq=4)
    assert replicate(a, b, from_position=4) == []
    assert [r.client_seq for r in b.read()] == [1, 2, 3, 4]
    assert b.is_replicated_duplicate(publisher_id_for("pub"), 4, None)


def test_absent_sequence_starts_before_the_publishers_next_record_and_unknown_is_not_found(make):
    j = make()
    other = j.append(topic="t", client_name="x")
    r10 = j.append(topic="t", client_name="pub", client_seq=10)
    j.append(topic="t", client_name="x")
    r20 = j.append(topic="t", client_name="pub", client_seq=20)
    pid = publisher_id_for("pub")
    assert j.position_after_bookmark(Bookmark(pid, 10)) == r10.position + 1
    assert j.position_after_bookmark(Bookmark(pid, 15)) == r20.position  # absent: just before 20
    assert j.position_after_bookmark(Bookmark(pid, 5)) == r10.position
    assert j.position_after_bookmark(Bookmark(pid, 21)) is None  # not here yet: the caller goes to NOW
    assert j.position_after_bookmark(Bookmark(publisher_id_for("nobody"), 1)) is None
    assert j.position_after_bookmark(Bookmark(other.publisher_id, r10.position)) == other.position + 2
    assert j.position_after_bookmark(NOW) == j.next_position
    rng = parse_bookmark(f"[{pid}|10|:{pid}|15|]")
    assert isinstance(rng, BookmarkRange)
    start, stop = j.range_positions(rng)
    assert (start, stop) == (r10.position, r20.position)
    assert j.position_of(Bookmark(pid, 20)) == r20.position and j.position_of(Bookmark(pid, 15)) is None


def test_high_water_marks_and_what_a_peer_lacks(make):
    a = make("a")
    for i in range(6):
        a.append(topic="t", client_name="p" if i % 2 else "q", client_seq=i + 1)
    hw = a.high_water_marks()
    assert hw == {publisher_id_for("p"): 6, publisher_id_for("q"): 5}
    assert a.first_position_missing_from(hw) is None
    assert a.first_position_missing_from({}) == 1
    assert a.first_position_missing_from({publisher_id_for("q"): 5, publisher_id_for("p"): 2}) == 4


def test_reopened_file_journal_resolves_by_publisher_and_sequence(tmp_path):
    j, _ = FileJournal.open(tmp_path / "j")
    src = MemoryJournal()
    src.append(topic="t", client_name="far", client_seq=900)
    j.append(topic="t", client_name="near")
    replicate(src, j)
    j.append(topic="t", client_name="far", client_seq=901)
    j.flush()
    j.sync()
    j.close()
    j, _ = FileJournal.open(tmp_path / "j")
    pid = publisher_id_for("far")
    assert [(r.sequence, r.position) for r in j.read() if r.publisher_id == pid] == [(900, 2), (901, 3)]
    assert j.position_after_bookmark(Bookmark(pid, 900)) == 3
    assert origin_timestamp(next(iter(j.read(2)))) == next(iter(src.read())).timestamp
    assert j.is_replicated_duplicate(pid, 901, None) and not j.is_replicated_duplicate(pid, 902, None)
    nxt = j.append(topic="t", client_name="far")
    assert nxt.sequence == 902  # keeps growing for this publisher
    j.close()


def test_index_forgets_what_retention_removed():
    idx = SequenceIndex()
    for pos, seq in ((1, 5), (2, 6), (3, 9)):
        idx.add(7, seq, pos)
    idx.trim(3)
    assert idx.locate(7, 5) == (0, False) and idx.locate(7, 9) == (3, True)
    assert idx.locate(7, 7) == (3, False)  # never held: 6 was the last one removed
    assert idx.locate(7, 10) is None and len(idx) == 1
    with pytest.raises(ValueError):
        idx.add(7, 9, 4)


def test_a_publish_at_or_below_a_replicated_s_is_refused_not_logged_under_a_new_sequence(make):
    """The publisher's s=6..15 arrived by replication; its stale copies of s=6..10 published
    here are the same messages: refused (nothing appended), and its s=16 replicated later is
    taken with its own bookmark, not dropped as a duplicate of a re-logged copy."""
    a, b = make("a"), make("b")
    for s in range(1, 6):
        b.append(topic="t", client_name="P", client_seq=s, body=b"b%d" % s)
    for s in range(6, 16):
        a.append(topic="t", client_name="P", client_seq=s, body=b"a%d" % s)
    replicate(a, b)
    before = b.next_position
    for s in range(6, 11):
        with pytest.raises(DuplicatePublish):
            b.append(topic="t", client_name="P", client_seq=s, body=b"stale")
    with pytest.raises(DuplicatePublish):  # a run of them too
        b.append_publishes("t", "", "P", [b"stale", b"stale"], [9, 10])
    assert b.next_position == before
    later = a.append(topic="t", client_name="P", client_seq=16, body=b"a16")
    got = replicate(a, b, later.position)
    assert [(r.sequence, r.body) for r in got] == [(16, b"a16")]
    assert [r.sequence for r in b.read(1)] == list(range(1, 17))
