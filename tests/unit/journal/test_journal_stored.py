"""Archived and compressed journal segments (``journal/stored.py``, ``housekeeping.py``): they
stay part of the log for every reader, across a restart, with or without their summaries;
removal by age takes them too; a compressed file that does not decompress is refused with
one log line, never an exception; an interrupted copy is resolved at start-up."""

from __future__ import annotations

import gzip
import logging
import os
import shutil
import threading

import pytest

from amps_emulator.journal import FileJournal, ReadHold, SegmentPending
from amps_emulator.journal.housekeeping import perform
from amps_emulator.journal.identity import SequenceIndex
from amps_emulator.journal.segment import segment_name
from amps_emulator.journal.stored import remove_journal_files
from amps_emulator.protocol.bookmarks import parse_bookmark
from amps_emulator.sow.testing import FakeClock
from tests.support.journals import SlowGunzip
from tests.support.servers import until

N = 300


def _open(tmp_path, clock, **kw):
    kw.setdefault("archive_directory", str(tmp_path / "archive"))
    return FileJournal.open(str(tmp_path / "journal"), segment_size=4096, clock=clock, **kw)


def _fill(j, clock, start=0, n=N):
    for i in range(start, start + n):
        j.append(topic="orders", client_name="pub", body=b'{"i":%d}' % i, message_type="json")
        if i % 10 == 9:
            j.flush()
            j.sync()
    j.flush()
    j.sync()


def _store(j, what, age=10.0):
    moves = j.plan_store(what, age)
    for m in moves:
        perform(m)
        assert j.finish_store(m), m.error
    return moves


def _bodies(j):
    return [r.body for r in j.read(1)]


@pytest.fixture
def clock():
    return FakeClock(1_800_000_000.0)


def test_archive_then_compress_keeps_every_record_in_order_across_a_restart(tmp_path, clock):
    j, _ = _open(tmp_path, clock)
    _fill(j, clock)
    expected = _bodies(j)
    assert len(expected) == N and len(j.segments) > 3
    clock.advance(100)
    archived = _store(j, "archive")
    compressed = _store(j, "compress")
    assert len(archived) == len(compressed) == len(j.segments) - 1  # never the active one
    assert _store(j, "archive") == [] and _store(j, "compress") == []  # done already
    assert all(s.path.endswith(".journal.gz") and "archive" in s.path for s in j.segments[:-1])
    with gzip.open(j.segments[0].path) as f:  # what gzip reads
        assert f.read(8) == b"AMPSJRNL"
    assert _bodies(j) == expected
    middle = j.segments[1]
    assert next(j.read(middle.first_position, include_internal=True)).position == \
        middle.first_record_position  # a replay from the middle
    assert j.position_at_time(0) == 1
    journal_dir = os.listdir(tmp_path / "journal")
    assert [n for n in journal_dir if n.endswith(".journal")] == [j.segments[-1].name]
    j.close()
    j, report = _open(tmp_path, clock)
    assert report.summarised_segments >= len(compressed)  # no decompression at start-up
    assert _bodies(j) == expected
    _fill(j, clock, N, 20)  # the log goes on after them
    assert len(_bodies(j)) == N + 20
    j.close()


def test_compressed_segments_without_summaries_are_scanned_at_start_up(tmp_path, clock):
    j, _ = _open(tmp_path, clock, compressed_cache_limit=1)  # every read spills to a temp file
    _fill(j, clock)
    expected = _bodies(j)
    clock.advance(100)
    _store(j, "compress")
    assert _bodies(j) == expected
    j.close()
    for name in os.listdir(tmp_path / "journal"):
        if name.endswith(".summary"):
            os.unlink(tmp_path / "journal" / name)
    j, report = _open(tmp_path, clock)
    assert report.summarised_segments == 0 and not report.warnings
    assert _bodies(j) == expected
    j.close()


def test_only_segments_older_than_age_and_not_the_active_one(tmp_path, clock):
    j, _ = _open(tmp_path, clock)
    _fill(j, clock, 0, 100)
    old = len(j.segments) - 1
    clock.advance(1000)
    _fill(j, clock, 100, 100)
    assert len(_store(j, "compress", age=500)) == old
    assert _store(j, "compress", age=5000) == []
    clock.advance(1000)
    assert len(_store(j, "compress", age=500)) == len(j.segments) - 1 - old
    assert not j.segments[-1].path.endswith(".gz")
    j.close()


def test_archiving_needs_an_archive_directory(tmp_path, clock):
    j, _ = _open(tmp_path, clock, archive_directory=None)
    _fill(j, clock)
    with pytest.raises(ValueError, match="JournalArchiveDirectory"):
        j.plan_store("archive", 0)
    j.close()


