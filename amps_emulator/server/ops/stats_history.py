"""The history of the Admin statistics: what AMPS keeps in its statistics database, for the
time-range queries of the Monitoring Reference (``t0`` / ``t1``).

Every ``Admin/Interval`` the sampler (:class:`server.ops.stats.Sampler`) records the whole
``/amps`` tree here (:meth:`StatsHistory.record`). A leaf's history is kept as its changes
only: a value is stored when it differs from the one before, so a name that never changes
costs one entry whatever the number of samples, and an idle instance costs almost nothing.
The last :data:`KEEP` samples are kept (a day at the default 10 s interval); a resource that
disappeared (a client that left) goes once its last sample is older than that. With the
default ``Admin/FileName`` (``:memory:``) the history lives in memory only and a restart
starts it afresh; with a file (:mod:`server.ops.statsdb`) every sample is written to it too,
and at start-up its last samples are read back into the history.

Queries (:meth:`StatsHistory.select`), as the Monitoring Reference describes them:

* ``t0`` alone: the samples from ``t0`` to the last one; ``t1`` alone: from the first to
  ``t1``; both: from ``t0`` to ``t1``; both ends included. Times are UTC ISO-8601,
  ``YYYYMMDDThhmmss`` with the time part shortened at will (``20111130T0`` is midnight) and
  decimals allowed after the seconds.
* On a leaf: its value at each sample in the range (a sample where the resource did not
  exist has none), as ``TIMESTAMP,VALUE`` lines in CSV (or with no extension), or as
  ``{"timestamp", "value"}`` objects in JSON and XML.
* On any other node: ``t0`` and ``t1`` equal to the timestamp of a sample
  (``/amps/instance/timestamp`` lists them) give the node as it was at that sample; a range
  is refused (400), as is a time no sample has (404).
"""

from __future__ import annotations

import bisect
import calendar
import re
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from amps_emulator.server.ops.admin_http import HttpError

__all__ = ["KEEP", "Selection", "StatsHistory", "format_time", "parse_time"]

#: samples kept (a day at the default 10 s Interval)
KEEP = 8640

_TIME = re.compile(r"(\d{8})(?:T(\d{0,6})(?:\.(\d{1,6})\d*)?)?Z?")
_EMPTY_LIST: Any = object()  # a collection that had no entries at that sample
_EMPTY_DICT: Any = object()
_GONE: Any = object()  # the resource did not exist at that sample


def parse_time(text: str) -> int:
    """A ``t0``/``t1`` value (UTC ISO-8601, see the module docstring) as microseconds since
    the epoch; ``ValueError`` when it is not one."""
    m = _TIME.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not a time YYYYMMDDThhmmss")
    date, clock, frac = m.group(1), (m.group(2) or "").ljust(6, "0"), m.group(3) or ""
    st = time.strptime(date + clock, "%Y%m%d%H%M%S")
    return calendar.timegm(st) * 1_000_000 + int(frac.ljust(6, "0") or 0)


def format_time(us: int) -> str:
    """Microseconds since the epoch as AMPS writes a time (``20111130T000010.000000Z``)."""
    sec, frac = divmod(us, 1_000_000)
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(sec)) + f".{frac:06d}Z"


class _Series:
    """One leaf: the sample numbers where its value changed, and the values from there on."""

    __slots__ = ("at", "values", "seen")

    def __init__(self) -> None:
        self.at: list[int] = []
        self.values: list[Any] = []
        self.seen = -1  # the last sample it was present in

    def value(self, n: int) -> Any:
        i = bisect.bisect_right(self.at, n) - 1
        return _GONE if i < 0 else self.values[i]


@dataclass
class Selection:
    """What a time-range query selected: a leaf's ``(timestamp, value)`` pairs (``series``),
    or a node as it was at one sample; ``steps``: each segment of the path, and whether it
    named an entry of a collection (as the live tree's answers are wrapped)."""

    node: Any
    steps: list[tuple[str, bool]]
    series: bool

    def csv(self) -> bytes:
        return "".join(f"{t},{v}\n" for t, v in self.node).encode()


