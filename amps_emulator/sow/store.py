"""SOW stores: :class:`SowStore` (persistent topics, one LMDB environment), :class:`TransientStore`
(in-memory topics), and :class:`Sow`, the facade the server wires in.

Both stores hand out :class:`sow.topic.Topic` objects, which implement :class:`TopicStore`.

Batching and durability
-----------------------
Mutations of persistent topics go into one LMDB write transaction per store, opened by the
first mutation and committed by :meth:`SowStore.commit` -- the server calls ``Sow.commit()``
once per event-loop turn, after the journal write and before releasing acks.  Queries in the
same turn see the uncommitted writes.  ``sync=True`` (default): LMDB fsyncs at each commit, a
committed turn survives a machine crash.  ``sync=False``: no fsync (the OS writes the pages
back later); a process crash loses nothing committed, a machine crash may lose the last turns,
which recovery re-applies from the transaction log (``Topic.applied_position`` is committed
with the records it covers).  If a commit fails the batch is discarded (``abort``).

Transient topics apply every mutation at once in memory; ``commit`` has nothing to do.

Where the files go
------------------
Persistent topics whose ``FileName`` resolves to the same directory share one environment
``<dir>/amps-sow.lmdb`` (:func:`env_directory`); each topic has its own named databases
(records, expiry, meta, one per index).  Startup only opens the environment and reads each
topic's metadata: no scan unless the index configuration changed.

No module-level mutable state: two servers in one process each build their own stores.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

import lmdb

from amps_emulator.journal.atomic import replace_file
from amps_emulator.protocol.msgtypes import MessageCodec, MessageTypeRegistry, build_registry
from amps_emulator.sow.query import DeleteResult, PublishResult, QueryResult
from amps_emulator.sow.record import Record
from amps_emulator.sow.spec import TopicSpec
from amps_emulator.sow.storage.lmdb_backend import LmdbBackend
from amps_emulator.sow.storage.lmdb_swap import recover as recover_compaction
from amps_emulator.sow.storage.lmdbenv import LmdbEnv, SowDamagedError, move_aside
from amps_emulator.sow.storage.memory_backend import MemoryBackend
from amps_emulator.sow.topic import Topic

__all__ = ["TopicStore", "SowStore", "TransientStore", "Sow", "env_directory", "ENV_DIR_NAME",
           "SowDamagedError"]

ENV_DIR_NAME = "amps-sow.lmdb"


@runtime_checkable
class TopicStore(Protocol):
    """What the server uses of one SOW topic (implemented by :class:`sow.topic.Topic`)."""

    spec: TopicSpec
    name: str

    def publish(self, data: bytes, *, sow_key: str | None = None, expiration=None,
                bookmark: str = "", position: int = 0, timestamp: float | None = None,
                headers: dict | None = None, doc: Any = ..., now: float | None = None
                ) -> PublishResult: ...

    def upsert(self, key: str, data: bytes, doc: Any, expiration=None, bookmark: str = "",
               position: int = 0, now: float | None = None, timestamp: float | None = None,
               headers: dict | None = None) -> PublishResult: ...

    def delta_publish(self, data: bytes, *, sow_key: str | None = None, expiration=None,
                      bookmark: str = "", position: int = 0, timestamp: float | None = None,
                      headers: dict | None = None, doc: Any = ..., now: float | None = None
                      ) -> PublishResult: ...

    def query(self, filter: Any = None, *, sow_keys=None, order_by=None, top_n=None,
              skip_n=None, select=None, now=None, plan: str = "auto") -> QueryResult: ...

    def delete_by_filter(self, filter: Any, *, now=None, position: int = 0,
                         plan: str = "auto") -> DeleteResult: ...

    def delete_by_keys(self, sow_keys, *, now=None, position: int = 0) -> DeleteResult: ...

    def delete_by_data(self, data: bytes, *, sow_key=None, now=None,
                       position: int = 0) -> DeleteResult: ...

    def sweep_expired(self, now: float | None = None, limit: int | None = None
                      ) -> list[Record]: ...

    def next_expiration(self) -> float | None: ...

    def get(self, sow_key: str, now: float | None = None) -> Record | None: ...

    def count(self, now: float | None = None) -> int: ...

    def key_for(self, doc: Any, sow_key: str | None = None) -> str: ...

    @property
    def applied_position(self) -> int: ...

    def set_applied_position(self, position: int) -> None: ...


def env_directory(spec: TopicSpec, default_dir: str = "./sow") -> str:
    """The LMDB environment directory for a persistent topic: ``<dir of FileName>/amps-sow.lmdb``.

    The directory is taken from the ``FileName`` template; ``%n`` in the *directory* part is
    expanded (with ``/`` in topic names replaced by ``_``), in the file part it is ignored, so
    ``./sow/%n.sow`` puts every topic in ``./sow/amps-sow.lmdb``.
    """
    template = spec.file_name or os.path.join(default_dir, "%n.sow")
    d = os.path.dirname(template)
    if "%n" in d:
        d = d.replace("%n", spec.name.replace("/", "_").replace(os.sep, "_"))
    return os.path.join(d or ".", ENV_DIR_NAME)


class _Topics:
    """Lookup of open topics by name (``self._topics``), shared by the stores and ``Sow``."""

    _topics: dict[str, Topic]

    def topic(self, name: str) -> Topic:
        return self._topics[name]

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._topics

    @property
    def topics(self) -> dict[str, Topic]:
        return dict(self._topics)


class _StoreBase(_Topics):
    def __init__(self, clock: Callable[[], float], auto_memo: bool,
                 message_types: MessageTypeRegistry | None) -> None:
        self.clock = clock
        self.auto_memo = auto_memo
        self._topics: dict[str, Topic] = {}
        #: the codecs topics of other types than json read their bodies with (the server's;
        #: the predeclared types with their default settings when none is given)
        self.message_types = message_types if message_types is not None else build_registry()

    def _codec(self, spec: TopicSpec) -> MessageCodec | None:
        return None if spec.message_type == "json" else self.message_types.codec(spec.message_type)


class SowStore(_StoreBase):
    """Persistent topics in one LMDB environment at ``path``."""

    persistent = True

    def __init__(self, path: str, *, sync: bool = True, map_size: int = 4 << 20,
                 max_map_size: int | None = None, clock: Callable[[], float] = time.time,
                 auto_memo: bool = True, max_dbs: int = 65536, on_damage=None,
                 message_types: MessageTypeRegistry | None = None) -> None:
        super().__init__(clock, auto_memo, message_types)
        self.path = path
        self.env = LmdbEnv(path, map_size=map_size, sync=sync, max_dbs=max_dbs,
                           max_map_size=max_map_size, on_damage=on_damage)
        self._meta_dirty: set[Topic] = set()  # topics whose metadata awaits the next commit
        self.env.before_commit.append(self._flush_meta)

    def open_topic(self, spec: TopicSpec) -> Topic:
        """Open (creating) a persistent topic.  Commits any pending batch."""
        if spec.name in self._topics:
            raise ValueError(f"SOW topic {spec.name!r} is already open")
        t = Topic(spec, LmdbBackend(self.env, spec.name), clock=self.clock,
                  auto_memo=self.auto_memo, codec=self._codec(spec))
        t.on_meta_dirty = self._meta_dirty.add
        self._topics[spec.name] = t
        self.env.commit()
        return t

    def _flush_meta(self) -> None:
        if self._meta_dirty:  # cleared in place: the topics hold its bound add()
            dirty = list(self._meta_dirty)
            self._meta_dirty.clear()
            for t in dirty:
                t.flush_meta()

    @property
    def in_batch(self) -> bool:
        return self.env.in_write

    def commit(self) -> bool:
        """Commit the current batch (records, indexes, positions); ``False`` if none."""
        try:
            return self.env.commit()
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Discard the current batch."""
        self.env.abort()
        self._meta_dirty.clear()
        for t in self._topics.values():
            t.discard_pending()

    def sync(self) -> None:
        self.env.sync()

    def close(self) -> None:
        self.commit()
        self.env.close()
        self._topics.clear()


