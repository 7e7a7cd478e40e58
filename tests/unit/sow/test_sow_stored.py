"""A plain query's records kept as stored (``sow.record.StoredRecords``) and framed straight
from the stored values (``sow_frames``: ``_speedups.sow_frames`` and its pure-Python twin
``sow.record.sow_frames_py``).

The reference for the frames is independent of both: the frames the general path writes
(``server.sow_results.batches`` + ``protocol.codec.sow_batch``, msgspec encoding a header dict
per record) for the same records, read back by ``protocol.codec.split_frame``. The reference
for the records is the topic's own query without ``stored``.
"""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator.protocol.codec import payloads_of, sow_batch, sow_batch_prefix, split_frame
from amps_emulator.server.handlers.sow_results import batches, send_records
from amps_emulator.sow import SowStore, TopicSpec
from amps_emulator.sow.record import (
    Record,
    StoredRecords,
    decode_record,
    encode_record,
    sow_frames_py,
)
from amps_emulator.sow.testing import FakeClock, js
from tests.support.compiled import compiled
from tests.support.compiled import speedups as _speedups

FRAMERS = [pytest.param(sow_frames_py, id="pure"),
           pytest.param(_speedups and _speedups.sow_frames, id="compiled", marks=compiled)]

#: keys and bookmarks with every character JSON escapes, and some it does not
ODD = ['k"1', "k\\2", "tab\t", "nl\n\r", "\x00\x01\x1f\x7f", "\b\f", "é€😀", "/x", ""]


def _records(n: int, odd: bool = True) -> list[Record]:
    out = []
    for i in range(n):
        key = f"{ODD[i % len(ODD)]}{i}" if odd else str(i)
        bm = f"{i}|{ODD[(i * 3) % len(ODD)]}|" if odd else f"1|{i}|"
        headers = {"correlation_id": "c" * (i % 300)} if i % 4 == 0 else None  # body offsets
        out.append(Record(key, js({"id": i, "s": "x" * (i % 7)}), bm, 1.7e9 + i / 7, None, i,
                          headers))
    return out


def _stored(recs: list[Record]) -> StoredRecords:
    return StoredRecords([(i.to_bytes(8, "big") + r.sow_key.encode(), encode_record(r))
                          for i, r in enumerate(recs, 1)])


def _general(recs: list[Record], batch: int, opts: dict, qid: str = "q") -> list[bytes]:
    return [sow_batch("orders", qid, chunk) for chunk in batches(recs, batch, opts)]


def _stamps(stored: StoredRecords) -> list[bytes]:
    from amps_emulator.protocol.bookmarks import format_timestamp
    from amps_emulator.sow.record import stored_timestamp
    return [format_timestamp(round(stored_timestamp(v) * 1_000_000)).encode()
            for _, v in stored.rows]


@pytest.mark.parametrize("framer", FRAMERS)
@pytest.mark.parametrize("batch", [1, 3, 10, 10_000])
@pytest.mark.parametrize("opts", [{}, {"no_sowkey": True}, {"timestamp": True},
                                  {"no_sowkey": True, "timestamp": True}])
def test_frames_are_the_general_paths(framer, batch: int, opts: dict) -> None:
    recs = _records(37)
    stored = _stored(recs)
    with_key = "no_sowkey" not in opts
    stamps = _stamps(stored) if "timestamp" in opts else None
    prefix = sow_batch_prefix("orders", "q")
    assert framer(prefix, stored.rows, with_key, stamps, 0, 37, batch) == \
        _general(recs, batch, opts)
    # a part of the result: records 5..29
    assert framer(prefix, stored.rows, with_key, stamps, 5, 30, batch) == \
        _general(recs[5:30], batch, opts)
    assert framer(prefix, stored.rows, with_key, stamps, 9, 9, batch) == []


def test_frames_read_back_as_sent() -> None:
    """What a client reads: the outer header, then per record its header and body."""
    recs = _records(12)
    stored = _stored(recs)
    (frame,) = sow_frames_py(sow_batch_prefix("orders", "q1"), stored.rows, True, None, 0, 12,
                             100)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    outer, rest = split_frame(frame[4:])
    assert outer == {"c": "sow", "t": "orders", "query_id": "q1"}
    for rec in recs:
        header, rest = split_frame(rest)
        assert header == {"k": rec.sow_key, "bm": rec.bookmark, "l": len(rec.data)}
        assert rest[:header["l"]] == rec.data
        rest = rest[header["l"]:]
    assert rest == b""


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=40), st.text(max_size=300),
                          st.binary(max_size=600),
                          st.none() | st.dictionaries(st.text(max_size=5), st.text(max_size=80),
                                                      max_size=3)),
                max_size=25, unique_by=lambda t: t[0]),
       st.integers(1, 30), st.booleans())
