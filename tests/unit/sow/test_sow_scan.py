"""Full scans of a persistent topic through the filter's fields mode (the generated loop in
``sow.storage.lmdb_scan``): the same records, in the same order, with the same documents, as the
reference interpreter evaluated on what the scan decodes, and as a transient topic."""

from __future__ import annotations

import shutil
import tempfile

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amps_emulator.protocol.filter import compile_filter, compiler, interpret_filter, to_text
from amps_emulator.protocol.filter.fields import fields_filter
from amps_emulator.sow import SowStore, TopicSpec, TransientStore
from amps_emulator.sow.paths import top_level_names
from amps_emulator.sow.query import parse_order_by, sort_records
from amps_emulator.sow.testing import FakeClock
from tests.support.filter_corpus import BODIES, SCAN_FILTERS, documents, expressions, reference_doc


def _topic(kind: str, path: str | None, **kw):
    clock = FakeClock()
    store = SowStore(path, clock=clock, sync=False) if kind == "persistent" else \
        TransientStore(clock=clock)
    return store, store.open_topic(TopicSpec("t", durability=kind, **kw))


def _expected(t, text: str, extra=(), order_by: str | None = None) -> list[str]:
    """Keys of the records the reference interpreter matches, evaluated on the document the
    scan decodes for each record (in natural order, or sorted by ``order_by``)."""
    f = compile_filter(text)
    names = sorted(top_level_names(f.paths) | set(extra))
    recs = t.query(plan="scan").records  # every record, natural order
    doc = {r.sow_key: reference_doc(names, r.data) for r in recs}
    hits = [r for r in recs if interpret_filter(f.ast, doc[r.sow_key], t._ctx_of(r))]
    if order_by is not None:
        hits = sort_records(hits, parse_order_by(order_by), lambda r: doc[r.sow_key])
    return [r.sow_key for r in hits]


def _valid(body: bytes) -> bool:
    try:
        msgspec.json.decode(body)
        return True
    except (msgspec.DecodeError, UnicodeDecodeError):
        return False


@pytest.fixture(scope="module")
def stores():
    path = tempfile.mkdtemp(prefix="sowscan")
    bodies = {f"k{i:03d}": b for i, b in enumerate(BODIES)}
    out = {}
    for kind in ("persistent", "transient"):
        store, t = _topic(kind, path if kind == "persistent" else None)
        for k, b in bodies.items():
            t.publish(b, sow_key=k)
        store.commit()
        out[kind] = (store, t)
    yield bodies, out
    for store, _ in out.values():
        store.close()
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("text", SCAN_FILTERS)
def test_scan_through_fields_mode(stores, text):
    bodies, topics = stores
    _, lmdb_topic = topics["persistent"]
    _, mem_topic = topics["transient"]
    before = compiler.recoveries
    want = _expected(lmdb_topic, text)
    got = lmdb_topic.query(text, plan="scan")
    assert [r.sow_key for r in got.records] == want, text
    assert fields_filter(compile_filter(text))._built, "the fields-mode loop ran"
    assert all(r.data == bodies[r.sow_key] for r in got.records)
    # a transient topic evaluates the full decode: the same where that is the whole body
    assert sorted(r.sow_key for r in mem_topic.query(text, plan="scan").records
                  if _valid(r.data)) == sorted(k for k in want if _valid(bodies[k]))
    # an orderby on fields the filter does not read: they are decoded too
    order = "/sym DESC, /note"
    ordered = lmdb_topic.query(text, plan="scan", order_by=order)
    assert [r.sow_key for r in ordered.records] == \
        _expected(lmdb_topic, text, ("sym", "note"), order)
    assert compiler.recoveries == before