class StatsHistory:
    """The samples of the ``/amps`` tree (see the module docstring)."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self.times: deque[int] = deque()  # the samples' times, microseconds
        self._first = 0  # the number of times[0] (samples are numbered from 0)
        self._series: dict[tuple[str, ...], _Series] = {}
        self._lists: set[tuple[str, ...]] = set()  # the paths that are collections
        #: queries answered, for ``/amps/instance/statistics``
        self.queries = 0

    @property
    def samples(self) -> int:
        return self._first + len(self.times)

    # -- recording -------------------------------------------------------------------------
    def record(self, at_us: int, tree: dict[str, Any]) -> None:
        """Add the sample of ``tree`` (the ``/amps`` tree) taken at ``at_us``."""
        n = self.samples
        if self.times and at_us <= self.times[-1]:
            at_us = self.times[-1] + 1  # (a clock that stepped back: keep them ordered)
        self.times.append(at_us)
        for path, value in self._leaves(tree, ()):
            s = self._series.get(path)
            if s is None:
                s = self._series[path] = _Series()
            if s.seen != n - 1 or not s.values or s.values[-1] != value:
                s.at.append(n)
                s.values.append(value)
            s.seen = n
        for s in self._series.values():  # gone since the last sample
            if s.seen == n - 1:
                s.at.append(n)
                s.values.append(_GONE)
        if len(self.times) > self.keep:
            self.times.popleft()
            self._first += 1
            if self._first % max(1, self.keep // 8) == 0:
                self._prune()

    def forget_before(self, at_us: int) -> int:
        """Drop the samples taken before ``at_us`` (``amps-action-do-truncate-statistics``);
        how many."""
        n = 0
        while self.times and self.times[0] < at_us:
            self.times.popleft()
            self._first += 1
            n += 1
        if n:
            self._prune()
        return n

    def _leaves(self, node: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
        """Each leaf of ``node`` with its path; a collection's entries are named by their
        ``id`` (which is not a leaf of its own), an empty collection is a leaf of its own."""
        if isinstance(node, dict):
            if not node and path:
                yield path, _EMPTY_DICT
            for k, v in node.items():
                yield from self._leaves(v, (*path, k))
        elif isinstance(node, list):
            self._lists.add(path)
            if not node:
                yield path, _EMPTY_LIST
            for e in node:
                if isinstance(e, dict) and "id" in e:
                    yield from self._leaves({k: v for k, v in e.items() if k != "id"},
                                            (*path, str(e["id"])))
        else:
            yield path, node

    def _prune(self) -> None:
        """Forget what no kept sample needs: entries before the first kept sample (but the
        one in force at it) and resources gone before it."""
        first = self._first
        gone = [p for p, s in self._series.items() if s.seen < first]
        for path in gone:
            del self._series[path]
        if gone:  # and the collections only they were in (a passing client's own lists)
            kept = {path[:i] for path in self._series for i in range(len(path) + 1)}
            self._lists &= kept
        for s in self._series.values():
            i = bisect.bisect_right(s.at, first) - 1
            if i > 0:
                del s.at[:i], s.values[:i]

    # -- queries ---------------------------------------------------------------------------
    def _index(self, at_us: int) -> int | None:
        i = bisect.bisect_left(self.times, at_us)
        return self._first + i if i < len(self.times) and self.times[i] == at_us else None

    def _range(self, t0: int | None, t1: int | None) -> range:
        lo = 0 if t0 is None else bisect.bisect_left(self.times, t0)
        hi = len(self.times) if t1 is None else bisect.bisect_right(self.times, t1)
        return range(self._first + lo, self._first + max(lo, hi))

    def select(self, segs: list[str], query: dict[str, str]) -> Selection:
        """The answer to a time-range query on the path ``segs`` (``HttpError``: 400 for a
        bad time or a range on a node, 404 for a path or an instant no sample has)."""
        try:
            t0 = parse_time(query["t0"]) if query.get("t0") else None
            t1 = parse_time(query["t1"]) if query.get("t1") else None
        except ValueError as exc:
            raise HttpError(400, f"t0/t1: {exc}") from None
        self.queries += 1
        path = tuple(segs)
        steps = [(seg, path[:i] in self._lists) for i, seg in enumerate(path)]
        series = self._series.get(path)
        if series is not None and series.values[-1] not in (_EMPTY_LIST, _EMPTY_DICT):
            out = []
            for n in self._range(t0, t1):
                v = series.value(n)
                if v is not _GONE and v is not _EMPTY_LIST and v is not _EMPTY_DICT:
                    out.append((format_time(self.times[n - self._first]), v))
            if t0 is not None and t0 == t1 and not out:
                raise HttpError(404, f"no sample of /{'/'.join(segs)} at {query['t0']}")
            return Selection(out, steps, True)
        k = len(path)
        if not any(p[:k] == path for p in self._series):
            raise HttpError(404, f"no resource /{'/'.join(segs)} in the statistics' history")
        if t0 is None or t0 != t1:
            raise HttpError(400, "a time range is for leaf resources; a node takes t0 and t1 "
                                 "equal to the time of a sample (/amps/instance/timestamp)")
        at = self._index(t0)
        node = None if at is None else self._node_at(path, at)
        if node is None:
            raise HttpError(404, f"no sample of /{'/'.join(segs)} at {query['t0']}")
        return Selection(node, steps, False)

    def _node_at(self, prefix: tuple[str, ...], n: int) -> Any:
        """The subtree under ``prefix`` as it was at sample ``n`` (None: it did not exist)."""
        root: dict[str, Any] = {}
        found = False
        k = len(prefix)
        for path, s in self._series.items():
            if path[:k] != prefix:
                continue
            v = s.value(n)
            if v is _GONE:
                continue
            found = True
            rest = path[k:]
            if not rest:
                return [] if v is _EMPTY_LIST else {} if v is _EMPTY_DICT else v
            node = root
            for seg in rest[:-1]:
                node = node.setdefault(seg, {})
            node[rest[-1]] = [] if v is _EMPTY_LIST else {} if v is _EMPTY_DICT else v
        return self._as_lists(prefix, root) if found else None

    def _as_lists(self, path: tuple[str, ...], node: Any) -> Any:
        """Collections back to lists of entries with their ``id``, as the live tree has them."""
        if not isinstance(node, dict):
            return node
        if path in self._lists:
            return [{"id": k, **(v if isinstance(v, dict) else {})}
                    for k, v in ((k, self._as_lists((*path, k), v)) for k, v in node.items())]
        return {k: self._as_lists((*path, k), v) for k, v in node.items()}
