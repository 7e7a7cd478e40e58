"""Segment summaries (journal/summary.py): start-up from summaries recovers exactly what a full
scan recovers; bad, missing, stale or foreign summaries fall back to the scan; torn tails after
a summary are cut; damage inside a summarised range is still refused at open; a summary never
describes bytes that are not durable."""

from __future__ import annotations

import logging
import os
import shutil

import pytest

from amps_emulator.journal import FileJournal, JournalCorruptError, publisher_id_for
from amps_emulator.journal import summary as summaries
from amps_emulator.journal.record import PREFIX, PREFIX_SIZE
from amps_emulator.journal.segment import HEADER_SIZE, parse_segment_name


class FakeClock:
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 0.001  # every record a distinct timestamp
        return self.now


CLIENTS = ("alpha", "beta", "gamma")


def segment_files(d):
    return sorted(n for n in os.listdir(d) if parse_segment_name(n) is not None)


def summary_files(d):
    return sorted(n for n in os.listdir(d) if n.endswith(".summary"))


def frame_offsets(path, start=HEADER_SIZE):
    data = open(path, "rb").read()
    out, off = [], start
    while off < len(data):
        size = PREFIX_SIZE + PREFIX.unpack_from(data, off)[5]
        out.append((off, size))
        off += size
    return out


def fill(j, start, n):
    """``n`` publishes from three clients, with publish sequence numbers, flushed and synced
    every 7 records (several "loop turns")."""
    recs = []
    for i in range(start, start + n):
        client = CLIENTS[i % 3]
        recs.append(j.append(topic=f"t{i % 4}", client_name=client, body=b"x" * (20 + i % 50), client_seq=100 + i))
        if i % 7 == 6:
            j.flush()
            j.sync()
    j.flush()
    j.sync()
    return recs


def crash_copy(src, dst):
    """What a crash (SIGKILL) of the process would leave behind: the files as they are now."""
    shutil.copytree(src, dst)
    return dst


def without_summaries(src, dst):
    shutil.copytree(src, dst)
    for n in summary_files(dst):
        os.unlink(os.path.join(dst, n))
    return dst


def state(j, report):
    """Everything recovery exposes, for comparisons."""
    segs = [
        (
            s.name, s.size, s.count, s.first_record_position, s.last_position, s.first_ts, s.last_ts,
            list(s.index.positions), list(s.index.offsets), list(s.index.timestamps), s.index.next_position,
        )
        for s in j.segments
    ]
    rep = (report.segments, report.records, report.bytes, report.first_position, report.last_position)
    core = (
        j.first_position, j.last_position, j.next_position, j.durable_position, j.written_position, j._last_ts,
        sorted(j._pub_last.items()), sorted(j._client_max.items()), sorted(j._client_durable.items()),
    )
    api = (
        [(c, j.last_seq_for_client(c), j.last_seq_for_client(c, persisted=False), j.last_bookmark_for_client(c))
         for c in CLIENTS + ("nobody",)],
        [j.is_duplicate(c, 100 + k) for c in CLIENTS for k in range(0, 400, 37)],
    )
    return segs, rep, core, api