def test_scan_rows_and_documents(tmp_path):
    store, t = _topic("persistent", str(tmp_path / "env"), keys=("/id",))
    for i in range(50):
        t.publish(msgspec.json.encode({"id": i, "qty": i % 7, "region": "eu" if i % 2 else "us",
                                       "px": i / 4}))
    # a long bookmark and headers put the body beyond offset 255 (found through the header)
    t.publish(msgspec.json.encode({"id": 100, "qty": 3, "region": "eu", "px": 0.5}),
              bookmark="b" * 300, headers={"x": "h" * 100})
    store.commit()
    rows, total, plan = t._match("/qty = 3 AND /region = 'eu'", None, t.now(), (("px",),),
                                 "scan")
    assert plan == "scan" and total == 51
    assert [d for _, d in rows] == [{"qty": 3, "region": "eu", "px": r.doc["px"]}
                                    for r, _ in rows]
    assert sorted(r.doc["id"] for r, _ in rows) == [3, 17, 31, 45, 100]
    assert [r.bookmark for r, _ in rows if r.doc["id"] == 100] == ["b" * 300]
    q = t.query("/qty = 3 AND /region = 'eu'", order_by="/px DESC", top_n=2, plan="scan")
    assert [r.doc["id"] for r in q.records] == [45, 31] and q.matches == 5
    # deletes go through the same scan
    d = t.delete_by_filter("/qty * 1 = 3 AND UPPER(/region) = 'EU'", plan="scan")
    assert sorted(r.doc["id"] for r in d.records) == [3, 17, 31, 45, 100]
    assert t.query("/qty = 3", plan="scan").matches == 3
    store.close()


def test_scan_with_field_names_msgspec_cannot_use(tmp_path):
    store, t = _topic("persistent", str(tmp_path / "env"))
    t.publish(msgspec.json.encode({'a"b': 1, "c": 2}), sow_key="A")
    t.publish(msgspec.json.encode({'a"b': 2, "c": 2}), sow_key="B")
    assert [r.sow_key for r in t.query('[/a"b] = 1', plan="scan").records] == ["A"]
    assert [r.sow_key for r in t.query("/c = 2", plan="scan", order_by='[/a"b] DESC')
            .records] == ["B", "A"]
    store.close()


def test_scan_skips_expired_and_sees_uncommitted_writes(tmp_path):
    clock = FakeClock()
    store = SowStore(str(tmp_path / "env"), clock=clock, sync=False)
    t = store.open_topic(TopicSpec("t", keys=("/id",), expiration=60.0))
    for i in range(10):
        t.publish(msgspec.json.encode({"id": i, "qty": 1}), expiration=10 if i < 4 else 0)
    store.commit()
    clock.advance(20)
    assert t.query("/qty = /qty", plan="scan").matches == 6
    t.publish(msgspec.json.encode({"id": 99, "qty": 1}))  # not committed yet
    assert t.query("/qty + 0 = 1", plan="scan").matches == 7
    store.close()


def test_property_scan_matches_reference():
    path = tempfile.mkdtemp(prefix="sowscanprop")
    store, t = _topic("persistent", path)

    @settings(max_examples=60, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(documents, min_size=1, max_size=12), st.lists(expressions, min_size=1,
                                                                    max_size=3))
    def run(docs, nodes):
        t.clear()
        bodies = {}
        for i, d in enumerate(docs):
            b = msgspec.json.encode(d)
            if i % 5 == 4:
                b = b[:-1] or b"x"  # not JSON
            bodies[f"k{i:03d}"] = b
            t.publish(b, sow_key=f"k{i:03d}")
        store.commit()
        before = compiler.recoveries
        for node in nodes:
            text = to_text(node)
            for flt in (text, f"NOT ({text})"):
                got = [r.sow_key for r in t.query(flt, plan="scan").records]
                assert got == _expected(t, flt), (flt, bodies)
        assert compiler.recoveries == before

    try:
        run()
    finally:
        store.close()
        shutil.rmtree(path, ignore_errors=True)


def test_a_query_takes_what_its_filter_reads_from_the_compiled_filter(tmp_path, monkeypatch):
    """What a filter reads of each record, and whether it reads the message context, are
    found when it is compiled (off the event loop for a long one): a query over a filter of
    100,000 terms walked them all again on the loop (140 ms)."""
    from amps_emulator.protocol.filter import ast as A

    f = compile_filter("/qty + /qty + /px * 2 > 5 AND /region = 'eu'")
    assert f.paths == (("qty",), ("px",), ("region",)) and not f.uses_context
    store, t = _topic("persistent", str(tmp_path / "env"), keys=("/id",))
    for i in range(20):
        t.publish(msgspec.json.encode({"id": i, "qty": i % 7, "region": "eu" if i % 2 else "us",
                                       "px": i / 4}))
    store.commit()

    def walked(_node):
        raise AssertionError("the filter was walked again for the query")

    fields_filter(f)  # (made once for a compiled filter and kept on it, as its paths are)
    monkeypatch.setattr(A, "walk", walked)
    got = sorted(r.doc["id"] for r in t.query(f, plan="scan").records)
    assert got == [i for i in range(20) if i % 2 and 2 * (i % 7) + i / 2 > 5]
    store.close()