def test_both_framers_write_the_general_paths_frames(rows, batch: int, no_key: bool) -> None:
    recs = [Record(k, body, bm, 1.6e9, None, 0, headers or None) for k, bm, body, headers in rows]
    stored = _stored(recs)
    opts = {"no_sowkey": True} if no_key else {}
    args = (sow_batch_prefix("orders", "q"), stored.rows, not no_key, None, 0, len(recs), batch)
    want = _general(recs, batch, opts)
    assert sow_frames_py(*args) == want
    assert sow_frames_py(*args, True) == b"".join(want)  # joined: one bytes, one write
    if _speedups is not None:
        assert _speedups.sow_frames(*args) == want
        assert _speedups.sow_frames(*args, True) == b"".join(want)
        assert _speedups.sow_frames(*args, False) == want


def _bad_values() -> list[bytes]:
    good = encode_record(Record("k", b"{}", "1|1|", 1.0))
    wrong_version = good[:1] + b"\x02" + good[2:]
    long_bookmark = good[:2] + (60000).to_bytes(2, "big") + good[4:]
    past_the_end = good[:32] + (len(good) + 1).to_bytes(4, "big") + good[36:]
    return [good[:35], b"", wrong_version, long_bookmark, past_the_end]


@pytest.mark.parametrize("framer", FRAMERS)
@pytest.mark.parametrize("bad", range(5))
def test_a_value_that_is_no_record_is_refused_by_both(framer, bad: int) -> None:
    good = encode_record(Record("k", b"{}", "1|1|", 1.0))
    rows = [(bytes(8) + b"a", good), (bytes(8) + b"b", _bad_values()[bad]),
            (bytes(8) + b"c", good)]
    for joined in (False, True):
        with pytest.raises(ValueError, match="stored SOW record 1: not a version 1 record"):
            framer(b"{}", rows, True, None, 0, 3, 10, joined)


@pytest.mark.parametrize("framer", FRAMERS)
@pytest.mark.parametrize("args", [(0, 4, 1), (-1, 2, 1), (2, 1, 1), (0, 3, 0)])
def test_a_bad_range_is_refused_by_both(framer, args) -> None:
    good = encode_record(Record("k", b"{}", "", 1.0))
    with pytest.raises(ValueError, match="bad range"):
        framer(b"{}", [(bytes(8) + b"k", good)] * 3, False, None, *args)
    with pytest.raises(ValueError, match="bad range"):  # stamps shorter than end
        framer(b"{}", [(bytes(8) + b"k", good)] * 3, True, [b"ts"], 0, 3, 1)


@pytest.mark.parametrize("framer", FRAMERS)
def test_other_types_are_refused_by_both(framer) -> None:
    good = encode_record(Record("k", b"{}", "", 1.0))
    k = bytes(8) + b"k"
    for rows, stamps in (([(k, "text")], None), ([("k", good)], None),
                         ([(k, good)], ["ts"]), ([[k, good]], None),
                         ([(k, good, b"")], None), ([k], None)):
        for joined in (False, True):
            with pytest.raises(TypeError):
                framer(b"{}", rows, True, stamps, 0, 1, 1, joined)


def test_stored_records_read_as_records() -> None:
    recs = _records(20)
    stored = _stored(recs)
    assert len(stored) == 20
    assert list(stored) == recs
    assert stored[7] == recs[7] == decode_record(recs[7].sow_key, stored.rows[7][1])
    part = stored[3:9]
    assert isinstance(part, StoredRecords) and list(part) == recs[3:9]
    more = StoredRecords()
    more.extend(stored[:2])
    more.extend(stored[18:])
    assert list(more) == recs[:2] + recs[18:]


# -- queries ---------------------------------------------------------------------------------

