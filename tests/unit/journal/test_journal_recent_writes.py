"""FileJournal keeps the records of its last writes in memory (``reading.RecentWrites``) while
a reader follows its tail: such a reader gets the very records that were appended, equal to
what the files hold; what every such reader has passed, older writes past the memory bound,
and everything once no reader follows, are read from the files again."""

from __future__ import annotations

from amps_emulator.journal import FileJournal
from amps_emulator.journal.reading import RecentWrites


def pub(j: FileJournal, i: int, size: int = 100):
    return j.append(topic="t", client_name="c", client_seq=i, body=b"%d" % i + b" " * size)


class Follower:
    """A reader of the tail (what a replication sender is to the journal)."""

    def __init__(self, j: FileJournal, next_position: int = 1) -> None:
        self.next_position = next_position
        self.steps_over: str | None = None
        j.follow_tail(self)


def test_the_tail_is_read_from_memory_and_equals_the_files(tmp_path):
    j, _ = FileJournal.open(tmp_path, segment_size=8192)  # (several segments: rolls in between)
    follower = Follower(j)
    recs = []
    for turn in range(10):
        recs += [pub(j, turn * 10 + i) for i in range(1, 11)]
        j.flush()
    j.sync()
    got = list(j.read(1))
    assert got == recs and all(a is b for a, b in zip(got, recs, strict=True))
    assert j.record_at(recs[-1].position) is recs[-1]
    assert follower.next_position == 1
    j.close()
    reopened, _ = FileJournal.open(tmp_path, segment_size=8192)
    assert list(reopened.read(1)) == recs  # (from the files: equal, other objects)
    reopened.close()


def test_older_writes_are_read_from_the_files_past_the_bound(tmp_path):
    j, _ = FileJournal.open(tmp_path)
    j._recent = RecentWrites(limit=2000)
    follower = Follower(j)
    first = [pub(j, i) for i in range(1, 11)]  # ~1.5 KB of frames
    j.flush()
    second = [pub(j, i) for i in range(11, 21)]
    j.flush()  # the first write is forgotten: both would pass the bound
    got = list(j.read(1))
    assert got == first + second
    assert all(a is not b for a, b in zip(got[:10], first, strict=True))
    assert all(a is b for a, b in zip(got[10:], second, strict=True))
    big = pub(j, 21, size=5000)  # a write larger than the bound is not kept at all
    j.flush()
    assert j.record_at(big.position) == big and j.record_at(big.position) is not big
    assert follower.next_position == 1
    j.close()


def test_a_reader_of_a_write_stops_where_the_write_is_cut(tmp_path):
    j, _ = FileJournal.open(tmp_path)
    follower = Follower(j)
    recs = [pub(j, i) for i in range(1, 11)]
    j.flush()
    reader = j.read(1)
    assert next(reader) is recs[0]
    j._recent.clear()  # what a cut after a failed sync does (test_journal_disk_full)
    assert list(reader) == recs[1:]  # (from the files)
    assert follower.next_position == 1
    j.close()


def columns(recs):
    return ([r.sequence for r in recs],
            None if recs[0].client_seq is None else [r.client_seq for r in recs],
            [r.body for r in recs])


def test_a_run_of_publishes_is_found_in_columns_from_any_of_its_records(tmp_path):
    j, _ = FileJournal.open(tmp_path)
    follower = Follower(j)
    single = pub(j, 1)
    run = j.append_publishes("t", "json", "c", [b"%d" % i for i in range(5)], None)
    counted = j.append_publishes("t", "json", "d", [b"x", b"y", b"z"], [7, 8, 9])
    after = pub(j, 2)
    assert j.run_columns(run[0].position, 9) is None  # (not written yet)
    j.flush()
    assert j.run_columns(run[0].position, 9) == columns(run)
    assert j.run_columns(run[1].position, 2) == columns(run[1:3])  # (at most ``count``)
    assert j.run_columns(run[4].position, 9) == columns(run[4:])
    assert j.run_columns(counted[1].position, 9) == columns(counted[1:]) == ([8, 9], [8, 9], [b"y", b"z"])
    assert j.run_columns(single.position, 9) is None and j.run_columns(after.position, 9) is None
    replicated, _ = j.append_replicated_plain("t", "json", "up", 99, 7, [1, 2, 3], None,
                                              [b"a", b"b", b"c"], "A")
    j.flush()
    assert j.run_columns(replicated[1].position, 9) is None  # (a replicated run: records only)
    j._recent.clear()
    assert j.run_columns(run[0].position, 9) is None  # (no longer in memory: read the records)
    assert follower.next_position == 1
    j.close()