class TransientStore(_StoreBase):
    """Transient (``Durability transient``) topics, in memory."""

    persistent = False

    def __init__(self, *, clock: Callable[[], float] = time.time, auto_memo: bool = True,
                 message_types: MessageTypeRegistry | None = None) -> None:
        super().__init__(clock, auto_memo, message_types)
        self._meta_dirty: set[Topic] = set()

    def open_topic(self, spec: TopicSpec) -> Topic:
        if spec.name in self._topics:
            raise ValueError(f"SOW topic {spec.name!r} is already open")
        t = Topic(spec, MemoryBackend(), clock=self.clock, auto_memo=self.auto_memo,
                  codec=self._codec(spec))
        t.on_meta_dirty = self._meta_dirty.add
        self._topics[spec.name] = t
        return t

    @property
    def in_batch(self) -> bool:
        return False

    def commit(self) -> bool:
        if self._meta_dirty:  # cleared in place: the topics hold its bound add()
            dirty = list(self._meta_dirty)
            self._meta_dirty.clear()
            for t in dirty:
                t.flush_meta()
        return False

    def close(self) -> None:
        self._topics.clear()


def _write_manifest(path: str, names: list[str]) -> None:
    """Record which topics the environment next to ``path`` holds (see :class:`Sow`)."""
    text = "\n".join(sorted(names))
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    except OSError:
        pass
    replace_file(path, text.encode(), fsync=False)


