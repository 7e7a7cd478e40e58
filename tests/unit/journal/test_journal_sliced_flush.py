"""``FileJournal.flush(limit)``: the server writes a large buffer a slice per turn (one write
of a 32 MiB record held its event loop for tens of ms). Records count as written, and
readers of the file see them, only once every byte of the buffer is written; a write that
fails part-way cuts all of it off, as a failed single write does."""

from __future__ import annotations

import os

import pytest

from amps_emulator.journal import FileJournal, JournalSyncError
from amps_emulator.journal.testing import DiskFull

BIG = b'{"blob":"' + b"x" * 100_000 + b'"}'


def pub(j, i, body=b'{"i":1}'):
    return j.append(topic="t", client_name="c", client_seq=i, body=body)


def test_a_large_buffer_goes_out_in_slices_and_counts_once_all_of_it_went(tmp_path):
    j, _ = FileJournal.open(tmp_path)
    first = pub(j, 1)
    assert j.flush(4096)  # small: at once
    size = j.segments[-1].size
    recs = [pub(j, 2, BIG), pub(j, 3)]
    slices = 0
    while not j.flush(4096):
        slices += 1
        # part of it is in the file, none of it counts as written nor shows to readers
        assert j.written_position == first.position
        assert j.segments[-1].size == size
        assert os.path.getsize(j.segments[-1].path) > size
        later = pub(j, 100 + slices)  # appends go on meanwhile, after it
        recs.append(later)
        assert [r.client_seq for r in j.read()] == [1, 2, 3, *range(101, 101 + slices)]
    assert slices >= 20
    assert j.written_position == recs[-1].position
    assert j.segments[-1].size == os.path.getsize(j.segments[-1].path)
    j.sync()
    j.close()
    j, report = FileJournal.open(tmp_path)
    assert report.clean, report
    assert [(r.client_seq, r.body) for r in j.read()] == \
        [(1, b'{"i":1}')] + [(r.client_seq, r.body) for r in recs]
    j.close()


def test_a_write_failing_after_some_slices_cuts_them_all(tmp_path):
    j, _ = FileJournal.open(tmp_path)
    pub(j, 1)
    j.flush()
    size = j.segments[-1].size
    disk = j.file_ops = DiskFull(free=10_000)  # a few slices fit, then the disk is full
    failed = pub(j, 2, BIG)
    while not j.flush(4096):
        pass
    failures = j.take_write_failures()
    assert [(f.first, f.last) for f in failures] == [(failed.position, failed.position)]
    assert disk.refused and os.path.getsize(j.segments[-1].path) == size  # cut off again
    disk.free = None
    after = pub(j, 3)
    assert j.flush(4096)
    assert [r.client_seq for r in j.read()] == [1, 3] and j.written_position == after.position
    j.sync()
    j.close()
    j, report = FileJournal.open(tmp_path)
    assert report.clean, report
    assert [r.client_seq for r in j.read()] == [1, 3]
    j.close()


def test_a_roll_writes_what_a_slice_left(tmp_path):
    j, _ = FileJournal.open(tmp_path, segment_size=64 * 1024)
    pub(j, 1, BIG)
    assert not j.flush(4096)
    for i in range(2, 40):  # the segment is full: the next append rolls it, writing the rest
        pub(j, i, b'{"i":%d}' % i + b" " * 2000)
    j.flush()
    j.sync()
    j.close()
    j, report = FileJournal.open(tmp_path, segment_size=64 * 1024)
    assert report.clean, report
    assert [r.client_seq for r in j.read()] == list(range(1, 40))
    assert len(j.segments) > 1
    j.close()


def test_a_failed_sync_during_a_sliced_flush_discards_the_slices_and_later_writes_land(tmp_path):
    """The cut after a failed sync drops the buffer a sliced flush was part-way through: the
    next buffer is written from its first byte, and a reopen replays it."""
    j, _ = FileJournal.open(tmp_path)
    disk = j.file_ops = DiskFull()
    pub(j, 1)
    j.flush()
    j.sync()
    pub(j, 2)
    j.flush()  # written, not durable
    pub(j, 3, BIG)
    assert not j.flush(4096) and not j.flush(4096)  # two slices of it in the file
    disk.failing_fsyncs = 1
    with pytest.raises(JournalSyncError) as info:
        j.sync()
    f = j.discard_unsynced(info.value.error)
    assert f is not None and j.pending_bytes == 0
    assert [r.client_seq for r in j.read()] == [1]
    size = j.segments[-1].size
    assert os.path.getsize(j.segments[-1].path) == size
    small = [pub(j, i) for i in (4, 5)]  # a buffer shorter than the slices were
    assert j.flush(4096)
    assert os.path.getsize(j.segments[-1].path) == j.segments[-1].size > size
    big = [pub(j, 6, BIG), pub(j, 7)]  # and one longer, in slices again
    while not j.flush(4096):
        pass
    assert [r.client_seq for r in j.read()] == [1, 4, 5, 6, 7]
    assert j.sync() == big[-1].position > small[-1].position
    j.close()
    j, report = FileJournal.open(tmp_path)
    assert report.clean, report
    assert [(r.client_seq, r.body) for r in j.read()] == \
        [(1, b'{"i":1}'), (4, b'{"i":1}'), (5, b'{"i":1}'), (6, BIG), (7, b'{"i":1}')]
    j.close()
