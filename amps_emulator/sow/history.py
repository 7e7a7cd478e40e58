"""SOW history: earlier versions of a topic's records, for historical (point-in-time) queries.

A topic configured with ``History`` (``Window``, ``Granularity``) keeps, next to its current
records, the versions that were current at the *granularity boundaries* within the window:

* Time is cut into intervals of ``Granularity`` seconds (boundaries at multiples of it, UTC
  epoch based).  When a record is replaced or removed, the version it had is saved if it was
  published in an earlier interval than the change (so it was the current version when at
  least one boundary passed).  A version replaced within its own interval never was, and is
  not kept.  ``Granularity`` 0 keeps every version.
* A removal (``sow_delete``, expiration) also saves a *tombstone* at the time of the removal,
  so a query after it does not return the record; the versions before it stay queryable.
* ``Window``: a saved version is dropped once the version after it is older than the window
  (no query inside the window can see it any more); a tombstone older than the window is
  dropped with everything before it.  The current record is always kept, however old.

The state *as of* an instant ``T`` is computed at the cut ``C``: the last boundary at or
before ``T`` (``Granularity`` 0: just after ``T``).  For each key, the newest version published
before ``C`` wins (the current record if it is old enough, else the newest saved one); a
tombstone, or a version whose expiration deadline had passed at ``C``, means no record.  A
cut before the window returns nothing.  The transaction log replays from the first message
at or after ``C``, so a historical ``sow_and_subscribe`` neither misses nor repeats a message
(SOW records carry their journal record's timestamp).

Storage: one ordered key/value table per topic (LMDB for persistent topics, memory for
transient ones), key ``SowKey + NUL + 8-byte big-endian microseconds``, value the encoded
record (:func:`sow.record.encode_record`) or empty for a tombstone.  It changes in the same
batch as the records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from amps_emulator.sow.record import Record, decode_record, encode_record

__all__ = ["HistorySpec", "History", "StateAsOf", "TABLE"]

TABLE = "hist"
_SEP = b"\x00"


@dataclass(frozen=True)
class HistorySpec:
    """``History``: ``window`` and ``granularity`` in seconds (``window`` ``None``: forever)."""

    window: float | None
    granularity: float

    def __post_init__(self) -> None:
        if self.window is not None and self.window <= 0:
            raise ValueError("a history window must be greater than zero")
        if self.granularity < 0:
            raise ValueError("a history granularity must not be negative")


def _us(seconds: float) -> int:
    return int(round(seconds * 1_000_000))


def _key(skey: str, ts_us: int) -> bytes:
    return skey.encode() + _SEP + ts_us.to_bytes(8, "big")


class History:
    """The saved versions of one topic (see the module docstring).  ``table``: an ordered
    key/value table (:class:`sow.storage.memory_tables.MemKVTable` or
    :class:`sow.storage.lmdb_tables.LmdbKVTable`)."""

    def __init__(self, spec: HistorySpec, table) -> None:
        self.spec = spec
        self.table = table
        self._g = _us(spec.granularity)

    # ---- writes --------------------------------------------------------------------------

    def _boundary_passed(self, ts_us: int, at_us: int) -> bool:
        g = self._g
        return at_us > ts_us if g == 0 else at_us // g > ts_us // g

    def replaced(self, old: Record, at: float) -> None:
        """``old`` stops being the current version at ``at`` (a new version replaced it)."""
        ts = _us(old.timestamp)
        if self._boundary_passed(ts, _us(at)):
            self.table.put(_key(old.sow_key, ts), encode_record(old))

    def removed(self, old: Record, at: float) -> None:
        """``old`` was removed from the topic at ``at`` (delete or expiration)."""
        at_us = max(_us(at), _us(old.timestamp))
        self.replaced(old, at_us / 1_000_000)
        self.table.put(_key(old.sow_key, at_us), b"")

    def prune_key(self, skey: str, now: float, current: Record | None) -> None:
        """Drop ``skey``'s saved versions no query inside the window can see."""
        if self.spec.window is None:
            return
        rows = self.table.prefix_items(skey.encode() + _SEP)
        self._prune_rows(rows, _us(now - self.spec.window), current)

    def _prune_rows(self, rows: list[tuple[bytes, bytes]], horizon: int,
                    current: Record | None) -> None:
        if not rows:
            return
        times = [int.from_bytes(k[-8:], "big") for k, _ in rows]
        if current is not None:
            times.append(_us(current.timestamp))
        # the newest version at or before the horizon is what a query at the horizon sees;
        # everything before it is invisible inside the window
        j = -1
        for i, t in enumerate(times):
            if t <= horizon:
                j = i
        if j < 0:
            return
        upto = j
        if j < len(rows) and rows[j][1] == b"":  # a tombstone: absence needs no row
            upto = j + 1
        for k, _ in rows[:min(upto, len(rows))]:
            self.table.delete(k)

    def prune(self, now: float, current_of: Callable[[str], Record | None],
              start: bytes | None = None, limit: int | None = None
              ) -> tuple[int, bytes | None]:
        """Window maintenance over the table from ``start`` (None: the beginning), about
        ``limit`` rows (None: all); ``current_of(SowKey)``: the topic's current record.
        Returns the rows dropped and where the next call starts (None: the end was
        reached)."""
        if self.spec.window is None:
            return 0, None
        horizon = _us(now - self.spec.window)
        rows = self.table.rows_from(start, None if limit is None else limit + 1)
        nxt = None
        if limit is not None and len(rows) > limit:
            # do not cut the last key's rows: it starts the next call (or, if it is the only
            # key here, is read whole now)
            last = rows[-1][0][:-8]
            cut = [r for r in rows if r[0][:-8] != last]
            if cut:
                rows, nxt = cut, last
            else:
                rows = self.table.prefix_items(last)
                nxt = last[:-1] + b"\x01"  # just past every row of that key
        before = len(self.table)
        group: list[tuple[bytes, bytes]] = []
        prefix = b""  # no key is empty: the first row starts a group
        for k, v in rows:
            p = k[:-8]
            if p != prefix and group:
                self._prune_rows(group, horizon, current_of(prefix[:-1].decode()))
                group = []
            prefix = p
            group.append((k, v))
        if group:
            self._prune_rows(group, horizon, current_of(prefix[:-1].decode()))
        return before - len(self.table), nxt

    def clear(self) -> None:
        self.table.clear()

    def __len__(self) -> int:
        return len(self.table)

    # ---- reads ---------------------------------------------------------------------------

    def cut(self, at: float) -> float:
        """The instant a query *as of* ``at`` reads: the last boundary at or before it
        (granularity 0: just after ``at``, so ``at`` itself is included)."""
        g = self._g
        a = _us(at)
        return (a + 1 if g == 0 else (a // g) * g) / 1_000_000

    def state(self, cut: float, now: float) -> StateAsOf | None:
        """An accumulator for the state just before ``cut``; ``None`` if the cut is before
        the window (the state is then empty, whatever was there)."""
        if self.spec.window is not None and cut < now - self.spec.window:
            return None
        return StateAsOf(_us(cut))


class StateAsOf:
    """The state just before a cut, from the saved rows (in key order) and the current
    records, fed in any number of parts (a query reads them in steps)."""

    def __init__(self, cut_us: int) -> None:
        self.cut = cut_us
        self._best: dict[str, bytes] = {}
        self._current: dict[str, Record] = {}

    def add_rows(self, rows: Iterable[tuple[bytes, bytes]]) -> None:
        c = self.cut
        best = self._best
        for k, v in rows:
            if int.from_bytes(k[-8:], "big") < c:
                best[k[:-9].decode()] = v  # ascending: the last one before the cut wins

    def add_current(self, records: Iterable[Record]) -> None:
        c = self.cut
        for rec in records:
            if _us(rec.timestamp) < c:  # the current version, old enough: it wins
                self._current[rec.sow_key] = rec

    def records(self) -> list[Record]:
        out = dict(self._current)
        for skey, v in self._best.items():
            if v and skey not in out:
                out[skey] = decode_record(skey, v)
        c = self.cut
        return [r for r in out.values() if r.expiration is None or _us(r.expiration) > c]
