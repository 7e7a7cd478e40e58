"""Test helpers for code using the SOW: a fake clock, and a factory that builds either store
(used by ``tests/unit/test_sow_*.py``; the server's tests may reuse them)."""

from __future__ import annotations

import msgspec

from amps_emulator.sow.spec import TopicSpec
from amps_emulator.sow.store import SowStore, TransientStore
from amps_emulator.sow.topic import Topic


class FakeClock:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


class StoreFactory:
    """Builds a persistent or transient store; ``reopen()`` simulates a restart."""

    def __init__(self, kind: str, tmp_path, clock: FakeClock | None = None) -> None:
        import os
        self.kind = kind
        self.path = os.path.join(str(tmp_path), "sowenv")
        self.clock = clock or FakeClock()
        self.store: SowStore | TransientStore | None = None

    @property
    def persistent(self) -> bool:
        return self.kind == "persistent"

    def open(self, **kw) -> SowStore | TransientStore:
        store: SowStore | TransientStore
        if self.persistent:
            store = SowStore(self.path, clock=self.clock, sync=False, **kw)
        else:
            store = TransientStore(clock=self.clock, **kw)
        self.store = store
        return store

    def topic(self, name: str = "orders", **spec_kw) -> Topic:
        store = self.store if self.store is not None else self.open()
        spec_kw.setdefault("durability", self.kind)
        return store.open_topic(TopicSpec(name, **spec_kw))

    def reopen(self, **kw) -> SowStore | TransientStore:
        if self.store is None:
            raise RuntimeError("reopen() before open()")
        self.store.close()
        return self.open(**kw)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None


def js(doc) -> bytes:
    return msgspec.json.encode(doc)


def docs(result) -> list:
    return [msgspec.json.decode(r.data) for r in result.records]
