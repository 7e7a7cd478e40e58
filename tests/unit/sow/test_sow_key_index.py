"""The Key field's index (``sow.index.KeyHashIndex``) leaves out the rows a record's SowKey
implies; an equality on the Key field must still find exactly what a scan finds, whatever form
the key values take (numbers, numeric strings with other spellings, floats, booleans, plain
strings) and however records change form under the same SowKey, are deleted and come back."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amps_emulator.sow.index import KeyHashIndex
from amps_emulator.sow.testing import FakeClock, StoreFactory, js

#: key values whose texts and tokens overlap in every way the index cares about
VALUES = [5, "5", "05", 5.0, 5.5, "5.5", "5.0", -3, "-3", 0, "0", "-0", True, "true", 1, "1",
          "ABC", "", 2**53 + 1, 2**60, "x" * 70, 9007199254740993, 1e16, "1e16", " 5", [5, 6]]
LITERALS = ["5", "'5'", "'05'", "5.0", "5.5", "'5.5'", "-3", "'-3'", "0", "'-0'", "true", "1",
            "'true'", "'ABC'", "''", str(2**53 + 1), str(2**60), "'" + "x" * 70 + "'",
            "1e16", "'1e16'", "' 5'", "6", "(5, 'ABC')", "(1, 0, 'x')"]

ops = st.lists(st.tuples(st.sampled_from(["pub", "pub", "del"]),
                         st.integers(0, len(VALUES) - 1), st.integers(0, 3)),
               min_size=1, max_size=40)


def _ids(result) -> list:
    return sorted(msgspec.json.decode(r.data)["n"] for r in result.records)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops, kind=st.sampled_from(["persistent", "transient"]))
def test_key_equality_finds_what_a_scan_finds(tmp_path_factory, ops, kind) -> None:
    sf = StoreFactory(kind, tmp_path_factory.mktemp("k"), FakeClock())
    try:
        t = sf.topic("orders", keys=("/id",))
        assert isinstance(t.hash_indexes[0], KeyHashIndex)
        for n, (op, i, batch) in enumerate(ops):
            if op == "pub":
                t.publish(js({"id": VALUES[i], "n": n}))
            else:
                t.delete_by_data(js({"id": VALUES[i]}))
            if batch == 0 and sf.store is not None:
                sf.store.commit()
        for lit in LITERALS:
            flt = f"/id IN {lit}" if lit.startswith("(") else f"/id = {lit}"
            want = _ids(t.query(flt, plan="scan"))
            assert _ids(t.query(flt, plan="hash")) == want, flt
    finally:
        sf.close()


@pytest.fixture
def keyed_store(tmp_path):
    """A persistent store and its topic ``orders`` keyed on ``/id``."""
    sf = StoreFactory("persistent", tmp_path, FakeClock())
    try:
        yield sf, sf.topic("orders", keys=("/id",))
    finally:
        sf.close()


def test_rows_are_kept_only_where_the_token_does_not_name_the_record(keyed_store) -> None:
    _, t = keyed_store
    for v in (1, 2, "ABC", "7"):
        t.publish(js({"id": v}))
    assert t.index_info()[0]["entries"] == 0
    t.publish(js({"id": "05"}))  # "= 5" reaches it through a row of its own
    t.publish(js({"id": 2.5}))  # so does "= 2.5"
    assert t.index_info()[0]["entries"] == 2
    t.delete_by_data(js({"id": "05"}))
    assert t.index_info()[0]["entries"] == 1
    assert t.query("/id = 5", plan="hash").matches == 0
    assert t.query("/id = 2.5", plan="hash").matches == 1


def test_an_index_stored_in_the_earlier_form_is_rebuilt(keyed_store) -> None:
    sf, t = keyed_store
    b = t._b
    for v in (1, "05", 2.5):
        t.publish(js({"id": v}))
    # the earlier form: a plain hash index, a row per token, in its own table
    b.meta_put("indexes", [["hash", "/id"]])
    assert sf.store is not None
    sf.store.commit()
    sf.reopen()
    t = sf.topic("orders", keys=("/id",))
    assert t._b.meta_get("indexes") == [["keyhash", "/id"]]
    assert t.index_info()[0]["entries"] == 2
    assert t.query("/id = 5", plan="hash").matches == 1
