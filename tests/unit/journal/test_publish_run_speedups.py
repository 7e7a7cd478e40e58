"""``_speedups.publish_run`` (a run of plain publishes: records made, frames appended) against
its pure-Python twin ``journal.base.publish_run_py``, and both against the one-record path.

The reference is independent of both: for each publish, the record ``_make_record`` would
build (its sequence by ``identity.assign_sequence``) and the frame ``append_record_py`` writes
for it, read back by ``journal.record.FrameDecoder``; the index entries by
``SparseIndex.maybe_add``'s rule. Input outside the plain shapes is declined by the C function
(None) and handled by the twin through ``journal.base.publish_run``.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator.journal.base import publish_run, publish_run_py
from amps_emulator.journal.identity import SEQUENCE_FROM_S_LIMIT, assign_sequence
from amps_emulator.journal.index import SparseIndex
from amps_emulator.journal.record import JournalRecord, append_record_py
from tests.support.compiled import compiled
from tests.support.compiled import speedups as _speedups

U64 = st.integers(0, (1 << 64) - 1)
BODIES = st.lists(st.binary(max_size=300) | st.binary(min_size=65530, max_size=65540), max_size=12)


def _expected(topic: str, mtype: str, client: str, pid: int, ts: int, position: int, last: int,
              bodies: list[bytes], seqs: list[int] | None, base: int, mark: int, interval: int,
              prefix: bytes) -> tuple[list[JournalRecord], list[int], list[tuple[int, int]], bytes]:
    buf = bytearray(prefix)
    index = SparseIndex(interval)
    index.next_position = mark
    recs, out_seqs = [], []
    for i, body in enumerate(bodies):
        cs = None if seqs is None else seqs[i]
        last = assign_sequence(position + i, last, cs)
        recs.append(JournalRecord(position=position + i, kind=1, topic=topic, publisher_id=pid,
                                  sequence=last, timestamp=ts, client_name=client, client_seq=cs,
                                  message_type=mtype, body=body))
        out_seqs.append(last)
        index.maybe_add(position + i, base + len(buf), ts)
        append_record_py(buf, 1, position + i, pid, last, ts, cs, topic, mtype, client, None,
                         None, None, {}, body)
    return recs, out_seqs, list(zip(index.positions, index.offsets, strict=True)), bytes(buf)


RUN = st.tuples(
    st.text(max_size=40), st.sampled_from(["json", "fix", ""]), st.text(max_size=40),  # topic...
    U64, st.integers(-(1 << 63), (1 << 63) - 1),  # publisher id, time
    st.integers(0, 1 << 40), st.integers(0, 1 << 40) | st.just(SEQUENCE_FROM_S_LIMIT + 5),
    BODIES, st.booleans(), st.integers(0, 1 << 30),  # with s?, base
    st.integers(0, 1 << 41), st.integers(1, 5),  # mark, interval
)


@settings(max_examples=300, deadline=None)
@given(RUN, st.data())
def test_both_give_the_records_and_frames_of_one_by_one(run: tuple, data: st.DataObject) -> None:
    topic, mtype, client, pid, ts, position, last, bodies, with_s, base, mark, interval = run
    seqs = None
    if with_s and bodies:  # increasing, some 0 (no s), some at or past the limit
        seqs = sorted(data.draw(st.lists(st.integers(0, 1 << 40) | st.sampled_from(
            [0, SEQUENCE_FROM_S_LIMIT - 1, SEQUENCE_FROM_S_LIMIT, (1 << 64) - 1]),
            min_size=len(bodies), max_size=len(bodies))))
    recs, out_seqs, index, frames = _expected(topic, mtype, client, pid, ts, position, last,
                                              bodies, seqs, base, mark, interval, b"before")
    for fn in (publish_run_py, *((_speedups.publish_run,) if _speedups is not None else ())):
        buf = bytearray(b"before")
        out = fn(buf, JournalRecord, topic, mtype, client, pid, ts, position, last, bodies, seqs,
                 base, mark, interval)
        assert out is not None
        assert out == (recs, out_seqs, index), fn
        assert bytes(buf) == frames, fn
        for rec in out[0]:  # one empty headers dict for the run (a reader tells a run by it)
            assert rec.headers == {} and rec.headers is out[0][0].headers
        if out[0]:  # ... and another run, another dict
            again = fn(None, JournalRecord, topic, mtype, client, pid, ts, position, last, bodies,
                       seqs, base, mark, interval)
            assert again is not None and again[0][0].headers is not out[0][0].headers
        # without a buffer: the records only
        out = fn(None, JournalRecord, topic, mtype, client, pid, ts, position, last, bodies,
                 seqs, base, mark, interval)
        assert out == (recs, out_seqs, []), fn


@compiled
def test_the_compiled_run_declines_what_is_not_plain() -> None:
    """None, with nothing appended, for a body that is not bytes, an ``s`` that is not an int,
    a topic that is not a str; ``publish_run`` then gives the twin's result."""
    assert _speedups is not None
    good = [b'{"a":1}', b'{"a":2}']
    cases = [
        ("t", [b"x", bytearray(b"y")], None),
        ("t", good, [1, "2"]),
        ("t", good, [1]),  # not one s per body
        ("t", good, [1, -2]),
        (b"t", good, None),
    ]
    for topic, bodies, seqs in cases:
        buf = bytearray(b"keep")
        assert _speedups.publish_run(buf, JournalRecord, topic, "json", "c", 1, 2, 3, 0, bodies,
                                     seqs, 0, 0, 1) is None
        assert buf == b"keep"
    buf = bytearray()
    odd: list = [b"x", memoryview(b"y")]
    recs, seqs, index = publish_run(buf, JournalRecord, "t", "json", "c", 1, 2, 3, 0, odd, None,
                                    0, 0, 10)
    assert [r.position for r in recs] == [3, 4] and seqs == [3, 4] and index == [(3, 0)]