QUERIES = [  # (query, kept as stored)
    (dict(), True),
    (dict(filter="/v >= 10"), True),  # the filter's fields mode
    (dict(filter="/v + 0 >= 10 OR /missing IS NOT NULL"), True),
    (dict(filter="/v >= 10", top_n=17, skip_n=3), True),
    (dict(top_n=5), True),
    (dict(skip_n=95), True),
    (dict(filter="/v >= 10", select="[+/id]"), True),  # an identity select
    (dict(filter="/g = 1"), True),  # the hash index's candidates
    (dict(filter="/g = 1 AND /v < 50"), True),  # candidates checked against the filter
    (dict(filter="/id = 3 OR /v = 'x'"), True),  # indexes (a memo index made for /v)
    (dict(sow_keys="1,5,9,99"), True),  # the keys asked for (9 and 99 expired)
    (dict(filter="/v >= 10", order_by="/v DESC"), False),  # ordered
    (dict(filter="/v >= 10", select="[-/,+/id]"), False),  # projected
    (dict(filter="/v >= 10 AND SOW_KEY() IS NOT NULL"), False),  # reads the message context
]


@pytest.fixture
def topic(tmp_path):
    clock = FakeClock()
    store = SowStore(str(tmp_path / "env"), clock=clock, sync=False)
    t = store.open_topic(TopicSpec("orders", keys=("/id",), hash_indexes=(("/g",),),
                                   expiration=60.0))
    for i in range(100):
        t.publish(js({"id": i, "g": i % 2, "v": (i * 37) % 100, "n": [i, {"a": i}]}),
                  bookmark=f"1|{i}|", expiration=10 if i % 9 == 0 else 0)
    store.commit()
    clock.advance(20)  # every 9th record has expired (not swept)
    yield t
    store.close()


def _run(steps):
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value


@pytest.mark.parametrize("chunk", [0, 7])
@pytest.mark.parametrize("q, plain", QUERIES)
def test_a_stored_query_returns_the_queries_records(topic, q: dict, plain: bool,
                                                    chunk: int) -> None:
    want = _run(topic.query_steps(**q, chunk=chunk))
    got = _run(topic.query_steps(**q, chunk=chunk, stored=True))
    assert list(got.records) == list(want.records)
    assert (got.matches, got.topic_matches) == (want.matches, want.topic_matches)
    assert isinstance(got.records, StoredRecords) == plain
    if chunk and plain and "candidates" not in got.plan:
        assert "in steps of 7" in got.plan


def test_a_transient_topic_returns_records() -> None:
    from amps_emulator.sow import TransientStore

    t = TransientStore(clock=FakeClock()).open_topic(TopicSpec("orders", keys=("/id",)))
    for i in range(30):
        t.publish(js({"id": i}))
    got = _run(t.query_steps(chunk=4, stored=True))
    assert isinstance(got.records, list) and [r.sow_key for r in got.records] == \
        [r.sow_key for r in t.query().records]


class _Out:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> None:
        self.sent.append(data)


