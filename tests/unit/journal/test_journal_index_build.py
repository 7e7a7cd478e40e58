"""The per-publisher index a reopened journal builds in one pass (``JournalCore.sequence_index``),
paused by readers with a hold (``SegmentPending``) while retention moves the log's head and
records are appended: it reads each record at most once, and the index it ends with answers
every question as one built at once from the records retained at the end does."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator.journal import MemoryJournal, ReadHold, SegmentPending
from amps_emulator.journal.identity import PATH, SequenceIndex
from amps_emulator.sow.testing import FakeClock

SENDERS = ("A", "B")

# a record: (publisher 1..3, replicated from: None = published here, sequence step)
records = st.lists(st.tuples(st.integers(1, 3), st.sampled_from((None,) + SENDERS), st.integers(1, 3)),
                   min_size=1, max_size=60)


def _append(j: MemoryJournal, last: dict[int, int], pid: int, sender: str | None, step: int) -> None:
    last[pid] = last.get(pid, 0) + step
    j.append_replicated(topic="t", client_name=f"p{pid}", publisher_id=pid, sequence=last[pid],
                        origin_timestamp=1, body=b"x" * 40, headers={PATH: sender} if sender else None)


def _answers(idx: SequenceIndex, j: MemoryJournal, last: dict[int, int]) -> tuple:
    """Everything the index says about the log (every lookup its users make)."""
    ends = range(0, j.next_position + 2)
    pids = range(0, 5)
    return (
        len(idx), idx.high_water(), idx.senders(), idx._head_removed,
        [idx.locate(pid, seq) for pid in pids for seq in range(0, last.get(pid, 0) + 3)],
        [idx.first_missing({pid: seq}) for pid in pids for seq in range(0, last.get(pid, 0) + 2)],
        idx.first_missing({}), idx.first_missing(last),
        [(idx.arrival_run(s, p), idx.last_arrival(s, p), idx.first_arrival(s, p))
         for s in SENDERS + ("C",) for p in ends],
    )


@settings(max_examples=150, deadline=None)
@given(records, st.integers(1, 60), st.integers(0, 8), st.data())
def test_a_paused_build_ends_as_a_build_from_the_retained_records(recs, reopened_from, pauses, data):
    clock = FakeClock()
    j = MemoryJournal(segment_size=600, clock=clock)  # 5 records a segment
    last: dict[int, int] = {}
    for rec in recs:
        _append(j, last, *rec)
    clock.advance(1)
    j.enforce_retention([reopened_from], age=0)  # (a journal reopened with its head removed)
    j._seqidx = None  # as a reopened FileJournal: built on first use
    read = j.read
    stop_at: set[int] = set()
    reads: list[int] = []

    def pausing(from_position: int = 1, *, include_internal: bool = False, hold=None):
        """``read``, stopping at ``stop_at`` as at a segment being decompressed."""
        for rec in read(from_position, include_internal=include_internal, hold=hold):
            if hold is not None and rec.position in stop_at:
                stop_at.clear()
                raise SegmentPending
            reads.append(rec.position)
            yield rec

    j.read = pausing  # (the instance's: sequence_index calls self.read)
    hold = ReadHold()
    for _ in range(pauses):
        # where the pass stops, a position retention keeps from, records appended then
        stop = data.draw(st.integers(j.first_position, j.next_position), "stop")
        keep_from = data.draw(st.integers(j.first_position, j.next_position), "keep from")
        more = data.draw(st.integers(0, 3), "appended")
        stop_at.add(stop)
        try:
            j.sequence_index(hold)
            break
        except SegmentPending:
            pass
        clock.advance(1)
        j.enforce_retention([keep_from], age=0)
        for i in range(more):
            _append(j, last, 1 + i % 3, SENDERS[i % 2], 1)
    idx = j.sequence_index(hold)
    del j.read
    assert len(reads) == len(set(reads))  # each record read once
    fresh = SequenceIndex(head_removed=j.first_position > 1)
    fresh.add_records(j.read(j.first_position))
    assert _answers(idx, j, last) == _answers(fresh, j, last)
    assert idx._trimmed == fresh._trimmed
    # appends after the build go on in it as in the fresh one
    _append(j, last, 2, "A", 1)
    fresh.add_records(j.read(j.last_position))
    assert _answers(idx, j, last) == _answers(fresh, j, last)