def test_remove_by_age_takes_archived_and_compressed_segments(tmp_path, clock):
    j, _ = _open(tmp_path, clock)
    _fill(j, clock)
    clock.advance(100)
    _store(j, "archive")
    _store(j, "compress", age=0)
    assert j.enforce_retention([200], age=10).blocked_by_pin == 200  # a replay still needs it
    res = j.enforce_retention([], age=10)
    assert len(res.removed) == len(j.segments) + len(res.removed) - 1
    assert os.listdir(tmp_path / "archive") == []
    assert j.compressed_cache.cached_bytes == 0
    j.close()


def test_a_segment_being_copied_is_not_removed(tmp_path, clock):
    j, _ = _open(tmp_path, clock)
    _fill(j, clock)
    clock.advance(100)
    moves = j.plan_store("compress", 10)
    assert j.enforce_retention([], age=10).removed == ()  # the oldest is busy: no gap either
    for m in moves:
        perform(m)
        j.finish_store(m)
    assert j.enforce_retention([], age=10).removed
    j.close()


def test_a_copy_finished_after_close_is_deleted(tmp_path, clock):
    j, _ = _open(tmp_path, clock)
    _fill(j, clock)
    clock.advance(100)
    moves = j.plan_store("archive", 10)
    perform(moves[0])
    j.close()
    assert not j.finish_store(moves[0])
    assert os.listdir(tmp_path / "archive") == []
    assert os.path.exists(moves[0].src)


def test_a_corrupt_compressed_segment_is_refused_in_one_line(tmp_path, clock, caplog):
    j, expected = _compressed(tmp_path, clock)
    bad = j.segments[1]
    j.close()
    with open(bad.path, "r+b") as f:
        f.write(b"not gzip at all")
    j, _ = _open(tmp_path, clock)
    caplog.set_level(logging.ERROR, logger="amps_emulator.journal")
    got = _bodies(j)
    got_again = _bodies(j)
    lost = bad.last_position - bad.first_position + 1
    assert got == got_again and len(got) >= len(expected) - lost and got[0] == expected[0]
    refusals = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 1 and bad.path in refusals[0].getMessage()
    assert j.record_at(bad.first_record_position) is None
    j.close()


def test_an_interrupted_copy_keeps_the_original(tmp_path, clock):
    j, _ = _open(tmp_path, clock)
    _fill(j, clock)
    expected = _bodies(j)
    first = j.segments[0]
    src = first.path
    j.close()
    os.makedirs(tmp_path / "archive")
    shutil.copy(src, tmp_path / "archive" / first.name)  # archived, the original not deleted
    with open(src, "rb") as f, gzip.open(src + ".gz", "wb") as z:  # and compressed
        z.write(f.read())
    (tmp_path / "archive" / "00000000000000000099.journal.tmp").write_bytes(b"half")
    j, report = _open(tmp_path, clock)
    assert sum("second copy" in w for w in report.warnings) == 2
    assert j.segments[0].path == src
    assert sorted(os.listdir(tmp_path / "archive")) == []
    assert _bodies(j) == expected
    j.close()


def test_a_log_whose_newest_segment_was_archived_goes_on_in_a_new_one(tmp_path, clock):
    j, _ = _open(tmp_path, clock)
    _fill(j, clock)
    expected = _bodies(j)
    last = j.segments[-1]
    j.close()
    os.makedirs(tmp_path / "archive")
    os.replace(last.path, tmp_path / "archive" / last.name)
    os.replace(last.path + ".summary", tmp_path / "archive" / (last.name + ".summary"))
    j, _ = _open(tmp_path, clock)
    assert j.segments[-1].path == str(tmp_path / "journal" / segment_name(j.next_position))
    _fill(j, clock, N, 5)
    assert _bodies(j) == expected + [b'{"i":%d}' % i for i in range(N, N + 5)]
    j.close()


def test_reset_empties_the_archive_of_its_segments(tmp_path, clock):
    j, _ = _open(tmp_path, clock)
    _fill(j, clock)
    clock.advance(100)
    _store(j, "archive")
    j.close()
    (tmp_path / "archive" / "notes.txt").write_text("kept")
    remove_journal_files(str(tmp_path / "journal"), str(tmp_path / "archive"))
    assert os.listdir(tmp_path / "archive") == ["notes.txt"]
    j, _ = _open(tmp_path, clock)
    assert _bodies(j) == []
    j.close()