def lookups(j, recs):
    """Bookmark and time lookups over the index (they read frames, so compare them as well)."""
    picks = recs[:: max(1, len(recs) // 25)]
    return (
        [j.position_after_bookmark(r.bookmark_str) for r in picks],
        [j.position_at_time(r.timestamp) for r in picks],
        [j.position_at_time(r.timestamp + 1) for r in picks],
    )


def open_both(d, tmp_path, **kw):
    """Open ``d`` as it is (summaries) and a copy without summaries (full scan); return both."""
    full_dir = without_summaries(d, tmp_path / "fullscan")
    j1, r1 = FileJournal.open(d, **kw)
    j2, r2 = FileJournal.open(full_dir, **kw)
    return (j1, r1), (j2, r2)


# ---------------------------------------------------------------- same state as a full scan
@pytest.mark.parametrize("close", [True, False], ids=["clean-close", "crash"])
def test_start_from_summaries_equals_full_scan(tmp_path, close):
    src = tmp_path / "live"
    kw = dict(segment_size=2000, checkpoint_bytes=700, index_interval=4)
    j, _ = FileJournal.open(src, clock=FakeClock(), **kw)
    recs = fill(j, 0, 300)
    assert len(j.segments) > 5
    if close:
        j.close()
        d = src
    else:  # a crash after the last sync: the newest part of the active segment has no summary
        for _ in range(100):
            active = j.segments[-1]
            on_disk = summaries.read(summaries.summary_path(active.path))[0]
            if on_disk is not None and active.size - on_disk.size >= 400:  # several records
                break
            recs += fill(j, len(recs), 1)
        else:
            pytest.fail("no summary of the active segment was written")
        tail = active.size - on_disk.size
        d = crash_copy(src, tmp_path / "crashed")
    (j1, r1), (j2, r2) = open_both(d, tmp_path, **kw)
    try:
        assert r1.clean and r2.clean and not r1.warnings
        assert r1.summarised_segments == r1.segments and r2.summarised_segments == 0
        assert r2.scanned_bytes == r2.bytes
        if close:
            assert r1.scanned_bytes == 0  # nothing left to verify frame by frame
        else:
            assert r1.scanned_bytes == tail  # only the tail since the last summary
        assert state(j1, r1) == state(j2, r2)
        assert lookups(j1, recs) == lookups(j2, recs)
        assert list(j1.read(include_internal=True)) == list(j2.read(include_internal=True))
        assert [r for r in j1.read()] == recs
        # and both go on identically
        a, b = fill(j1, len(recs), 40), fill(j2, len(recs), 40)
        key = [(r.position, r.sequence, r.publisher_id) for r in a]
        assert key == [(r.position, r.sequence, r.publisher_id) for r in b]
    finally:
        if not close:
            j.close()
        j1.close()
        j2.close()


def test_summaries_keep_dedup_state_of_segments_removed_by_retention(tmp_path):
    kw = dict(segment_size=600)
    j, _ = FileJournal.open(tmp_path / "j", retention_bytes=1500, **kw)
    j.append(topic="t", client_name="early", client_seq=77)
    fill(j, 0, 100)
    assert j.enforce_retention([]).records_removed > 1
    j.close()
    d = tmp_path / "j"
    assert summary_files(d) == [n + ".summary" for n in segment_files(d)]  # removed with their segments
    (j1, r1), (j2, r2) = open_both(d, tmp_path, **kw)
    assert r1.summarised_segments == r1.segments and r1.scanned_bytes == 0
    assert state(j1, r1) == state(j2, r2)
    assert j1.is_duplicate("early", 77) and j1.last_seq_for_client("early") == 77
    assert j1.last_sequence_for_publisher(publisher_id_for("early")) == 77  # its bookmark sequence is its s
    j1.close()
    j2.close()


def test_recovery_writes_summaries_so_the_next_start_is_fast(tmp_path):
    d = tmp_path / "j"
    j, _ = FileJournal.open(d, segment_size=1500, checkpoint_bytes=None)
    recs = fill(j, 0, 120)
    j.close()
    for n in summary_files(d):  # e.g. a journal written before summaries existed
        os.unlink(os.path.join(d, n))
    j, r = FileJournal.open(d, segment_size=1500)
    assert r.summarised_segments == 0 and r.scanned_bytes == r.bytes
    j.close()
    assert summary_files(d) == [n + ".summary" for n in segment_files(d)]
    j, r = FileJournal.open(d, segment_size=1500)
    assert r.summarised_segments == r.segments and r.scanned_bytes == 0
    assert list(j.read()) == recs
    j.close()


# ---------------------------------------------------------------- bad summaries fall back
def damage_summary_checksum(path):
    data = bytearray(open(path, "rb").read())
    data[-3] ^= 0x01
    open(path, "wb").write(bytes(data))


def truncate_summary(path):
    os.truncate(path, os.path.getsize(path) // 2)


def garbage_summary(path):
    open(path, "wb").write(b"junk")


def future_version(path):
    data = bytearray(open(path, "rb").read())
    data[8] = 9
    open(path, "wb").write(bytes(data))


def other_segments_summary(path):
    d = os.path.dirname(path)
    other = [n for n in summary_files(d) if os.path.join(d, n) != path][0]
    shutil.copyfile(os.path.join(d, other), path)


@pytest.mark.parametrize(
    "damage, why",
    [
        (damage_summary_checksum, "summary checksum mismatch"),
        (truncate_summary, "summary body is"),
        (garbage_summary, "summary file too short"),
        (future_version, "unknown summary version 9"),
        (other_segments_summary, "summary is for position"),
    ],
)
def test_bad_summary_falls_back_to_a_full_scan(tmp_path, caplog, damage, why):
    kw = dict(segment_size=1500)
    d = tmp_path / "j"
    j, _ = FileJournal.open(d, clock=FakeClock(), **kw)
    recs = fill(j, 0, 150)
    j.close()
    names = segment_files(d)
    victim = os.path.join(d, names[1])
    damage(summaries.summary_path(victim))
    with caplog.at_level(logging.WARNING, logger="amps_emulator.journal"):
        (j1, r1), (j2, r2) = open_both(d, tmp_path, **kw)
    assert victim in caplog.text
    assert r1.clean and r1.summarised_segments == r1.segments - 1
    assert r1.scanned_bytes == os.path.getsize(victim)  # that segment, and only it, in full
    (w,) = r1.warnings
    assert why in w and victim in w and "scanning" in w
    assert state(j1, r1) == state(j2, r2)
    assert lookups(j1, recs) == lookups(j2, recs)
    j1.close()
    j2.close()
    j, r = FileJournal.open(d, **kw)  # the bad summary was replaced
    assert r.summarised_segments == r.segments and not r.warnings
    j.close()


def test_foreign_summary_with_a_valid_checksum_is_not_trusted(tmp_path):
    """A well-formed summary of different bytes (another journal's segment of the same name)."""
    kw = dict(segment_size=1500)
    a, b = tmp_path / "a", tmp_path / "b"
    for d, start in ((a, 1_800_000_000), (b, 1_900_000_000)):  # same sizes, other timestamps
        j, _ = FileJournal.open(d, clock=FakeClock(start), **kw)
        fill(j, 0, 100)
        j.close()
    name = segment_files(a)[0]
    shutil.copyfile(os.path.join(b, name + ".summary"), os.path.join(a, name + ".summary"))
    (j1, r1), (j2, r2) = open_both(a, tmp_path, **kw)
    (w,) = r1.warnings
    assert "do not match its summary (crc32)" in w
    assert state(j1, r1) == state(j2, r2)
    j1.close()
    j2.close()


def test_index_interval_change_ignores_summaries(tmp_path):
    d = tmp_path / "j"
    j, _ = FileJournal.open(d, segment_size=1500)
    fill(j, 0, 60)
    j.close()
    (j1, r1), (j2, r2) = open_both(d, tmp_path, segment_size=1500, index_interval=3)
    assert r1.summarised_segments == 0 and all("index interval" in w for w in r1.warnings)
    assert state(j1, r1) == state(j2, r2)
    j1.close()
    j2.close()


def test_stale_summary_is_used_and_the_rest_is_scanned(tmp_path):
    d = tmp_path / "j"
    kw = dict(checkpoint_bytes=None)
    j, _ = FileJournal.open(d, clock=FakeClock(), **kw)
    fill(j, 0, 50)
    j.close()
    spath = os.path.join(d, segment_files(d)[0] + ".summary")
    old = open(spath, "rb").read()
    j, _ = FileJournal.open(d, clock=FakeClock(1_900_000_000), **kw)
    recs = fill(j, 50, 50)
    j.close()
    open(spath, "wb").write(old)  # a summary written long before the crash
    old_size = summaries.decode(old)[0].size
    (j1, r1), (j2, r2) = open_both(d, tmp_path, **kw)
    assert r1.summarised_segments == 1 and not r1.warnings
    assert r1.scanned_bytes == r1.bytes - old_size
    assert state(j1, r1) == state(j2, r2)
    assert lookups(j1, recs) == lookups(j2, recs)
    j1.close()
    j2.close()
    assert summaries.read(spath)[0].size == r1.bytes  # refreshed at open


def test_leftover_temp_and_orphan_summaries_are_removed(tmp_path):
    d = tmp_path / "j"
    j, _ = FileJournal.open(d)
    fill(j, 0, 10)
    j.close()
    name = segment_files(d)[0]
    open(os.path.join(d, name + ".summary.tmp"), "wb").write(b"half written")
    orphan = f"{10**9:020d}.journal.summary"
    shutil.copyfile(os.path.join(d, name + ".summary"), os.path.join(d, orphan))
    open(os.path.join(d, "queues.ack"), "wb").write(b"someone else's")
    j, r = FileJournal.open(d)
    assert r.summarised_segments == 1
    j.close()
    assert sorted(os.listdir(d)) == sorted([name, name + ".summary", "queues.ack"])


# ---------------------------------------------------------------- torn tails after a summary
def test_torn_tail_after_the_summary_is_truncated_with_warning(tmp_path, caplog):
    live = tmp_path / "live"
    kw = dict(checkpoint_bytes=None, index_interval=3)
    j, _ = FileJournal.open(live, clock=FakeClock(), **kw)
    first = fill(j, 0, 40)
    j.close()  # summary covers these 40
    j, _ = FileJournal.open(live, clock=FakeClock(1_900_000_000), **kw)
    more = fill(j, 40, 10)
    d = crash_copy(live, tmp_path / "crashed")
    j.close()
    path = os.path.join(d, segment_files(d)[-1])
    covered = summaries.read(summaries.summary_path(path))[0].size
    off, size = frame_offsets(path)[-1]
    assert off > covered
    os.truncate(path, off + size // 2)
    full = without_summaries(d, tmp_path / "fullscan")
    with caplog.at_level(logging.WARNING, logger="amps_emulator.journal"):
        j1, r1 = FileJournal.open(d, index_interval=3)
    j2, r2 = FileJournal.open(full, index_interval=3)
    (lost,) = r1.truncated
    assert (lost.path, lost.offset, lost.bytes_lost, lost.records_lost) == (path, off, size // 2, 1)
    assert path in caplog.text and f"offset {off}" in caplog.text and "1 record(s) lost" in caplog.text
    assert os.path.getsize(path) == off
    assert r1.summarised_segments == 1 and r1.scanned_bytes == off + size // 2 - covered
    assert [(x.offset, x.bytes_lost, x.records_lost) for x in r2.truncated] == [(off, size // 2, 1)]
    assert state(j1, r1) == state(j2, r2)
    assert list(j1.read()) == first + more[:-1]
    assert lookups(j1, first + more[:-1]) == lookups(j2, first + more[:-1])
    j1.close()
    j2.close()
    j, r = FileJournal.open(d, index_interval=3)
    assert r.clean and r.scanned_bytes == 0
    j.close()


def test_file_shorter_than_its_summary_falls_back_and_truncates(tmp_path):
    """The tail was cut inside the summarised range (e.g. by hand): the summary cannot be used,
    and the full scan finds and reports the torn record as before."""
    d = tmp_path / "j"
    j, _ = FileJournal.open(d)
    recs = fill(j, 0, 20)
    j.close()
    path = os.path.join(d, segment_files(d)[-1])
    off, size = frame_offsets(path)[-1]
    os.truncate(path, off + 5)
    j, r = FileJournal.open(d)
    assert r.summarised_segments == 0 and "the file has" in r.warnings[0]
    assert r.truncated[0].offset == off and list(j.read()) == recs[:-1]
    j.close()


# ---------------------------------------------------------------- damage in summarised ranges
def test_flipped_byte_in_a_summarised_sealed_segment_is_refused_at_open(tmp_path):
    d = tmp_path / "j"
    j, _ = FileJournal.open(d, segment_size=1500)
    recs = fill(j, 0, 150)
    j.close()
    path = os.path.join(d, segment_files(d)[1])
    assert os.path.exists(path + ".summary")
    off, size = frame_offsets(path)[3]
    data = bytearray(open(path, "rb").read())
    data[off + size - 1] ^= 0x5A
    open(path, "wb").write(bytes(data))
    with pytest.raises(JournalCorruptError) as info:
        FileJournal.open(d, segment_size=1500)
    assert info.value.path == path and info.value.offset == off
    assert f"offset {off}" in str(info.value) and "keep_readable_on_corruption" in str(info.value)
    assert os.path.getsize(path) == len(data)  # nothing truncated
    j, r = FileJournal.open(d, segment_size=1500, keep_readable_on_corruption=True)
    assert [(s.path, s.offset, s.records_lost) for s in r.skipped] == [(path, off, 1)]
    survivors = list(j.read())
    assert len(survivors) == len(recs) - 1
    j.close()
    j, r = FileJournal.open(d, segment_size=1500)  # salvaged, re-summarised: clean and fast
    assert r.clean and not r.warnings and r.summarised_segments == r.segments and r.scanned_bytes == 0
    assert list(j.read()) == survivors
    j.close()


def test_damage_in_the_tail_after_a_summary_followed_by_valid_records_is_refused(tmp_path):
    live = tmp_path / "live"
    j, _ = FileJournal.open(live, checkpoint_bytes=None)
    fill(j, 0, 20)
    j.close()
    j, _ = FileJournal.open(live, checkpoint_bytes=None)
    fill(j, 20, 20)
    d = crash_copy(live, tmp_path / "crashed")
    j.close()
    path = os.path.join(d, segment_files(d)[-1])
    covered = summaries.read(summaries.summary_path(path))[0].size
    frames = [f for f in frame_offsets(path) if f[0] >= covered]
    off, size = frames[5]
    data = bytearray(open(path, "rb").read())
    data[off + size - 1] ^= 0x5A
    open(path, "wb").write(bytes(data))
    with pytest.raises(JournalCorruptError) as info:
        FileJournal.open(d)
    assert info.value.path == path and info.value.offset == off and "valid records follow it" in str(info.value)


# ---------------------------------------------------------------- durability of summaries
def covered(d):
    names = segment_files(d)
    s, _ = summaries.read(os.path.join(d, names[-1] + ".summary"))
    return None if s is None else s.size


def test_summary_is_written_only_once_durable(tmp_path):
    d = tmp_path / "j"
    j, _ = FileJournal.open(d, checkpoint_bytes=0)  # a snapshot at every flush
    for i in range(10):
        j.append(topic="t", client_name="c", client_seq=i + 1)
    j.flush()
    assert covered(d) is None  # written, not yet fsynced: no summary may claim it
    j.sync()
    size = j.segments[-1].size
    assert covered(d) == size
    j.append(topic="t", client_name="c", client_seq=11)
    j.flush()
    assert covered(d) == size < j.segments[-1].size
    j.sync()
    assert covered(d) == j.segments[-1].size
    j.close()


def test_summary_never_covers_what_the_running_sync_did_not_fsync(tmp_path, monkeypatch):
    """The owner appends and flushes while a worker's sync is inside fdatasync: the snapshot of
    that newer flush must wait for the next sync."""
    d = tmp_path / "j"
    j, _ = FileJournal.open(d, checkpoint_bytes=0)
    j.append(topic="t", client_name="c", client_seq=1)
    j.flush()
    size1 = j.segments[-1].size
    real = j.file_ops.fdatasync
    calls = []

    def fdatasync_while_owner_flushes(fd):
        if not calls:
            calls.append(fd)
            j.append(topic="t", client_name="c", client_seq=2)
            j.flush()  # written after the sync captured its target
        real(fd)

    monkeypatch.setattr(j.file_ops, "fdatasync", fdatasync_while_owner_flushes)
    assert j.sync() == 1
    assert covered(d) == size1 < j.segments[-1].size
    assert j.sync() == 2
    assert covered(d) == j.segments[-1].size
    j.close()


def test_deferred_summaries_are_left_to_write_summaries(tmp_path):
    """The server's mode: ``sync`` (which persisted acks wait for) never writes a summary."""
    d = tmp_path / "j"
    j, _ = FileJournal.open(d, checkpoint_bytes=0, defer_summaries=True)
    j.append(topic="t", client_name="c", client_seq=1)
    j.flush()
    assert not j.summaries_due  # not durable yet
    j.sync()
    assert j.summaries_due and covered(d) is None
    j.write_summaries()
    assert not j.summaries_due and covered(d) == j.segments[-1].size
    j.append(topic="t", client_name="c", client_seq=2)
    j.flush()
    j.sync()
    assert j.summaries_due
    j.close()  # close writes what is due
    assert covered(d) == os.path.getsize(j.segments[-1].path)
    for n in summary_files(d):
        os.unlink(os.path.join(d, n))
    j, r = FileJournal.open(d, defer_summaries=True)  # recovery's summaries: due, not written
    assert r.scanned_bytes == r.bytes and j.summaries_due and summary_files(d) == []
    j.write_summaries()
    assert covered(d) == os.path.getsize(j.segments[-1].path) and not j.summaries_due
    j.close()


def test_summary_threshold_and_close(tmp_path):
    d = tmp_path / "j"
    j, _ = FileJournal.open(d, checkpoint_bytes=1000)
    j.append(topic="t", client_name="c", body=b"x" * 100)
    j.flush()
    j.sync()
    assert covered(d) is None  # below the threshold
    j.append(topic="t", client_name="c", body=b"x" * 1000)
    j.flush()
    j.sync()
    at = covered(d)
    assert at == j.segments[-1].size
    j.append(topic="t", client_name="c", body=b"x" * 10)
    j.flush()
    j.sync()
    assert covered(d) == at
    j.close()
    assert covered(d) > at  # close summarises everything


def test_strict_mode_writes_summaries_and_memory_mode_none(tmp_path):
    j, _ = FileJournal.open(tmp_path / "s", durability="strict", checkpoint_bytes=0, segment_size=800)
    fill(j, 0, 30)
    assert covered(tmp_path / "s") == j.segments[-1].size
    assert summary_files(tmp_path / "s") == [n + ".summary" for n in segment_files(tmp_path / "s")]
    j.close()
    j, _ = FileJournal.open(tmp_path / "m", durability="memory", checkpoint_bytes=0, segment_size=800)
    fill(j, 0, 30)
    j.close()
    assert summary_files(tmp_path / "m") == []
    j, r = FileJournal.open(tmp_path / "m", durability="memory")
    assert r.summarised_segments == 0 and r.scanned_bytes == r.bytes
    j.close()
    assert summary_files(tmp_path / "m") == []  # recovery in memory mode does not write them either


def test_sealed_segment_summary_covers_the_whole_file(tmp_path):
    d = tmp_path / "j"
    j, _ = FileJournal.open(d, segment_size=1000, checkpoint_bytes=None)
    fill(j, 0, 60)
    for name in segment_files(d)[:-1]:
        path = os.path.join(d, name)
        s, _ = summaries.read(path + ".summary")
        assert s.sealed and s.size == os.path.getsize(path)
        assert s.file_crc == summaries.file_crc(path, s.size)
    j.close()


def test_failure_to_write_a_summary_is_logged_not_fatal(tmp_path, monkeypatch, caplog):
    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(summaries, "write", boom)
    d = tmp_path / "j"
    with caplog.at_level(logging.WARNING, logger="amps_emulator.journal"):
        j, _ = FileJournal.open(d, checkpoint_bytes=0, segment_size=800)
        recs = fill(j, 0, 30)
        j.close()
    assert "cannot write the summary" in caplog.text and caplog.text.count("cannot write the summary") == 1
    monkeypatch.undo()
    assert summary_files(d) == []
    j, r = FileJournal.open(d, segment_size=800)
    assert r.clean and list(j.read()) == recs and r.summarised_segments == 0
    j.close()
