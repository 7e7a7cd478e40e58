"""FileJournal on disk: reopen, torn tails, corruption, rolling, retention, durability modes."""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib

import pytest

from amps_emulator.journal import (
    Durability,
    FileJournal,
    JournalCorruptError,
    JournalError,
    JournalFormatError,
    RecordKind,
    publisher_id_for,
)
from amps_emulator.journal.record import PREFIX, PREFIX_SIZE
from amps_emulator.journal.segment import HEADER_SIZE, parse_segment_name
from amps_emulator.sow.testing import FakeClock


def publish(j, i, client="pub-a", **kw):
    return j.append(topic="orders", client_name=client, body=f"m{i}".encode() * 3, **kw)


def segment_files(d):
    return sorted(n for n in os.listdir(d) if parse_segment_name(n) is not None)


def frame_offsets(path):
    """(offset, size) of every frame in a segment file."""
    data = open(path, "rb").read()
    out, off = [], HEADER_SIZE
    while off < len(data):
        size = PREFIX_SIZE + PREFIX.unpack_from(data, off)[5]
        out.append((off, size))
        off += size
    return out


def write_journal(d, n, *, clients=("pub-a",), close=True, **kw):
    j, _ = FileJournal.open(d, **kw)
    recs = [publish(j, i, client=clients[i % len(clients)], client_seq=1000 + i) for i in range(n)]
    j.flush()
    j.sync()
    if close:
        j.close()
    return j, recs


def user_records(j):
    return list(j.read())


# ---------------------------------------------------------------- clean reopen
def test_reopen_after_clean_close_restores_everything(tmp_path):
    _, recs = write_journal(tmp_path, 50, clients=("a", "b"), segment_size=1024)
    j, report = FileJournal.open(tmp_path, segment_size=1024)
    assert report.clean and not report.created
    assert report.last_position == recs[-1].position
    assert report.segments == len(segment_files(tmp_path)) > 1
    assert user_records(j) == recs
    assert j.durable_position == j.last_position
    nxt = publish(j, 50, client="a")
    assert list(j.read(recs[-1].position + 1)) == [nxt]  # (a CHECKPOINT may sit in between)
    assert all(r.kind == RecordKind.CHECKPOINT for r in j.read(recs[-1].position + 1, include_internal=True) if r != nxt)
    j.close()


def test_per_publisher_sequence_continues_after_reopen(tmp_path):
    _, recs = write_journal(tmp_path, 10, clients=("a", "b"))
    j, _ = FileJournal.open(tmp_path)
    pid_a = publisher_id_for("a")
    last_a = max(r.sequence for r in recs if r.client_name == "a")
    assert j.last_sequence_for_publisher(pid_a) == last_a
    new = publish(j, 10, client="a")
    assert new.publisher_id == pid_a and new.sequence > last_a
    assert new.bookmark not in {r.bookmark for r in recs}
    assert j.position_after_bookmark(recs[3].bookmark) == recs[4].position  # index rebuilt
    j.close()


def test_dedup_state_survives_reopen(tmp_path):
    write_journal(tmp_path, 10, clients=("a", "b"))  # a: s=1000,1002..1008; b: 1001..1009
    j, _ = FileJournal.open(tmp_path)
    assert j.last_seq_for_client("a") == 1008
    assert j.last_seq_for_client("b") == 1009
    assert j.is_duplicate("a", 1008) and not j.is_duplicate("a", 1009)
    assert not j.is_duplicate("c", 1)
    j.close()


def test_dedup_state_survives_retention_and_reopen(tmp_path):
    j, _ = FileJournal.open(tmp_path, segment_size=600, retention_bytes=1500)
    j.append(topic="t", client_name="early", client_seq=77)  # only record of this client
    for i in range(100):
        publish(j, i, client="busy", client_seq=i + 1)
    j.flush()
    j.sync()
    res = j.enforce_retention([])
    assert res.records_removed > 1
    assert all(r.client_name != "early" for r in j.read())
    j.close()
    j, report = FileJournal.open(tmp_path, segment_size=600)
    assert report.clean
    assert j.is_duplicate("early", 77) and j.last_seq_for_client("early") == 77  # from a CHECKPOINT
    assert j.last_sequence_for_publisher(publisher_id_for("early")) == 77  # its bookmark sequence is its s
    assert j.position_after_bookmark(f"{publisher_id_for('early')}|77|") == j.first_position  # aged out: replay all
    j.close()


