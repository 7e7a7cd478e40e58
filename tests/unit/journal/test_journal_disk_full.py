"""FileJournal when the disk fills up (issue 11 item 7): refused writes are cut out of the file
again and reported, the journal keeps reading and takes writes again once space returns."""

from __future__ import annotations

import os

import pytest

from amps_emulator.journal import FileJournal, JournalSyncError, RecordKind
from amps_emulator.journal.testing import DiskFull


def pub(j, i):
    return j.append(topic="t", client_name="c", client_seq=i, body=b'{"i":%d}' % i + b" " * 200)


def seqs(j):
    return [r.client_seq for r in j.read()]


def test_refused_writes_at_a_segment_roll_are_cut_reported_and_recovered(tmp_path):
    j, _ = FileJournal.open(tmp_path, segment_size=4096)
    disk = j.file_ops = DiskFull()
    for i in range(1, 31):  # a few segments' worth
        pub(j, i)
    j.flush()
    j.sync()
    good = seqs(j)
    assert good == list(range(1, 31))
    files = {n: os.path.getsize(tmp_path / n) for n in os.listdir(tmp_path) if n.endswith(".journal")}

    disk.free = 300  # room for one record, and part of the next
    for i in range(31, 71):  # crosses a segment roll while the disk is full
        pub(j, i)
    j.flush()
    failures = j.take_write_failures()
    assert failures and disk.refused
    failed = [p for f in failures for p in range(f.first, f.last + 1)]
    # nothing refused is left in any file; what was written before is untouched
    for name, size in files.items():
        assert os.path.getsize(tmp_path / name) >= size
    on_disk = seqs(j)
    assert on_disk[:30] == good and 30 <= len(on_disk) < 70  # at most one more fitted
    assert not {r.position for r in j.read(include_internal=True)} & set(failed)
    # the gap is covered by the next sync, so acks behind it are released
    assert j.sync() == j.last_position
    # reads go on across the gap
    assert list(j.read(failed[0])) == [] and j.record_at(failed[0]) is None

    disk.free = None  # space returns
    j.append_checkpoint()
    j.flush()
    assert not j.take_write_failures()
    after = [pub(j, i) for i in range(71, 81)]
    j.flush()
    j.sync()
    assert after[0].position > failed[-1]  # refused positions are never reused
    expected = on_disk + list(range(71, 81))
    assert seqs(j) == expected
    assert list(j.read(failed[0]))[0] == after[0]  # a reader in the gap resumes after it
    j.close()

    j, report = FileJournal.open(tmp_path, segment_size=4096)
    assert report.clean, report
    assert seqs(j) == expected  # nothing reported failed came back
    assert j.next_position == after[-1].position + 1
    j.close()


def test_a_write_refused_in_the_middle_of_a_flush_leaves_no_partial_frame(tmp_path):
    j, _ = FileJournal.open(tmp_path)
    disk = j.file_ops = DiskFull()
    pub(j, 1)
    j.flush()
    size = j.segments[-1].size
    disk.free = 100  # half a record
    recs = [pub(j, i) for i in (2, 3)]
    j.flush()
    (f,) = j.take_write_failures()
    assert (f.first, f.last) == (recs[0].position, recs[1].position)
    assert os.path.getsize(j.segments[-1].path) == size == j.segments[-1].size
    assert seqs(j) == [1]
    disk.free = None
    pub(j, 4)
    j.close()
    j, report = FileJournal.open(tmp_path)
    assert report.clean and seqs(j) == [1, 4]
    assert [r.kind for r in j.read(include_internal=True)] == [RecordKind.PUBLISH] * 2
    j.close()


def test_a_failed_fsync_cuts_everything_not_durable_including_a_roll(tmp_path):
    j, _ = FileJournal.open(tmp_path, segment_size=4096)
    disk = j.file_ops = DiskFull()
    for i in range(1, 11):
        pub(j, i)
    j.flush()
    durable = j.sync()
    names = sorted(os.listdir(tmp_path))
    for i in range(11, 41):  # written (and rolled) but the fsync fails
        pub(j, i)
    j.flush()
    assert len(j.segments) > 1
    disk.failing_fsyncs = 1
    with pytest.raises(JournalSyncError) as info:
        j.sync()
    pub(j, 41)  # the owner went on appending meanwhile
    last = j.last_position
    f = j.discard_unsynced(info.value.error)
    assert (f.first, f.last) == (durable + 1, last) and j.take_write_failures() == [f]
    assert j.durable_position == last and seqs(j) == list(range(1, 11))
    assert sorted(n for n in os.listdir(tmp_path) if n.endswith(".journal")) == \
        [n for n in names if n.endswith(".journal")]
    after = pub(j, 42)
    j.flush()
    assert j.sync() == after.position > last
    j.close()
    j, report = FileJournal.open(tmp_path, segment_size=4096)
    assert report.clean and seqs(j) == list(range(1, 11)) + [42]
    j.close()


def test_strict_mode_reports_the_refused_record_at_once(tmp_path):
    j, _ = FileJournal.open(tmp_path, durability="strict")
    disk = j.file_ops = DiskFull(free=0)
    rec = pub(j, 1)
    (f,) = j.take_write_failures()
    assert f.first == f.last == rec.position
    disk.free = None
    again = pub(j, 2)
    assert not j.take_write_failures() and j.durable_position == again.position
    assert seqs(j) == [2]
    j.close()