class Sow(_Topics):
    """Every SOW topic of a server: persistent ones grouped by environment directory, transient
    ones in memory.

    ``Sow(specs, default_dir="./sow", sync=True, clock=time.time)``; then ``sow.topic(name)``,
    ``sow.commit()`` once per loop turn, ``sow.sweep_expired()`` when ``sow.next_expiration()``
    is due, ``sow.close()`` at shutdown.

    Damage: an environment that LMDB cannot open, or whose topics' databases cannot be opened
    (garbled pages, a truncated ``data.mdb``), is damaged. ``on_damage(path, topic_names,
    why)`` decides: it raises (e.g. :class:`SowDamagedError` naming the file and what to do)
    to refuse, or returns, and the environment is moved aside and its topics start empty (the
    server then rebuilds them from the transaction log). Without ``on_damage`` it is replaced.

    Missing: next to each environment a small file ``<env>.topics`` lists the topics it
    held. When that file is there but the environment is not (deleted, lost), the topics it
    names that are configured are passed to ``on_missing(path, topic_names)`` before they
    start empty; it may raise to refuse. (Removing the whole SOW directory is a reset and says
    nothing.)
    """

    def __init__(self, specs: Iterable[TopicSpec] = (), *, default_dir: str = "./sow",
                 sync: bool = True, clock: Callable[[], float] = time.time,
                 map_size: int = 4 << 20, auto_memo: bool = True, on_damage=None,
                 on_missing=None, message_types: MessageTypeRegistry | None = None) -> None:
        """``message_types``: the server's codecs (default: the predeclared types)."""
        self.default_dir = default_dir
        self.message_types = message_types if message_types is not None else build_registry()
        self.on_missing = on_missing
        self.sync = sync
        self.clock = clock
        self.map_size = map_size
        self.auto_memo = auto_memo
        self.on_damage = on_damage
        self.stores: dict[str, SowStore] = {}
        self.transient = TransientStore(clock=clock, auto_memo=auto_memo,
                                        message_types=self.message_types)
        self._topics: dict[str, Topic] = {}
        #: the topics with expiration enabled (the only ones with deadlines to sweep)
        self._expiring: dict[str, Topic] = {}
        specs = list(specs)
        by_dir: dict[str, list[TopicSpec]] = {}
        seen: set[str] = set()
        for s in specs:
            if s.name in seen:
                raise ValueError(f"SOW topic {s.name!r} configured twice")
            seen.add(s.name)
            if s.persistent:
                by_dir.setdefault(env_directory(s, default_dir), []).append(s)
        for d, group in by_dir.items():
            self._open_store(d, group)
        for s in specs:
            if not s.persistent:
                self.add_topic(s)
        self._topics = {s.name: self._topics[s.name] for s in specs}  # configuration order
        self._expiring = {n: t for n, t in self._topics.items() if n in self._expiring}

    def _open_store(self, d: str, specs: list[TopicSpec]) -> None:
        """Open the environment ``d`` with its topics ``specs``; damage: see the class doc."""
        names = [s.name for s in specs]
        recover_compaction(d)  # before looking for data.mdb: a compaction cut short
        manifest = d.rstrip(os.sep) + ".topics"
        if not os.path.exists(os.path.join(d, "data.mdb")) and os.path.exists(manifest):
            try:
                with open(manifest, encoding="utf-8") as f:
                    had = set(f.read().split("\n"))
            except OSError:
                had = set()
            gone = [n for n in names if n in had]
            if gone and self.on_missing is not None:
                self.on_missing(d, gone)
        handler = None
        if self.on_damage is not None:
            handler = lambda path, why: self.on_damage(path, names, why)  # noqa: E731
        st = SowStore(d, sync=self.sync, clock=self.clock, map_size=self.map_size,
                      auto_memo=self.auto_memo, on_damage=handler,
                      message_types=self.message_types)
        try:
            opened = [st.open_topic(s) for s in specs]
        except lmdb.Error as exc:  # the header was fine, the pages are not
            st.env.close()
            why = f"{type(exc).__name__}: {exc}"
            if handler is not None:
                handler(d, why)
            move_aside(d, why)
            st = SowStore(d, sync=self.sync, clock=self.clock, map_size=self.map_size,
                          auto_memo=self.auto_memo, on_damage=handler,
                          message_types=self.message_types)
            opened = [st.open_topic(s) for s in specs]
        self.stores[d] = st
        for s, t in zip(specs, opened, strict=False):
            self._topics[s.name] = t
            if s.expiration is not None:
                self._expiring[s.name] = t
        _write_manifest(manifest, names)

    def _store(self, spec: TopicSpec) -> SowStore:
        d = env_directory(spec, self.default_dir)
        st = self.stores.get(d)
        if st is None:
            st = self.stores[d] = SowStore(d, sync=self.sync, clock=self.clock,
                                          map_size=self.map_size, auto_memo=self.auto_memo,
                                          message_types=self.message_types)
        return st

    def stored_topic_names(self, spec: TopicSpec) -> list[str]:
        """Names of the topics stored where the persistent ``spec`` is stored (to reopen the
        logical topics of a ``Pattern`` container). Names too long to be kept in the database
        name are not listed."""
        prefix = "sow:"  # records are <prefix><name>:s (:r in the earlier layout)
        return sorted({n[len(prefix):-2] for n in self._store(spec).env.db_names()
                       if n.startswith(prefix) and n[-2:] in (":s", ":r")
                       and not n.startswith("sow:#")})

    def add_topic(self, spec: TopicSpec) -> Topic:
        if spec.name in self._topics:
            raise ValueError(f"SOW topic {spec.name!r} configured twice")
        if spec.persistent:
            d = env_directory(spec, self.default_dir)
            st = self.stores.get(d)
            if st is None:
                self._open_store(d, [spec])
                return self._topics[spec.name]
            t = st.open_topic(spec)
        else:
            t = self.transient.open_topic(spec)
        self._topics[spec.name] = t
        if spec.expiration is not None:
            self._expiring[spec.name] = t
        return t

    def commit(self) -> None:
        for st in self.stores.values():
            st.commit()
        self.transient.commit()

    def full_stores(self) -> dict[str, OSError]:
        """The environments whose file system refused space (``LmdbEnv.full``): path ->
        error. Their topics must take no writes until :meth:`retry_full` clears them."""
        return {d: st.env.full for d, st in self.stores.items() if st.env.full is not None}

    def retry_full(self, path: str) -> bool:
        """Try to allocate the room the environment at ``path`` lacks; True once it has it."""
        return self.stores[path].env.ensure_room()

    def stores_of(self, names: Iterable[str] | None = None) -> dict[str, SowStore]:
        """The environments (path -> store) that hold the persistent topics ``names`` (None:
        every environment). The unit of compaction: one holds every topic stored there."""
        if names is None:
            return dict(self.stores)
        wanted = set(names)
        return {d: st for d, st in self.stores.items() if any(n in st for n in wanted)}

    def store_path(self, name: str) -> str | None:
        """The environment directory of the persistent topic ``name`` (None: transient)."""
        for d, st in self.stores.items():
            if name in st:
                return d
        return None

    def sweep_expired(self, now: float | None = None, limit: int | None = None
                      ) -> list[tuple[Topic, list[Record]]]:
        out = []
        for t in self._expiring.values():
            recs = t.sweep_expired(now, limit)
            if recs:
                out.append((t, recs))
        return out

    def next_expiration(self) -> float | None:
        best = None
        for t in self._expiring.values():
            n = t.next_expiration()
            if n is not None and (best is None or n < best):
                best = n
        return best

    def close(self) -> None:
        for st in self.stores.values():
            st.close()
        self.transient.close()
        self._topics.clear()
        self._expiring.clear()
