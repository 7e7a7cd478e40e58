"""The statistics' history (:mod:`server.ops.stats_history`): a leaf's value at each sample,
a node as it was at one sample (collections and empty ones as the live tree has them), the
window of kept samples, and the times ``t0``/``t1`` take."""

from __future__ import annotations

import pytest

from amps_emulator.server.ops.admin_http import HttpError
from amps_emulator.server.ops.stats_history import StatsHistory, format_time, parse_time

T0 = parse_time("20240102T101500")


def _tree(clients: dict[str, str], replication: list | None = None) -> dict:
    return {"amps": {"instance": {
        "name": "x", "clients": [{"id": name, "bytes_in": v} for name, v in clients.items()],
        "replication": replication or [], "transaction_log": {}}}}


def _at(i: int) -> str:
    return format_time(T0 + i * 10_000_000)


def test_times_as_the_monitoring_reference_writes_them() -> None:
    assert format_time(T0) == "20240102T101500.000000Z"
    assert parse_time("20240102T101500.5") == T0 + 500_000
    assert parse_time("20240102T10") == parse_time("20240102T100000")
    assert parse_time("20240102T0") == parse_time("20240102") == parse_time("20240102T000000Z")
    assert parse_time(format_time(T0 + 123)) == T0 + 123
    for bad in ("yesterday", "2024-01-02T10:15:00", "20241302T0", "20240102T1015001"):
        with pytest.raises(ValueError):
            parse_time(bad)


def test_leaf_series_node_snapshots_and_what_is_refused() -> None:
    h = StatsHistory()
    h.record(T0, _tree({"a": "1"}))
    h.record(T0 + 10_000_000, _tree({"a": "1", "b": "5"}))
    h.record(T0 + 20_000_000, _tree({"b": "7"}, [{"id": "B", "seconds_behind": "0"}]))
    leaf = ["amps", "instance", "clients", "a", "bytes_in"]
    got = h.select(leaf, {"t0": _at(0)})
    assert got.series and got.node == [(_at(0), "1"), (_at(1), "1")]  # gone at the third
    assert got.steps[-2:] == [("a", True), ("bytes_in", False)]
    assert h.select(["amps", "instance", "clients", "b", "bytes_in"], {"t1": _at(2)}).node == [
        (_at(1), "5"), (_at(2), "7")]
    assert h.select(leaf, {"t0": _at(1), "t1": _at(1)}).node == [(_at(1), "1")]
    assert h.select(leaf, {"t0": "20240102T101505", "t1": "20240102T101515"}).node == [
        (_at(1), "1")]  # between samples
    # a node at one sample: lists of entries with their id, empty ones too
    inst = h.select(["amps", "instance"], {"t0": _at(0), "t1": _at(0)})
    assert not inst.series
    assert inst.node == {"name": "x", "clients": [{"id": "a", "bytes_in": "1"}],
                         "replication": [], "transaction_log": {}}
    later = h.select(["amps", "instance"], {"t0": _at(2), "t1": _at(2)}).node
    assert later["clients"] == [{"id": "b", "bytes_in": "7"}]
    assert later["replication"] == [{"id": "B", "seconds_behind": "0"}]
    entry = h.select(["amps", "instance", "clients", "b"], {"t0": _at(1), "t1": _at(1)})
    assert entry.node == {"bytes_in": "5"} and entry.steps[-1] == ("b", True)
    for segs, query, status in (
            (["amps", "instance"], {"t0": _at(0), "t1": _at(1)}, 400),  # a range on a node
            (["amps", "instance"], {"t0": _at(0)}, 400),
            (["amps", "instance"], {"t0": "20240102T101501", "t1": "20240102T101501"}, 404),
            (["amps", "instance", "clients", "a"], {"t0": _at(2), "t1": _at(2)}, 404),  # gone
            (["amps", "nothing"], {"t0": _at(0)}, 404),
            (leaf, {"t0": "soon"}, 400)):
        with pytest.raises(HttpError) as err:
            h.select(segs, query)
        assert err.value.status == status
    assert h.queries == 12  # (a bad time is refused before it is one)


def test_only_the_last_samples_are_kept_and_what_left_is_forgotten() -> None:
    h = StatsHistory(keep=8)
    for i in range(40):
        clients = {"steady": "1", f"passing-{i}": str(i)}
        h.record(T0 + i * 10_000_000, _tree(clients))
    assert h.samples == 40 and len(h.times) == 8
    series = h.select(["amps", "instance", "clients", "steady", "bytes_in"], {"t0": _at(0)})
    assert [t for t, _ in series.node] == [_at(i) for i in range(32, 40)]
    # the clients that passed through long ago are gone from the store
    passing = [p for p in h._series if p[3:4] and p[3].startswith("passing-")]
    assert len(passing) <= 2 * 8 + 2  # (pruned every keep // 8 samples)
    # a value that never changed is one entry however many samples it spans
    assert len(h._series[("amps", "instance", "clients", "steady", "bytes_in")].at) == 1


def test_the_collections_of_resources_long_gone_are_forgotten_too() -> None:
    h = StatsHistory(keep=8)
    for i in range(40):  # each passing client has a collection of its own
        tree = _tree({"steady": "1"})
        tree["amps"]["instance"]["clients"].append(
            {"id": f"passing-{i}", "subscriptions": [{"id": "s1", "topic": "t"}]})
        h.record(T0 + i * 10_000_000, tree)
    own = [p for p in h._lists if p[3:4] and p[3].startswith("passing-")]
    assert 0 < len(own) <= 2 * 8 + 2  # (pruned every keep // 8 samples, as their series are)
    assert ("amps", "instance", "clients") in h._lists
    entry = h.select(["amps", "instance", "clients", "passing-39"], {"t0": _at(39), "t1": _at(39)})
    assert entry.node == {"subscriptions": [{"id": "s1", "topic": "t"}]}