@pytest.mark.parametrize("batch", [1, 10, 333, 10_000])
@pytest.mark.parametrize("opts", [{}, {"timestamp": True, "no_sowkey": True}])
def test_send_records_sends_the_same_frames_in_steps(topic, batch: int, opts: dict) -> None:
    """Stored records go out as the same frames as the Records they are, a step (a yield)
    after every SEND_STEP records or more, in whole batches, each step's frames as one
    write."""
    import amps_emulator.server.handlers.sow_results as sow_results

    want, stored = _Out(), _Out()
    records = topic.query().records
    stored_records = _run(topic.query_steps(stored=True)).records
    assert isinstance(stored_records, StoredRecords)
    _steps(send_records(want, "q", "orders", records, batch, opts))
    old = sow_results.SEND_STEP
    sow_results.SEND_STEP = 20
    try:
        yields, sent = _steps(send_records(stored, "q", "orders", stored_records, batch, opts))
    finally:
        sow_results.SEND_STEP = old
    assert b"".join(stored.sent) == b"".join(want.sent)
    assert sent == len(records) == b"".join(stored.sent).count(b'"l":')
    step = -(-20 // batch) * batch  # whole batches, at least SEND_STEP records
    assert yields == -(-len(records) // step) - 1  # a yield between two steps
    assert len(stored.sent) == yields + 1  # one write a step


def _steps(gen) -> tuple[int, int]:
    n = 0
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return n, stop.value
        n += 1


def test_the_frames_parse_as_json_records(topic) -> None:
    stored_records = _run(topic.query_steps(filter="/v >= 50", stored=True)).records
    out = _Out()
    _steps(send_records(out, "q", "orders", stored_records, 10, {}))
    keys = []
    for frame in payloads_of(b"".join(out.sent)):
        outer, rest = split_frame(frame)
        while rest:
            header, rest = split_frame(rest)
            doc = msgspec.json.decode(rest[:header["l"]])
            assert doc["v"] >= 50
            keys.append(header["k"])
            rest = rest[header["l"]:]
    assert keys == [r.sow_key for r in topic.query("/v >= 50").records]


@pytest.mark.parametrize("flt", [None, "/v * 1 >= 10"])  # (no index serves the filter)
def test_a_stored_query_in_steps_reads_its_snapshot(tmp_path, flt) -> None:
    """No record expired (every row kept as read): writes between the steps do not change
    the answer."""
    store = SowStore(str(tmp_path / "env"), clock=FakeClock(), sync=False)
    t = store.open_topic(TopicSpec("orders", keys=("/id",)))
    for i in range(50):
        t.publish(js({"id": i, "v": i}), bookmark=f"1|{i}|")
    store.commit()
    want = list(t.query(flt).records)
    steps = t.query_steps(flt, chunk=6, stored=True)
    next(steps)
    for i in range(0, 60, 2):  # updates, inserts and deletes meanwhile
        t.publish(js({"id": i, "v": -1}))
    t.delete_by_keys([r.sow_key for r in want[1:40:3]])
    store.commit()
    got = _run(steps)
    assert isinstance(got.records, StoredRecords) and "in steps of 6" in got.plan
    assert list(got.records) == want
    store.close()


def test_an_index_range_reads_the_keys_in_bounds(tmp_path) -> None:
    """``LmdbOrderedSet.range`` (read in runs of keys) against the sorted keys it holds:
    bounds inside, between and past runs, and limits just below and at the count."""
    from amps_emulator.sow.storage.lmdb_tables import _RANGE_RUN, LmdbOrderedSet
    from amps_emulator.sow.storage.lmdbenv import LmdbEnv

    env = LmdbEnv(str(tmp_path / "e"), sync=False)
    s = LmdbOrderedSet(env, env.open_db("x"))
    keys = sorted(b"%05d" % (i * 3) for i in range(3 * _RANGE_RUN + 7))
    for k in keys:
        s.add(k)
    env.commit()
    bounds = [None, b"", b"00000", b"00001", b"00768", b"00769", b"01000", b"99999",
              keys[_RANGE_RUN - 1], keys[_RANGE_RUN], keys[-1]]
    for lo in bounds:
        for hi in bounds:
            want = [k for k in keys if (lo is None or k >= lo) and (hi is None or k < hi)]
            assert s.range(lo, hi) == want, (lo, hi)
            for limit in {0, 1, len(want) - 1, len(want), _RANGE_RUN, 2 * _RANGE_RUN + 1}:
                if limit < 0:
                    continue
                assert s.range(lo, hi, limit) == (want if len(want) <= limit else None), \
                    (lo, hi, limit)
    env.close()


@pytest.mark.parametrize("framer", FRAMERS)
def test_a_row_without_its_insert_sequence_is_refused_by_both(framer) -> None:
    good = encode_record(Record("k", b"{}", "", 1.0))
    with pytest.raises(ValueError, match="stored SOW row 1: no insert sequence"):
        framer(b"{}", [(bytes(8) + b"k", good), (b"k", good)], True, None, 0, 2, 10)


@pytest.mark.parametrize("batch", [1, 10, 333])
@pytest.mark.parametrize("opts", [{}, {"timestamp": True, "no_sowkey": True}])
def test_a_query_read_in_steps_is_sent_as_it_reads_the_same_frames(topic, batch: int,
                                                                   opts: dict) -> None:
    """A plain query's records go out between the steps of its scan (``into``, then
    ``StoredStream.send_read`` after each step): whole batches of what was read so far, then
    the rest; the frames are those of the whole result sent at once, none missing."""
    from amps_emulator.server.handlers.sow_results import StoredStream

    want = _Out()
    _steps(send_records(want, "q", "orders", topic.query().records, batch, opts))
    out = _Out()
    stream = StoredStream(out, "orders", batch, opts)
    steps = topic.query_steps(stored=True, chunk=7, into=stream.records)
    next(steps)  # the snapshot: nothing read yet
    sent_between = []
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            result = stop.value
            break
        stream.send_read("q")
        sent_between.append(stream.sent)
    assert result.records is stream.records
    assert all(n % batch == 0 for n in sent_between)
    assert sent_between[-1] > 0 or batch > len(stream.records)  # (sent before the end)
    assert _steps(stream.send_rest("q"))[1] == len(topic.query().records)
    assert b"".join(out.sent) == b"".join(want.sent)


def test_a_paged_query_is_not_sent_as_it_reads(topic) -> None:
    into = StoredRecords()
    result = _run(topic.query_steps(stored=True, chunk=7, into=into, top_n=5))
    assert len(into) == 0 and len(result.records) == 5