def _compressed(tmp_path, clock):
    """A journal of a few segments, all but the active one compressed, and its bodies."""
    j, _ = _open(tmp_path, clock)
    _fill(j, clock)
    expected = _bodies(j)
    clock.advance(100)
    _store(j, "compress")
    return j, expected


def _read_with(j, hold, start=1):
    """The records a non-blocking reader gets from ``start`` on, and whether it stopped at a
    segment still being decompressed."""
    got = []
    try:
        for rec in j.read(start, hold=hold):
            got.append(rec)
    except SegmentPending:
        return got, True
    return got, False


def _read_all(j, hold, woken):
    """Every body, the reader going on from where it stopped each time ``woken``."""
    got, stopped = _read_with(j, hold)
    while stopped:
        assert woken.wait(10)
        woken.clear()
        more, stopped = _read_with(j, hold, got[-1].position + 1 if got else 1)
        got += more
    return [r.body for r in got]


def test_two_readers_of_one_compressed_segment_decompress_it_once(tmp_path, clock, monkeypatch):
    j, expected = _compressed(tmp_path, clock)
    slow = SlowGunzip().install(monkeypatch)
    got: list[bytes] = []
    readers = [threading.Thread(target=lambda: got.append(j.record_at(1).body)) for _ in range(2)]
    try:
        readers[0].start()
        assert slow.entered.wait(10)
        readers[1].start()  # while the first one's decompression is under way
        readers[1].join(0.2)  # (time for it to start a second one, if it were to)
    finally:
        slow.release.set()
    for t in readers:
        t.join(30)
    assert got == expected[:1] * 2
    assert slow.calls == 1
    j.close()


def test_readers_with_a_hold_share_one_decompression_in_a_worker(tmp_path, clock, monkeypatch):
    j, expected = _compressed(tmp_path, clock)
    slow = SlowGunzip().install(monkeypatch)
    woken = [threading.Event(), threading.Event()]
    holds = [ReadHold(w.set) for w in woken]
    try:
        assert _read_with(j, holds[0]) == ([], True)  # returns at once: the worker decompresses
        assert slow.entered.wait(10)
        assert _read_with(j, holds[1]) == ([], True)  # joins the decompression under way
        assert _read_with(j, holds[0]) == ([], True)  # (asking again starts nothing either)
        blocking: list[bytes] = []  # a reader without a hold waits for that one too
        waiter = threading.Thread(target=lambda: blocking.append(j.record_at(1).body))
        waiter.start()
        assert not any(w.is_set() for w in woken) and holds[0].waiting
    finally:
        slow.release.set()
    assert all(w.wait(10) for w in woken)
    waiter.join(30)
    assert slow.calls == 1 and j.compressed_cache.decompressions == 1
    segments = len(j.segments) - 1
    for w in woken:
        w.clear()
    for hold, w in zip(holds, woken, strict=True):  # each goes on from where it stopped
        assert _read_all(j, hold, w) == expected
    assert blocking == expected[:1]
    assert slow.calls == j.compressed_cache.decompressions == segments  # once each
    j.close()


def test_a_segment_over_the_cache_limit_is_spilled_once_for_its_reader(tmp_path, clock):
    j, _ = _open(tmp_path, clock, compressed_cache_limit=1)  # nothing fits: temp files
    _fill(j, clock)
    expected = _bodies(j)
    clock.advance(100)
    _store(j, "compress")
    before = j.compressed_cache.decompressions
    hold = ReadHold()
    got: list[bytes] = []
    pos = rounds = 1
    while True:  # a reader that comes back in small steps, as a replay does
        rounds += 1
        try:
            for n, rec in enumerate(j.read(pos, hold=hold)):
                got.append(rec.body)
                pos = rec.position + 1
                if n == 9:
                    break
            else:
                break
        except SegmentPending:
            assert until(lambda: not hold.waiting)
    assert got == expected and rounds > 3 * len(j.segments)
    assert j.compressed_cache.decompressions - before == len(j.segments) - 1
    assert j.compressed_cache.cached_bytes == 0
    j.close()


def test_a_corrupt_segment_read_with_a_hold_is_refused_once_and_stepped_over(tmp_path, clock, caplog):
    j, expected = _compressed(tmp_path, clock)
    bad = j.segments[0]
    with open(bad.path, "r+b") as f:
        f.write(b"not gzip at all")
    caplog.set_level(logging.ERROR, logger="amps_emulator.journal")
    woken = threading.Event()
    hold = ReadHold(woken.set)
    got = _read_all(j, hold, woken)
    assert got[:1] == [b'{"i":%d}' % bad.count]  # the first segment's records are a gap
    assert got == expected[bad.count:]
    refusals = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 1 and bad.path in refusals[0].getMessage()
    assert _read_with(j, ReadHold(), 1)[0][0].body == got[0]  # refused at once, not tried again
    j.close()


