"""The journal reader without Spark: splits follow the sparse index, every record is read once
across splits, bounds and topic regexes select, damage fails or is skipped (failOnDataLoss),
and a torn tail is a write in flight."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("pyarrow")

from amps_emulator.journal import FileJournal  # noqa: E402
from amps_emulator.pipeline import journal_reader as jr  # noqa: E402


def _journal(tmp_path, n=3000, segment_size=64 * 1024):
    d = tmp_path / "journal"
    j, _ = FileJournal.open(d, segment_size=segment_size, checkpoint_bytes=0, index_interval=64)
    for i in range(n):
        j.append(topic=("orders.us" if i % 3 else "trades"), client_name="p",
                 body=b'{"i":%d}' % i, client_seq=i + 1)
        if i % 500 == 499:
            j.flush()
            j.sync()
    j.flush()
    j.sync()
    j.close()
    return str(d)


def _rows(d, **kw):
    opts = jr.ReadOptions(**kw)
    out = []
    for s in jr.plan_splits(d, opts):
        for b in jr.read_split(s, opts):
            out.extend(zip(b.column("position").to_pylist(), b.column("topic").to_pylist(),
                           b.column("data").to_pylist()))
    return out


def test_splits_cover_every_record_once_in_order(tmp_path):
    d = _journal(tmp_path)
    splits = jr.plan_splits(d, jr.ReadOptions(target_bytes=8 * 1024))
    assert len(splits) > len(jr.segment_paths(d))  # segments cut at the sparse index
    rows = _rows(d, target_bytes=8 * 1024)
    assert [p for p, _, _ in rows] == sorted(p for p, _, _ in rows)
    assert [data for _, _, data in rows] == ['{"i":%d}' % i for i in range(3000)]


def test_topic_regex_and_position_and_time_bounds(tmp_path):
    d = _journal(tmp_path)
    assert {t for _, t, _ in _rows(d, topic="^orders\\.")} == {"orders.us"}
    assert {t for _, t, _ in _rows(d, topic="trades")} == {"trades"}
    assert not _rows(d, topic="orders")  # a name without regex characters is exact
    mid = _rows(d, after_position=1000, until_position=1999, include_internal=True)
    assert [p for p, _, _ in mid] == list(range(1001, 2000))  # CHECKPOINTs of rolls included
    assert len(_rows(d, after_position=1000, until_position=1999)) < 999
    # bookmark bounds resolve by (publisher, sequence): here the sequence is the publisher's s
    j, _ = FileJournal.open(d)
    at1500, at1600 = j.record_at(1500), j.record_at(1600)
    j.close()
    assert at1500 is not None and at1600 is not None and at1500.sequence != 1500
    opts = jr.ReadOptions.from_spark({"startingBookmark": at1500.bookmark_str,
                                      "endingBookmark": at1600.bookmark_str}, d)
    assert (opts.after_position, opts.until_position) == (1500, 1600)
    with pytest.raises(ValueError, match="not in the journal"):
        jr.ReadOptions.from_spark({"startingBookmark": "1|1500|"}, d)
    assert jr.parse_time("20240102T030405Z") == jr.parse_time("2024-01-02T03:04:05")


def test_damage_fails_or_is_skipped_and_a_torn_tail_is_not_damage(tmp_path):
    d = _journal(tmp_path, n=300, segment_size=1 << 30)
    (first, path), = jr.segment_paths(d)
    os.remove(path + ".summary")
    data = bytearray(open(path, "rb").read())
    data[5000] ^= 0xFF  # inside a record in the middle
    open(path, "wb").write(bytes(data) + b"\xa7partial")  # and a frame being written
    with pytest.raises(jr.DataLossError, match="offset"):
        _rows(d)
    rows = _rows(d, fail_on_data_loss=False)
    assert 290 <= len(rows) < 300  # the damaged record (and nothing else) is skipped
    assert rows[-1][2] == '{"i":299}'


def test_a_missing_segment_is_data_loss(tmp_path):
    d = _journal(tmp_path)
    segs = jr.segment_paths(d)
    assert len(segs) >= 3
    os.remove(segs[1][1])
    with pytest.raises(jr.DataLossError, match="missing"):
        jr.plan_splits(d, jr.ReadOptions())
    rows = _rows(d, fail_on_data_loss=False)
    assert 0 < len(rows) < 3000
    # a start before what retention kept
    os.remove(segs[0][1])
    with pytest.raises(jr.DataLossError, match="gone"):
        jr.plan_splits(d, jr.ReadOptions(after_position=1))
    assert jr.plan_splits(d, jr.ReadOptions())  # from EPOCH: what is there
