"""In-memory tables: an ordered set of byte keys, a hash table of key sets, and an ordered
key/value table (SOW history).

They mirror the LMDB tables in :mod:`sow.storage.lmdb_tables` method for method, so the index code
(:mod:`sow.index`) and expiry code work unchanged on transient topics.

``SortedKeys`` is a bucketed sorted list (the layout of ``sortedcontainers.SortedList``: a list
of sorted sublists of at most ``2 * LOAD`` items plus the list of their maxima), giving
O(log n + LOAD) inserts and deletes and ordered range iteration without any dependency.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from itertools import islice

__all__ = ["SortedKeys", "MemOrderedSet", "MemHashTable", "MemKVTable"]


class SortedKeys:
    LOAD = 512

    __slots__ = ("_lists", "_maxes", "_len")

    def __init__(self) -> None:
        self._lists: list[list[bytes]] = []
        self._maxes: list[bytes] = []
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def add(self, k: bytes) -> bool:
        maxes = self._maxes
        if not maxes:
            self._lists.append([k])
            maxes.append(k)
            self._len = 1
            return True
        i = bisect_left(maxes, k)
        if i == len(maxes):
            i -= 1
            lst = self._lists[i]
            lst.append(k)
            maxes[i] = k
        else:
            lst = self._lists[i]
            j = bisect_left(lst, k)
            if lst[j] == k:  # j < len(lst) because k <= maxes[i] == lst[-1]
                return False
            lst.insert(j, k)
        self._len += 1
        if len(lst) > 2 * self.LOAD:
            half = self.LOAD
            self._lists[i:i + 1] = [lst[:half], lst[half:]]
            maxes[i:i + 1] = [lst[half - 1], lst[-1]]
        return True

    def discard(self, k: bytes) -> bool:
        maxes = self._maxes
        i = bisect_left(maxes, k)
        if i == len(maxes):
            return False
        lst = self._lists[i]
        j = bisect_left(lst, k)
        if j == len(lst) or lst[j] != k:
            return False
        del lst[j]
        self._len -= 1
        if not lst:
            del self._lists[i]
            del maxes[i]
        elif j == len(lst):
            maxes[i] = lst[-1]
        return True

    def __contains__(self, k: bytes) -> bool:
        i = bisect_left(self._maxes, k)
        if i == len(self._maxes):
            return False
        lst = self._lists[i]
        j = bisect_left(lst, k)
        return lst[j] == k

    def irange(self, lo: bytes | None = None, hi: bytes | None = None) -> Iterator[bytes]:
        """Keys ``k`` with ``lo <= k < hi`` (``None``: unbounded), ascending."""
        lists = self._lists
        if lo is None:
            i = 0
            j = 0
        else:
            i = bisect_left(self._maxes, lo)
            if i == len(lists):
                return
            j = bisect_left(lists[i], lo)
        for bi in range(i, len(lists)):
            lst = lists[bi]
            it = islice(lst, j, None) if (bi == i and j) else lst
            if hi is None:
                yield from it
            else:
                for k in it:
                    if k >= hi:
                        return
                    yield k

    def first(self) -> bytes | None:
        return self._lists[0][0] if self._lists else None

    def clear(self) -> None:
        self._lists = []
        self._maxes = []
        self._len = 0


class MemOrderedSet:
    """Ordered set of byte keys (memo and expiry indexes of transient topics)."""

    __slots__ = ("_keys",)

    def __init__(self) -> None:
        self._keys = SortedKeys()

    def add(self, k: bytes) -> None:
        self._keys.add(k)

    def discard(self, k: bytes) -> None:
        self._keys.discard(k)

    def range(self, lo: bytes | None, hi: bytes | None, limit: int | None = None) -> list[bytes] | None:
        """Keys in ``[lo, hi)``; ``None`` if there are more than ``limit``."""
        it = self._keys.irange(lo, hi)
        if limit is None:
            return list(it)
        out = list(islice(it, limit + 1))
        return None if len(out) > limit else out

    def first(self) -> bytes | None:
        return self._keys.first()

    def __len__(self) -> int:
        return len(self._keys)

    def clear(self) -> None:
        self._keys.clear()


class MemHashTable:
    """token (bytes) -> set of SowKeys (hash indexes of transient topics)."""

    __slots__ = ("_d", "_n")

    def __init__(self) -> None:
        self._d: dict[bytes, dict[str, None]] = {}
        self._n = 0

    def add(self, token: bytes, skey: str) -> None:
        s = self._d.get(token)
        if s is None:
            self._d[token] = {skey: None}
            self._n += 1
        elif skey not in s:
            s[skey] = None
            self._n += 1

    def add_rows(self, rows: list[tuple[bytes, str]]) -> None:
        """:meth:`add` of each (token, SowKey)."""
        for token, skey in rows:
            self.add(token, skey)

    def discard(self, token: bytes, skey: str) -> None:
        s = self._d.get(token)
        if s is not None and skey in s:
            del s[skey]
            self._n -= 1
            if not s:
                del self._d[token]

    def get(self, token: bytes) -> list[str]:
        s = self._d.get(token)
        return list(s) if s else []

    def __len__(self) -> int:
        return self._n

    def clear(self) -> None:
        self._d.clear()
        self._n = 0


class MemKVTable:
    """Ordered ``bytes -> bytes`` table (the history of transient topics)."""

    __slots__ = ("_keys", "_values")

    def __init__(self) -> None:
        self._keys = SortedKeys()
        self._values: dict[bytes, bytes] = {}

    def put(self, k: bytes, v: bytes) -> None:
        if k not in self._values:
            self._keys.add(k)
        self._values[k] = v

    def delete(self, k: bytes) -> None:
        if self._values.pop(k, None) is not None:
            self._keys.discard(k)

    def prefix_items(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """The rows whose key starts with ``prefix``, ascending."""
        hi = prefix + b"\xff"
        return [(k, self._values[k]) for k in self._keys.irange(prefix, hi)
                if k.startswith(prefix)]

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every row, ascending (a copy: the caller may write while iterating)."""
        return iter([(k, self._values[k]) for k in self._keys.irange()])

    def rows_from(self, start: bytes | None, limit: int | None) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` rows from the key ``start`` on (None: the first), ascending."""
        it = self._keys.irange(start)
        keys = list(it) if limit is None else list(islice(it, limit))
        return [(k, self._values[k]) for k in keys]

    def snapshot_rows(self, snap: object) -> Iterator[tuple[bytes, bytes]]:
        """Every row as of now, ascending, to read over several steps (``snap``: the
        backend's snapshot; the rows are copied now)."""
        return self.items()

    def __len__(self) -> int:
        return len(self._values)

    def clear(self) -> None:
        self._keys.clear()
        self._values.clear()