def test_a_run_split_by_segment_rolls_is_a_run_per_segment(tmp_path):
    j, _ = FileJournal.open(tmp_path, segment_size=4096)
    follower = Follower(j)
    pub(j, 0)  # (a segment rolls before a record, once it holds one)
    run = j.append_publishes("t", "json", "c", [b"%d" % i + b" " * 200 for i in range(40)],
                             list(range(1, 41)))
    j.flush()
    parts, k = [], 0
    while k < len(run):  # (one run per segment)
        part = j.run_columns(run[k].position, 99)
        assert part is not None and part == columns(run[k:k + len(part[0])])
        parts.append(part)
        k += len(part[0])
    assert len(parts) > 1
    assert follower.next_position == 1
    j.close()


def test_only_what_a_follower_has_not_passed_is_kept_and_nothing_without_one(tmp_path):
    j, _ = FileJournal.open(tmp_path)
    first = [pub(j, i) for i in range(1, 4)]
    j.flush()
    assert list(j.read(1)) == first and j.read(1).__next__() is not first[0]  # (nobody follows)
    follower = Follower(j, next_position=j.next_position)
    second = [pub(j, i) for i in range(4, 7)]
    j.flush()
    assert next(j.read(second[0].position)) is second[0]
    follower.next_position = j.next_position  # it read them all
    third = [pub(j, i) for i in range(7, 9)]
    j.flush()
    assert next(j.read(second[0].position)) is not second[0]  # passed: forgotten
    assert next(j.read(third[0].position)) is third[0]
    del follower  # (the last follower is gone: nothing is kept from the next write on)
    pub(j, 9)
    j.flush()
    assert next(j.read(third[0].position)) is not third[0]
    j.close()


def test_a_write_of_records_every_follower_steps_over_keeps_only_its_last(tmp_path):
    """A sender steps over what came from its peer unread, but for the last record of a run:
    a write of only such records keeps that one; one with anything else keeps them all."""
    j, _ = FileJournal.open(tmp_path)
    follower = Follower(j)
    follower.steps_over = "A"
    from_a, _ = j.append_replicated_plain("t", "json", "up", 99, 7, [1, 2, 3], None,
                                          [b"a", b"b", b"c"], "A")
    more, _ = j.append_replicated_plain("t", "json", "up", 99, 7, [4, 5], None, [b"d", b"e"], "A")
    j.flush()
    assert j.record_at(more[-1].position) is more[-1]
    got = list(j.read(from_a[0].position))
    assert got == from_a + more and all(a is not b for a, b in zip(got[:-1], from_a + more[:-1], strict=True))
    from_c, _ = j.append_replicated_plain("t", "json", "up", 99, 7, [6, 7], None, [b"f", b"g"], "C")
    j.flush()
    assert next(j.read(from_c[0].position)) is from_c[0]  # (from another instance: kept)
    mixed, _ = j.append_replicated_plain("t", "json", "up", 99, 7, [8, 9], None, [b"h", b"i"], "A")
    own = pub(j, 1)
    j.flush()
    assert next(j.read(mixed[0].position)) is mixed[0] and j.record_at(own.position) is own
    other = Follower(j)  # (reads every record: everything is kept)
    last, _ = j.append_replicated_plain("t", "json", "up", 99, 7, [10, 11], None, [b"j", b"k"], "A")
    j.flush()
    assert next(j.read(last[0].position)) is last[0]
    assert follower.next_position == other.next_position == 1
    j.close()
