"""Running state of one group of an aggregation, kept up to date record by record.

A view or an aggregated subscription changes one group per record change; recomputing the
group from all its records makes each change cost the group's size. :class:`Group` keeps,
for each aggregate of the projection, the state that answers it after a record's
contribution is added or taken away, so a change costs O(1) (O(log n) for MIN and MAX):

* COUNT: a count; COUNT_DISTINCT: a count per distinct value;
* SUM and AVG: the count, the integers' exact sum and the doubles' exact sum (each double
  times ``2**1074`` is an integer), the NaNs and infinities counted apart: the result is
  the exact sum rounded once, what :func:`sow.aggregate.exact_total` gives from scratch;
* STDDEV_POP and STDDEV_SAMP: the count and the exact sums of the values and their squares
  (:func:`sow.aggregate.stddev_of`);
* MIN and MAX: heaps with lazy deletion (an entry is dropped when it reaches the top and its
  record no longer holds it), ordered by value then by the record's place in the topic's
  order (the first of equal values wins, as from scratch). A group holding numbers and
  strings (or booleans) together is answered from its records' values, in topic order.

The group's other fields are read of its last record in the topic's order (the one with the
highest insert sequence), found with a heap too; its timestamp is its latest record's.
:class:`server.delivery.aggregated.GroupTracker` owns the groups.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from heapq import heapify, heappop, heappush
from typing import Any

from amps_emulator.protocol.filter.values import to_num
from amps_emulator.sow.aggregate import (
    AGGREGATE_FUNCTIONS,
    clamp_sum,
    distinct_key,
    scaled,
    stddev_of,
)

__all__ = ["Group", "Member", "new_states"]


class _Desc:
    """A string that sorts in reverse (MAX over strings, ties on SowKeys)."""

    __slots__ = ("s",)

    def __init__(self, s: str) -> None:
        self.s = s

    def __lt__(self, other: _Desc) -> bool:
        return self.s > other.s

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.s == other.s

    __hash__ = None  # type: ignore[assignment]


class Member:
    """One record's contribution: ``token`` (new at each change of the record), its place
    in the topic's order ``(seq, sow_key)``, its timestamp, its aggregates' argument values
    (scalars, None for NULL)."""

    __slots__ = ("token", "seq", "sow_key", "timestamp", "values")

    def __init__(self, token: int, seq: int, sow_key: str, timestamp: float,
                 values: tuple) -> None:
        self.token = token
        self.seq = seq
        self.sow_key = sow_key
        self.timestamp = timestamp
        self.values = values


class _Count:
    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def add(self, s: Any, m: Member) -> None:
        self.n += 1

    def remove(self, s: Any) -> None:
        self.n -= 1

    def value(self, group: Group, ai: int) -> Any:
        return self.n


class _Distinct:
    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen: dict[Any, int] = {}

    def add(self, s: Any, m: Member) -> None:
        k = distinct_key(s)
        self.seen[k] = self.seen.get(k, 0) + 1

    def remove(self, s: Any) -> None:
        k = distinct_key(s)
        n = self.seen[k] - 1
        if n:
            self.seen[k] = n
        else:
            del self.seen[k]

    def value(self, group: Group, ai: int) -> Any:
        return len(self.seen)


class _Sum:
    """SUM (``avg`` False) or AVG: see the module docstring."""

    __slots__ = ("avg", "n", "ints", "floats", "fsum", "nan", "pinf", "ninf")

    def __init__(self, avg: bool) -> None:
        self.avg = avg
        self.n = self.ints = self.floats = self.fsum = self.nan = self.pinf = self.ninf = 0

    def _apply(self, s: Any, d: int) -> None:
        x = s if type(s) is int or type(s) is float else to_num(s)
        self.n += d
        if type(x) is int:
            self.ints += d * x
            return
        self.floats += d
        if x != x:
            self.nan += d
        elif x == math.inf:
            self.pinf += d
        elif x == -math.inf:
            self.ninf += d
        else:
            self.fsum += d * scaled(x)

    def add(self, s: Any, m: Member) -> None:
        self._apply(s, 1)

    def remove(self, s: Any) -> None:
        self._apply(s, -1)

    def _total(self) -> Any:
        if self.nan or (self.pinf and self.ninf):
            return math.nan
        if self.pinf:
            return math.inf
        if self.ninf:
            return -math.inf
        if not self.floats:
            return self.ints
        num = (self.ints << _SCALE) + self.fsum
        try:
            return num / _ONE
        except OverflowError:
            return math.inf if num > 0 else -math.inf

    def value(self, group: Group, ai: int) -> Any:
        if not self.n:
            return None
        total = self._total()
        if not self.avg:
            return clamp_sum(total)
        try:
            return total / self.n
        except OverflowError:  # an integer sum beyond a double's range
            return math.nan


class _Stddev:
    __slots__ = ("sample", "n", "bad", "s1", "s2")

    def __init__(self, sample: bool) -> None:
        self.sample = sample
        self.n = self.bad = self.s1 = self.s2 = 0

    def _apply(self, s: Any, d: int) -> None:
        x = s if type(s) is int or type(s) is float else to_num(s)
        self.n += d
        try:
            x = float(x)
        except OverflowError:  # an integer beyond a double
            self.bad += d
            return
        if not math.isfinite(x):
            self.bad += d
            return
        sx = scaled(x)
        self.s1 += d * sx
        self.s2 += d * sx * sx

    def add(self, s: Any, m: Member) -> None:
        self._apply(s, 1)

    def remove(self, s: Any) -> None:
        self._apply(s, -1)

    def value(self, group: Group, ai: int) -> Any:
        n = self.n
        if n == 0 or (self.sample and n == 1):
            return None
        if self.bad:
            return math.nan
        return stddev_of(n, self.s1, self.s2, self.sample)


class _Extreme:
    """MIN (``sign`` -1) or MAX (1): numbers and strings each in a heap (see the module
    docstring); ``others`` counts the booleans."""

    __slots__ = ("sign", "name", "nums", "strs", "n_num", "n_str", "others")

    def __init__(self, sign: int) -> None:
        self.sign = sign
        self.name = "MIN" if sign < 0 else "MAX"
        self.nums: list[tuple] = []
        self.strs: list[tuple] = []
        self.n_num = self.n_str = self.others = 0

    def add(self, s: Any, m: Member) -> None:
        t = type(s)
        if t is int or t is float:
            if s == s:  # NaN is skipped
                self.n_num += 1
                heappush(self.nums, (-s if self.sign > 0 else s, m.seq, m.sow_key, m.token))
        elif t is str:
            self.n_str += 1
            heappush(self.strs, (_Desc(s) if self.sign > 0 else s, m.seq, m.sow_key, m.token))
        else:
            self.others += 1

    def remove(self, s: Any) -> None:
        t = type(s)
        if t is int or t is float:
            if s == s:
                self.n_num -= 1
        elif t is str:
            self.n_str -= 1
        else:
            self.others -= 1

    def value(self, group: Group, ai: int) -> Any:
        if self.others or (self.n_num and self.n_str):  # mixed: from the records' values
            vals = [m.values[ai] for m in sorted(group.members.values(),
                                                 key=lambda m: (m.seq, m.sow_key))]
            return AGGREGATE_FUNCTIONS[self.name](vals)
        if self.n_num:
            heap, live = self.nums, self.n_num
        elif self.n_str:
            heap, live = self.strs, self.n_str
        else:
            return None
        top = group.top(heap, live, lambda: self._rebuild(group, ai, heap is self.nums))
        v = top[0]
        if type(v) is _Desc:
            return v.s
        return -v if self.sign > 0 and heap is self.nums else v

    def _rebuild(self, group: Group, ai: int, nums: bool) -> list[tuple]:
        heap: list[tuple] = []
        want = (int, float) if nums else (str,)
        for m in group.members.values():
            s = m.values[ai]
            if type(s) in want and s == s:
                key = (_Desc(s) if not nums else -s) if self.sign > 0 else s
                heap.append((key, m.seq, m.sow_key, m.token))
        heapify(heap)
        if nums:
            self.nums = heap
        else:
            self.strs = heap
        return heap


_SCALE = 1074
_ONE = 1 << _SCALE

_STATES: dict[str, Callable[[], Any]] = {
    "AVG": lambda: _Sum(True),
    "COUNT": _Count,
    "COUNT_DISTINCT": _Distinct,
    "MAX": lambda: _Extreme(1),
    "MIN": lambda: _Extreme(-1),
    "STDDEV_POP": lambda: _Stddev(False),
    "STDDEV_SAMP": lambda: _Stddev(True),
    "SUM": lambda: _Sum(False),
}


def new_states(aggs: tuple[tuple[str, int], ...]) -> list[Any]:
    """Empty states for the aggregates ``aggs`` (``(name, argument index)``)."""
    return [_STATES[name]() for name, _ in aggs]


class Group:
    """One group: its members (SowKey -> :class:`Member`), the aggregates' states, and the
    heaps that find its last record and its latest timestamp."""

    __slots__ = ("members", "ghosts", "states", "arg_of", "sow_key", "_last", "_latest")

    def __init__(self, aggs: tuple[tuple[str, int], ...]) -> None:
        self.members: dict[str, Member] = {}
        #: members whose record was gone when they joined: they count for nothing
        self.ghosts: set[str] = set()
        self.states = new_states(aggs)
        self.arg_of = [ai for _, ai in aggs]
        self.sow_key: str | None = None  # (the group's, once computed)
        self._last: list[tuple] = []  # (-seq, reversed SowKey, SowKey, token)
        self._latest: list[tuple] = []  # (-timestamp, SowKey, token)

    def add(self, m: Member) -> None:
        self.members[m.sow_key] = m
        values = m.values
        for st, ai in zip(self.states, self.arg_of, strict=True):
            s = values[ai]
            if s is not None:
                st.add(s, m)
        heappush(self._last, (-m.seq, _Desc(m.sow_key), m.sow_key, m.token))
        heappush(self._latest, (-m.timestamp, m.sow_key, m.token))

    def discard(self, skey: str) -> None:
        self.ghosts.discard(skey)
        m = self.members.pop(skey, None)
        if m is None:
            return
        values = m.values
        for st, ai in zip(self.states, self.arg_of, strict=True):
            s = values[ai]
            if s is not None:
                st.remove(s)

    def top(self, heap: list[tuple], live: int, rebuild: Callable[[], list[tuple]]) -> tuple:
        """The first entry of ``heap`` whose member still holds it (entries end with
        ``SowKey, token``); ``rebuild()`` makes it again from the members when stale
        entries outnumber the ``live`` ones."""
        if len(heap) > 2 * live + 32:
            heap = rebuild()
        members = self.members
        while True:
            top = heap[0]
            m = members.get(top[-2])
            if m is not None and m.token == top[-1]:
                return top
            heappop(heap)

    def last(self) -> str:
        """The SowKey of the group's last record in the topic's order."""
        return self.top(self._last, len(self.members), self._rebuild_last)[-2]

    def latest(self) -> float:
        return -self.top(self._latest, len(self.members), self._rebuild_latest)[0]

    def _rebuild_last(self) -> list[tuple]:
        self._last = [(-m.seq, _Desc(m.sow_key), m.sow_key, m.token)
                      for m in self.members.values()]
        heapify(self._last)
        return self._last

    def _rebuild_latest(self) -> list[tuple]:
        self._latest = [(-m.timestamp, m.sow_key, m.token) for m in self.members.values()]
        heapify(self._latest)
        return self._latest

    def values(self) -> list:
        """The aggregates' values now (:attr:`Aggregation.aggs` order)."""
        return [st.value(self, ai) for st, ai in zip(self.states, self.arg_of, strict=True)]
