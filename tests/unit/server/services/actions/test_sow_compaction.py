"""``do-compact-sow``'s driver (``server.services.actions.sow_compaction.compact``) on a real
LMDB environment and a real event loop: a copy the writes outran is made again and at last
with the loop held when small (given up when not), the swap waits for the queries' snapshots
(given up past its bound), and a second compaction of the same environment is refused."""

from __future__ import annotations

import asyncio
import os

import lmdb
import pytest

from amps_emulator.server.services.actions import sow_compaction
from amps_emulator.server.services.actions.sow_compaction import compact
from amps_emulator.sow import SowStore, TopicSpec
from amps_emulator.sow.storage import lmdb_compact
from amps_emulator.sow.storage.lmdb_compact import Compacted
from amps_emulator.sow.testing import FakeClock, js


class _Turn:
    """The end of a turn: the loop's next pass."""

    def after(self, callback) -> None:
        asyncio.get_running_loop().call_soon(callback)


def _store(tmp_path) -> SowStore:
    st = SowStore(str(tmp_path / "amps-sow.lmdb"), sync=False, clock=FakeClock())
    t = st.open_topic(TopicSpec("orders", keys=("/id",)))
    for i in range(3000):
        t.publish(js({"id": i, "pad": "p" * 300}), position=i + 1)
    st.commit()
    t.delete_by_filter("/id > 10", position=4000)
    st.commit()
    return st


def _writing(st: SowStore, copies: list[int]):
    """Runs the work at once and, after each copy, commits more than a tiny log holds."""
    topic = st.topic("orders")

    async def in_thread(fn):
        out = fn()
        if getattr(fn, "__name__", "") == "copy":
            copies.append(1)
            topic.publish(js({"id": 1, "pad": "w" * 500}), position=5000 + len(copies))
            st.commit()
        return out
    return in_thread


def test_a_copy_the_writes_outran_is_made_again_then_with_the_loop_held(tmp_path):
    st = _store(tmp_path)
    used = st.env.used_bytes()
    copies: list[int] = []
    done = asyncio.run(compact(st.env, _Turn(), _writing(st, copies), log_limit=100))
    assert len(copies) == sow_compaction.RETRIES + 1  # each one stale
    assert isinstance(done, Compacted) and done.used_after < used // 4
    assert st.topic("orders").count() == 11
    assert st.topic("orders").applied_position == 5000 + len(copies)
    st.close()


def test_too_large_to_copy_with_the_loop_held_is_given_up(tmp_path, monkeypatch):
    monkeypatch.setattr(sow_compaction, "PAUSED_COPY_LIMIT", 1000)
    st = _store(tmp_path)
    size = os.path.getsize(str(tmp_path / "amps-sow.lmdb" / "data.mdb"))
    done = asyncio.run(compact(st.env, _Turn(), _writing(st, []), log_limit=100))
    assert isinstance(done, str) and "too many to copy with the server paused" in done
    assert os.path.getsize(str(tmp_path / "amps-sow.lmdb" / "data.mdb")) == size
    assert st.env.log is None and not st.env.copying
    st.close()


def test_the_swap_waits_for_the_snapshots_and_gives_up_past_its_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(sow_compaction, "QUIET_SECONDS", 0.05)
    st = _store(tmp_path)

    async def in_thread(fn):
        return fn()

    async def held() -> str | Compacted:
        snap = st.env.snapshot()  # a query reading, never ending
        try:
            return await compact(st.env, _Turn(), in_thread)
        finally:
            st.env.release(snap)

    why = asyncio.run(held())
    assert isinstance(why, str) and "queries kept reading" in why
    assert st.env.log is None and not os.path.exists(st.env.path + ".compact-tmp")

    async def released() -> str | Compacted:
        snap = st.env.snapshot()
        asyncio.get_running_loop().call_later(0.01, st.env.release, snap)
        return await compact(st.env, _Turn(), in_thread)

    assert isinstance(asyncio.run(released()), Compacted)
    st.close()


def test_a_second_compaction_of_an_environment_is_refused(tmp_path):
    st = _store(tmp_path)
    st.env.copying = True
    assert "already under way" in asyncio.run(compact(st.env, _Turn(), None))  # type: ignore[arg-type]
    st.env.copying = False
    st.close()


def test_a_copy_that_fails_otherwise_than_by_map_growth_is_given_up_at_once(tmp_path,
                                                                           monkeypatch):
    """A full disk while the copy is rewritten is no reason to copy again (as a map that grew
    before the copy began is): the compaction stops at once with that error as its reason,
    and the live environment goes on as before."""
    st = _store(tmp_path)
    size = os.path.getsize(str(tmp_path / "amps-sow.lmdb" / "data.mdb"))
    attempts: list[str] = []

    def rewrite(source, dest, max_dbs):
        attempts.append(dest)
        raise lmdb.DiskError("mdb_txn_commit: No space left on device")

    monkeypatch.setattr(lmdb_compact, "rewrite", rewrite)

    async def in_thread(fn):
        return fn()

    done = asyncio.run(compact(st.env, _Turn(), in_thread))
    assert len(attempts) == 1  # not made again
    assert isinstance(done, str) and "DiskError" in done and "No space left on device" in done
    assert st.env.log is None and not st.env.copying
    assert os.path.getsize(str(tmp_path / "amps-sow.lmdb" / "data.mdb")) == size
    topic = st.topic("orders")
    topic.publish(js({"id": 50, "pad": "after"}), position=6000)  # still written and read
    st.commit()
    assert topic.count() == 12
    st.close()


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path):
    yield
    assert not any(n.endswith((".compact-tmp", ".compact-new", ".compact-old"))
                   for n in os.listdir(tmp_path))
