"""A sorted multiset-free list of ints in chunks: O(log n) search, O(chunk) insert/remove.

Used for the delivery order of a ``Priority`` queue, where keys are unique ints (priority
rank in the high bits, enqueue index in the low bits) and messages arrive at any point of the
order. Same idea as ``sortedcontainers.SortedList`` (a list of sorted sub-lists plus an index
of their first elements), reduced to what the engine needs; kept here so the runtime needs no
extra dependency.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Iterator

__all__ = ["SortedKeys"]

_LOAD = 512  # target chunk length; a chunk splits at 2 * _LOAD


class SortedKeys:
    __slots__ = ("_chunks", "_firsts", "_len")

    def __init__(self, keys: Iterable[int] = ()) -> None:
        data = sorted(keys)
        self._chunks: list[list[int]] = [data[i : i + _LOAD] for i in range(0, len(data), _LOAD)]
        self._firsts: list[int] = [c[0] for c in self._chunks]
        self._len = len(data)

    def __len__(self) -> int:
        return self._len

    def _chunk_for(self, key: int) -> int:
        i = bisect_right(self._firsts, key) - 1
        return 0 if i < 0 else i

    def add(self, key: int) -> None:
        chunks = self._chunks
        if not chunks:
            chunks.append([key])
            self._firsts.append(key)
            self._len = 1
            return
        i = self._chunk_for(key)
        c = chunks[i]
        insort(c, key)
        self._firsts[i] = c[0]
        self._len += 1
        if len(c) > 2 * _LOAD:
            half = len(c) >> 1
            chunks.insert(i + 1, c[half:])
            del c[half:]
            self._firsts.insert(i + 1, chunks[i + 1][0])

    def discard(self, key: int) -> bool:
        chunks = self._chunks
        if not chunks:
            return False
        i = self._chunk_for(key)
        c = chunks[i]
        j = bisect_left(c, key)
        if j == len(c) or c[j] != key:
            return False
        del c[j]
        self._len -= 1
        if c:
            self._firsts[i] = c[0]
        else:
            del chunks[i]
            del self._firsts[i]
        return True

    def __contains__(self, key: int) -> bool:
        if not self._chunks:
            return False
        c = self._chunks[self._chunk_for(key)]
        j = bisect_left(c, key)
        return j < len(c) and c[j] == key

    def iter_from(self, key: int) -> Iterator[int]:
        """Keys >= ``key`` in ascending order. Do not mutate while iterating."""
        chunks = self._chunks
        if not chunks:
            return
        i = self._chunk_for(key)
        c = chunks[i]
        j = bisect_left(c, key)
        while True:
            n = len(c)
            while j < n:
                yield c[j]
                j += 1
            i += 1
            if i >= len(chunks):
                return
            c = chunks[i]
            j = 0

    def __iter__(self) -> Iterator[int]:
        for c in self._chunks:
            yield from c