def test_a_reader_with_a_hold_keeps_no_bytes_the_cache_may_drop(tmp_path, clock):
    # a replay that went through compressed segments (then follows live records for as long
    # as its subscription lives) must not pin a decompressed segment beside the cache's limit
    j, expected = _compressed(tmp_path, clock)
    woken = threading.Event()
    hold = ReadHold(woken.set)
    assert _read_all(j, hold, woken) == expected
    assert hold.job is None or hold.job.data is None
    j.close()


def _lookups(j, bm, rng):
    """The bookmark lookups of ``bm`` and the range ``rng``, each taking a hold."""
    return (lambda hold: j.position_after_bookmark(bm, hold=hold),
            lambda hold: j.position_of(bm, hold),
            lambda hold: j.range_positions(rng, hold),
            lambda hold: j.position_for_unheld(hold))


def test_a_bookmark_lookup_after_a_reopen_waits_for_the_index_off_the_callers_thread(
        tmp_path, clock, monkeypatch):
    """A reopened journal builds its per-publisher index on the first bookmark lookup from
    the whole log: with a hold, a compressed segment it reaches is decompressed in the
    worker (SegmentPending meanwhile), and the lookups then say what they said before."""
    j, _ = _compressed(tmp_path, clock)
    bm = j.record_at(j.last_position - 3).bookmark
    rng = parse_bookmark(f"[{j.record_at(2).bookmark_str}:{bm.publisher_id}|{bm.sequence}|]")
    want = [lookup(None) for lookup in _lookups(j, bm, rng)]
    j.close()
    j, _ = _open(tmp_path, clock)
    slow = SlowGunzip().install(monkeypatch)
    hold, woken = ReadHold(), threading.Event()
    hold.wake = woken.set
    release = threading.Timer(2.0, slow.release.set)  # (a lookup that decompressed here waits so)
    release.start()
    try:
        for lookup in _lookups(j, bm, rng):
            with pytest.raises(SegmentPending):
                lookup(hold)
        assert threading.current_thread() not in slow.threads
    finally:
        release.cancel()
        slow.release.set()
    while True:
        try:
            got = [lookup(hold) for lookup in _lookups(j, bm, rng)]
            break
        except SegmentPending:
            assert woken.wait(10)
            woken.clear()
    assert got == want and slow.threads and threading.current_thread() not in slow.threads
    j.close()


def test_an_index_build_goes_on_after_retention_moved_the_head(tmp_path, clock, monkeypatch):
    """A reopened journal's index build that stopped at a compressed segment goes on from
    there after retention removed the oldest segments meanwhile: no record is added twice
    (starting again from the new head would read, and decompress, again what it had read),
    and the index is the one a build from the new head makes."""
    j, _ = _compressed(tmp_path, clock)
    j.close()
    j, _ = _open(tmp_path, clock)
    assert len(j.segments) >= 4
    added: list[int] = []
    real_add = SequenceIndex.add_records

    def counting(self, records):
        records = list(records)
        added.extend(r.position for r in records)
        real_add(self, records)

    monkeypatch.setattr(SequenceIndex, "add_records", counting)
    hold, woken = ReadHold(), threading.Event()
    hold.wake = woken.set

    def build() -> bool:
        """True: the index is built; False: stopped at a segment being decompressed."""
        try:
            j.sequence_index(hold)
        except SegmentPending:
            assert woken.wait(10)
            woken.clear()
            return False
        return True

    for _ in range(3):  # through the first two compressed segments, stopped at the third
        assert not build()
    third = j.segments[2].first_position
    assert added and max(added) < third
    removed = j.enforce_retention([j.segments[1].first_position], age=0).removed
    assert len(removed) == 1 and j.first_position > 1
    while not build():
        pass
    assert sorted(added) == added and len(set(added)) == len(added)  # each read once
    retained = [r.position for r in j.read(j.first_position)]
    assert added[-len(retained):] == retained
    fresh = SequenceIndex(head_removed=True)
    real_add(fresh, j.read(j.first_position))
    idx = j.sequence_index()
    assert idx._seqs == fresh._seqs and idx._pos == fresh._pos and idx._trimmed == fresh._trimmed
    assert idx.high_water() == fresh.high_water() and idx._head_removed
    bm = j.record_at(retained[0]).bookmark
    assert j.position_of(bm) == retained[0]
    j.close()
