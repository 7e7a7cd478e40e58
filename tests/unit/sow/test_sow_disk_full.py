"""The SOW's LMDB file gets its blocks allocated before LMDB may write into them (a store
into a hole the file system cannot back is SIGBUS with a writable mapping): a refusal
becomes ``LmdbEnv.full`` instead, and the map does not grow until space returns."""

from __future__ import annotations

import errno
import logging
import os

from amps_emulator.sow import Sow, TopicSpec
from amps_emulator.sow.testing import js

MIB = 1 << 20


class Disk:
    """``os.posix_fallocate`` refusing (``error``) every range ending past ``limit`` bytes."""

    def __init__(self, real, limit: int | None = None, error: int = errno.ENOSPC) -> None:
        self.real, self.limit, self.error, self.calls = real, limit, error, 0

    def __call__(self, fd, offset, length):
        self.calls += 1
        if self.limit is not None and offset + length > self.limit:
            raise OSError(self.error, os.strerror(self.error))
        return self.real(fd, offset, length)


def sow(d, map_size=MIB):
    spec = [TopicSpec("orders", keys=("/id",), file_name=f"{d}/sow/orders.sow")]
    return Sow(spec, default_dir=str(d), sync=False, map_size=map_size)


def publish(s, ids):
    t = s.topic("orders")
    for i in ids:
        t.publish(js({"id": i, "v": "x" * 1000}))
    s.commit()


def test_a_refused_allocation_stops_growth_until_space_returns(tmp_path, monkeypatch):
    disk = Disk(os.posix_fallocate, limit=MIB)  # the first map fits, no growth does
    monkeypatch.setattr(os, "posix_fallocate", disk)
    s = sow(tmp_path)
    (path, st), = s.stores.items()
    assert s.full_stores() == {} and disk.calls == 1
    n = 0
    while not s.full_stores():
        publish(s, range(n, n + 50))
        n += 50
        assert n < 2000
    assert st.env.map_size == MIB  # never mapped past what is allocated
    assert s.full_stores()[path].errno == errno.ENOSPC
    publish(s, range(n, n + 50))  # the room left (half the map) takes what was accepted
    assert s.topic("orders").count() == n + 50
    assert not s.retry_full(path)
    disk.limit = None  # space returns
    assert s.retry_full(path) and s.full_stores() == {} and st.env.map_size == 2 * MIB
    publish(s, range(n + 50, n + 500))
    assert s.topic("orders").count() == n + 500
    s.close()


def test_a_small_file_system_gets_a_smaller_map_at_open(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(os, "posix_fallocate", Disk(os.posix_fallocate, limit=5 * MIB))
    with caplog.at_level(logging.WARNING, "amps_emulator.sow.lmdb"):
        s = sow(tmp_path, map_size=64 * MIB)
    (st,) = s.stores.values()
    assert st.env.map_size == 4 * MIB and s.full_stores() == {}
    assert ["no room for a 64 MiB map" in r.getMessage() for r in caplog.records] == [True]
    publish(s, range(100))
    s.close()
    s = sow(tmp_path, map_size=64 * MIB)  # reopened: the records, the same fitting
    assert s.topic("orders").count() == 100 and s.stores[next(iter(s.stores))].env.map_size == 4 * MIB
    s.close()


def test_without_fallocate_the_map_grows_as_before_with_one_warning(tmp_path, monkeypatch, caplog):
    disk = Disk(os.posix_fallocate, limit=0, error=errno.EOPNOTSUPP)
    monkeypatch.setattr(os, "posix_fallocate", disk)
    with caplog.at_level(logging.WARNING, "amps_emulator.sow.lmdb"):
        s = sow(tmp_path)
        publish(s, range(3000))  # several growths
    (st,) = s.stores.values()
    assert st.env.map_size > MIB and s.full_stores() == {} and disk.calls == 1
    assert len([r for r in caplog.records if "cannot preallocate" in r.getMessage()]) == 1
    s.close()


def test_a_large_body_makes_room_before_it_is_put(tmp_path, monkeypatch):
    """A body too large for the map grows it before the put, so it is put once: a put that
    found the map full would be done again once it had grown (the whole batch with it)."""
    from amps_emulator.sow.storage import lmdbenv

    s = sow(tmp_path)
    publish(s, range(3))
    env = s.stores[next(iter(s.stores))].env
    grown_holding: list[int] = []
    real_grow = env._grow

    def grow():
        grown_holding.append(max((len(op[3]) for op in env._ops if op[0] == lmdbenv._PUT),
                                 default=0))
        return real_grow()

    monkeypatch.setattr(env, "_grow", grow)
    big = js({"id": 99, "v": "y" * (4 * MIB)})
    s.topic("orders").publish(big)
    s.commit()
    assert grown_holding and max(grown_holding) < MIB, grown_holding  # grown before it was put
    assert s.topic("orders").count() == 4
    s.close()