# ---------------------------------------------------------------- torn tails
def test_truncated_mid_record_is_cut_with_warning(tmp_path, caplog):
    _, recs = write_journal(tmp_path, 20)
    path = os.path.join(tmp_path, segment_files(tmp_path)[-1])
    off, size = frame_offsets(path)[-1]
    os.truncate(path, off + size // 2)
    with caplog.at_level(logging.WARNING, logger="amps_emulator.journal"):
        j, report = FileJournal.open(tmp_path)
    assert user_records(j) == recs[:-1]
    (lost,) = report.truncated
    assert (lost.path, lost.offset, lost.bytes_lost, lost.records_lost) == (path, off, size // 2, 1)
    assert os.path.getsize(path) == off
    msg = caplog.text
    assert path in msg and f"offset {off}" in msg and f"{size // 2} bytes" in msg and "1 record(s) lost" in msg
    again = publish(j, 99)
    assert again.position == recs[-1].position  # the torn record was never durable
    j.close()
    j, report = FileJournal.open(tmp_path)
    assert report.clean and user_records(j)[-1] == again
    j.close()


def test_truncated_inside_prefix_and_trailing_zeros(tmp_path):
    _, recs = write_journal(tmp_path, 5)
    path = os.path.join(tmp_path, segment_files(tmp_path)[-1])
    off, _ = frame_offsets(path)[-1]
    os.truncate(path, off + 7)
    j, report = FileJournal.open(tmp_path)
    assert user_records(j) == recs[:-1] and report.truncated[0].offset == off
    j.close()
    with open(path, "ab") as f:  # a crash that left zero-filled pages behind
        f.write(b"\0" * 4096)
    j, report = FileJournal.open(tmp_path)
    assert user_records(j) == recs[:-1]
    assert report.truncated[0].bytes_lost == 4096
    j.close()


def test_several_torn_records_are_counted(tmp_path):
    j, _ = FileJournal.open(tmp_path)
    recs = [j.append(topic="t", client_name="c", body=b"x%d" % i * 500) for i in range(10)]
    j.close()
    path = os.path.join(tmp_path, segment_files(tmp_path)[-1])
    frames = frame_offsets(path)
    # a crash mid-write: the file got its full length, but the pages from 8192 on were never
    # written (zeros), so the record spanning that boundary and all after it are incomplete
    k = next(i for i, (off, size) in enumerate(frames) if off < 8192 < off + size)
    data = open(path, "rb").read()
    open(path, "wb").write(data[:8192] + bytes(len(data) - 8192))
    j, report = FileJournal.open(tmp_path)
    assert user_records(j) == recs[:k]
    assert report.truncated[0].offset == frames[k][0]
    assert report.truncated[0].records_lost >= 1  # best effort: zeros hide the frames after
    j.close()


@pytest.mark.parametrize("summarised", [False, True])
def test_complete_last_record_with_bad_checksum_is_damage_not_a_torn_tail(tmp_path, summarised):
    """Issue 11 item 9: a flipped byte in the LAST record is refused with path and offset."""
    _, recs = write_journal(tmp_path, 10, checkpoint_bytes=0 if summarised else None)
    if summarised:  # a summary covers the first records; the damaged one is in the scanned tail
        j, _ = FileJournal.open(tmp_path)
        publish(j, 10, client_seq=2000)
        j.flush()
        j.sync()
        j._fd, fd = -1, j._fd  # "crash": no final summary
        os.close(fd)
        os.close(j._dir_fd)
    path = os.path.join(tmp_path, segment_files(tmp_path)[-1])
    off, size = frame_offsets(path)[-1]
    flip(path, off + size - 2)
    with pytest.raises(JournalCorruptError) as info:
        FileJournal.open(tmp_path)
    assert info.value.path == path and info.value.offset == off
    assert "checksum mismatch" in str(info.value) and "complete" in str(info.value)
    assert os.path.getsize(path) == off + size  # the acked record was not cut
    j, report = FileJournal.open(tmp_path, keep_readable_on_corruption=True)
    assert user_records(j) == recs[:10][: len(recs) - (0 if summarised else 1)]
    assert report.skipped and report.skipped[0].offset == off
    j.close()


def test_newest_segment_with_torn_header_is_rewritten(tmp_path):
    _, recs = write_journal(tmp_path, 30, segment_size=600)
    names = segment_files(tmp_path)
    newest = parse_segment_name(names[-1]) + 10_000
    bogus = os.path.join(tmp_path, f"{newest:020d}.journal")
    open(bogus, "wb").write(b"AMPS")  # crash right after creating the next segment
    j, report = FileJournal.open(tmp_path, segment_size=600)
    assert user_records(j) == recs
    assert report.truncated[0].path == bogus
    assert os.path.getsize(bogus) == HEADER_SIZE
    assert publish(j, 30).position == newest  # the file name carries the next position
    j.close()


# ---------------------------------------------------------------- corruption in the middle
def flip(path, offset):
    data = bytearray(open(path, "rb").read())
    data[offset] ^= 0x5A
    open(path, "wb").write(bytes(data))


def test_flipped_byte_in_the_middle_is_an_error(tmp_path):
    _, recs = write_journal(tmp_path, 20)
    path = os.path.join(tmp_path, segment_files(tmp_path)[-1])
    off, size = frame_offsets(path)[8]
    flip(path, off + size - 1)  # last byte of record 9's body
    with pytest.raises(JournalCorruptError) as info:
        FileJournal.open(tmp_path)
    assert info.value.path == path and info.value.offset == off
    assert path in str(info.value) and f"offset {off}" in str(info.value)
    assert "keep_readable_on_corruption" in str(info.value)
    assert os.path.getsize(path) > off + size  # nothing was truncated


def test_keep_readable_flag_keeps_what_is_readable(tmp_path, caplog):
    _, recs = write_journal(tmp_path, 20)
    path = os.path.join(tmp_path, segment_files(tmp_path)[-1])
    original = open(path, "rb").read()
    off, size = frame_offsets(path)[8]
    flip(path, off + 20)  # inside record 9's prefix (its position field)
    with caplog.at_level(logging.WARNING, logger="amps_emulator.journal"):
        j, report = FileJournal.open(tmp_path, keep_readable_on_corruption=True)
    assert user_records(j) == recs[:8] + recs[9:]
    (skipped,) = report.skipped
    assert (skipped.path, skipped.offset, skipped.bytes_lost, skipped.records_lost) == (path, off, size, 1)
    assert path in caplog.text and f"offset {off}" in caplog.text
    assert open(path + ".corrupt", "rb").read()[: off] == original[:off]  # evidence kept
    new = publish(j, 20)
    assert new.position == recs[-1].position + 1
    # its record is gone: a replay starts at that publisher's next record (docs/design/replication.md 3.3)
    nxt = next(r for r in recs[9:] + [new] if r.publisher_id == recs[8].publisher_id)
    assert j.position_after_bookmark(recs[8].bookmark) == nxt.position
    assert j.position_after_bookmark(recs[7].bookmark) == recs[8].position  # gap: replay goes on after it
    j.close()
    j, report = FileJournal.open(tmp_path)  # the salvaged journal opens cleanly without the flag
    assert report.clean and user_records(j) == recs[:8] + recs[9:] + [new]
    j.close()


def test_damage_at_the_end_of_an_older_segment_is_an_error(tmp_path):
    _, recs = write_journal(tmp_path, 60, segment_size=800)
    names = segment_files(tmp_path)
    assert len(names) >= 3
    path = os.path.join(tmp_path, names[0])
    off, size = frame_offsets(path)[-1]
    os.truncate(path, off + size - 3)  # torn, but later segments hold data: not a tail
    with pytest.raises(JournalCorruptError) as info:
        FileJournal.open(tmp_path, segment_size=800)
    assert info.value.path == path and info.value.offset == off
    j, report = FileJournal.open(tmp_path, segment_size=800, keep_readable_on_corruption=True)
    lost = {r.position for r in recs} - {r.position for r in user_records(j)}
    assert lost == {j.segments[1].first_position - 1}  # just the torn last record of segment 1
    assert report.skipped and not report.truncated
    j.close()


def test_corrupt_header_of_an_older_segment(tmp_path):
    _, recs = write_journal(tmp_path, 60, segment_size=800)
    path = os.path.join(tmp_path, segment_files(tmp_path)[1])
    flip(path, 2)
    with pytest.raises(JournalCorruptError, match="bad file magic"):
        FileJournal.open(tmp_path, segment_size=800)
    j, report = FileJournal.open(tmp_path, segment_size=800, keep_readable_on_corruption=True)
    assert user_records(j) == recs  # only the header was damaged
    assert report.skipped[0].offset == 0
    j.close()


def test_unknown_record_version_is_refused_not_truncated(tmp_path):
    write_journal(tmp_path, 5)
    path = os.path.join(tmp_path, segment_files(tmp_path)[-1])
    off, size = frame_offsets(path)[-1]
    data = bytearray(open(path, "rb").read())
    data[off + 5] = 2  # version byte, with a valid checksum: a newer writer's record
    struct.pack_into("<I", data, off, zlib.crc32(bytes(data[off + 4 : off + size])))
    open(path, "wb").write(bytes(data))
    with pytest.raises(JournalFormatError, match="version 2"):
        FileJournal.open(tmp_path)
    assert os.path.getsize(path) == len(data)


# ---------------------------------------------------------------- rolling
def test_segments_roll_at_segment_size(tmp_path):
    size = 1000
    j, recs = write_journal(tmp_path, 100, segment_size=size, close=False)
    names = segment_files(tmp_path)
    assert len(names) > 5
    max_frame = max(s for n in names for _, s in frame_offsets(os.path.join(tmp_path, n)))
    for name in names[:-1]:
        actual = os.path.getsize(os.path.join(tmp_path, name))
        assert size <= actual < size + max_frame  # rolled once it reached segment_size
    assert os.path.getsize(os.path.join(tmp_path, names[-1])) < size + max_frame
    firsts = [parse_segment_name(n) for n in names]
    assert firsts[0] == 1
    for seg in j.segments[1:]:  # named by the first position, which holds a CHECKPOINT
        first = j.record_at(seg.first_position)
        assert first.kind == RecordKind.CHECKPOINT and first.publisher_id == 0
    assert [r.position for r in j.read()] == [r.position for r in recs]
    j.close()


def test_reader_spans_a_roll_that_happens_while_it_reads(tmp_path):
    j, _ = FileJournal.open(tmp_path, segment_size=700)
    recs = [publish(j, i) for i in range(5)]
    j.flush()
    it = j.read()
    got = [next(it)]
    for i in range(5, 60):
        recs.append(publish(j, i))
        if i % 7 == 0:
            j.flush()
            got.append(next(it))
    got.extend(it)
    assert got == recs and len(j.segments) > 2
    j.close()


# ---------------------------------------------------------------- retention on disk
def test_retention_by_size_deletes_files_oldest_first_never_pinned_or_newest(tmp_path):
    j, recs = write_journal(tmp_path, 200, segment_size=1000, retention_bytes=2500, close=False)
    before = segment_files(tmp_path)
    pin = recs[30].position
    pinned_name = next(s.name for s in reversed(j.segments) if s.first_position <= pin)
    res = j.enforce_retention([pin])
    after = segment_files(tmp_path)
    assert list(res.removed) == before[: len(res.removed)] and res.removed  # oldest first, whole files
    assert after == before[len(res.removed) :]
    assert pinned_name in after and res.blocked_by_pin == pin
    res = j.enforce_retention([])
    after = segment_files(tmp_path)
    assert pinned_name not in after
    assert after[-1] == before[-1]  # the active segment is never removed
    assert sum(os.path.getsize(os.path.join(tmp_path, n)) for n in after) <= 2500 or len(after) == 1
    j.close()
    j, report = FileJournal.open(tmp_path)
    assert report.clean and [r for r in j.read()] == [r for r in recs if r.position >= j.first_position]
    j.close()


def test_retention_by_age_with_injected_clock(tmp_path):
    clock = FakeClock(1_800_000_000.0)
    j, _ = FileJournal.open(tmp_path, segment_size=700, retention_age=60, clock=clock)
    old = [publish(j, i) for i in range(30)]
    clock.advance(50)
    new = [publish(j, i) for i in range(30, 60)]
    j.flush()
    j.sync()
    assert j.enforce_retention().removed == ()
    clock.advance(20)  # old: 70 s, new: 20 s
    res = j.enforce_retention()
    assert res.removed
    kept = user_records(j)
    assert new == kept[-len(new):] and old[0] not in kept
    assert j.enforce_retention([]).removed == ()
    j.close()


def test_retention_waits_for_the_next_checkpoint_to_be_durable(tmp_path):
    j, _ = FileJournal.open(tmp_path, segment_size=600, retention_bytes=1)
    for i in range(20):
        publish(j, i)
    j.flush()  # written but not fsynced: the new oldest segment's CHECKPOINT is not durable
    assert j.durable_position < j.last_position
    assert j.enforce_retention().removed == ()
    j.sync()
    assert j.enforce_retention().removed
    j.close()


# ---------------------------------------------------------------- durability modes
def test_group_mode_acks_only_after_sync(tmp_path):
    j, _ = FileJournal.open(tmp_path)
    assert j.durability is Durability.GROUP
    r = j.append(topic="t", client_name="c", client_seq=5)
    assert j.durable_position == 0 and j.written_position == 0
    assert j.last_seq_for_client("c") == 0 and j.last_seq_for_client("c", persisted=False) == 5
    j.flush()
    assert j.written_position == r.position and j.durable_position == 0
    assert j.sync() == r.position == j.durable_position
    assert j.last_seq_for_client("c") == 5
    j.close()


def test_durable_s_bookkeeping_stays_bounded(tmp_path):
    j, _ = FileJournal.open(tmp_path)
    for turn in range(20):
        for i in range(50):
            j.append(topic="t", client_name="c", client_seq=turn * 50 + i + 1)
        j.flush()
        j.sync()
    assert len(j._unapplied_s) <= 50  # only the last turn, not every publish ever made
    assert j.last_seq_for_client("c") == 1000
    j.close()


def test_strict_mode_is_durable_at_append(tmp_path):
    j, _ = FileJournal.open(tmp_path, durability="strict", segment_size=500)
    for i in range(20):
        r = publish(j, i)
        assert j.durable_position == r.position == j.written_position
        assert j.pending_bytes == 0
    j.close()


def test_memory_mode_promises_nothing_but_still_writes(tmp_path):
    j, _ = FileJournal.open(tmp_path, durability="memory")
    r = publish(j, 0)
    assert j.durable_position == r.position  # "accepted", not "on disk"
    j.close()
    j, _ = FileJournal.open(tmp_path, durability="memory")
    assert user_records(j) == [r]
    j.close()


def test_sync_in_a_worker_while_appending(tmp_path):
    j, _ = FileJournal.open(tmp_path, segment_size=4096)
    stop = threading.Event()
    seen: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def worker():
        try:
            while not stop.is_set():
                d = j.sync()
                seen.append((d, j.written_position))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=worker)
    t.start()
    try:
        for i in range(3000):
            publish(j, i)
            if i % 25 == 0:
                j.flush()
    finally:
        j.flush()
        stop.set()
        t.join()
    assert not errors
    assert all(d <= w for d, w in seen)  # never claims more than was written
    assert j.sync() == j.last_position
    j.close()
    j, report = FileJournal.open(tmp_path)
    assert report.clean and len(user_records(j)) == 3000
    j.close()


def test_directory_is_locked_while_open(tmp_path):
    j, _ = FileJournal.open(tmp_path)
    with pytest.raises(JournalError, match="already open"):
        FileJournal.open(tmp_path)
    j.close()
    j2, _ = FileJournal.open(tmp_path)
    j2.close()


def test_recovery_report_counts(tmp_path):
    j, report = FileJournal.open(tmp_path)
    assert report.created and report.records == 0 and report.last_position == 0
    j.close()
    write_journal(tmp_path, 40, segment_size=700)
    j, report = FileJournal.open(tmp_path, segment_size=700)
    assert report.records == sum(s.count for s in j.segments) >= 40
    assert report.bytes == sum(os.path.getsize(os.path.join(tmp_path, n)) for n in segment_files(tmp_path))
    assert report.seconds >= 0 and report.clean
    j.close()


def test_a_missing_oldest_segment_is_reported_loudly_and_refused_when_strict(tmp_path, caplog):
    """Issue 11 item 8: acked data lost with the oldest file is said, not silently skipped."""
    _, recs = write_journal(tmp_path, 60, segment_size=800)
    names = segment_files(tmp_path)
    os.unlink(os.path.join(tmp_path, names[0]))
    with pytest.raises(JournalError, match="missing") as info:
        FileJournal.open(tmp_path, segment_size=800, strict=True)
    assert str(tmp_path) in str(info.value)
    with caplog.at_level(logging.ERROR, logger="amps_emulator.journal"):
        j, report = FileJournal.open(tmp_path, segment_size=800)
    second = parse_segment_name(names[1])
    assert any(f"positions 1..{second - 1}" in w for w in report.warnings)
    assert "missing" in caplog.text and caplog.records[0].levelno == logging.ERROR
    j.close()


def test_segments_removed_by_retention_are_not_reported_missing(tmp_path):
    clock = FakeClock()
    j, _ = FileJournal.open(tmp_path, segment_size=800, retention_bytes=2000, clock=clock)
    for i in range(60):
        publish(j, i)
    j.flush()
    j.sync()
    assert j.enforce_retention().removed
    j.close()
    j, report = FileJournal.open(tmp_path, segment_size=800, strict=True)
    assert report.clean and not report.warnings and j.first_position > 1
    j.close()
