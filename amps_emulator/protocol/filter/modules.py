"""Functions that AMPS's auxiliary modules add to the filter language, and which are known.

AMPS ships two libraries of user-defined functions that a configuration may load in its
``Modules`` section (User Guide, "Auxiliary Modules"):

* ``libamps_udf_legacy_compatibility.so``: date and time functions (``TIMEZONEOFFSET``,
  ``YEAR``, ``MONTH``, ``DAY``, ``DATE_UTC``, ``DATE``, ``TODAY_UTC``, ``TODAY``);
* ``libamps_udf_experimental.so``: ``VALUE_LOOKUP(name, values...)``, a value read from
  another SOW topic, for a topic's ``Preprocessing`` and ``Enrichment``.

A function of a library that is not loaded is an unknown function, as in AMPS. Which
libraries are loaded is a property of one configuration, so it travels as a context
variable: :func:`function_modules` (a ``with`` block, for the config loader's checks) and
:func:`use_function_modules` (for a server's lifetime: the tasks and callbacks it creates
inherit the value) set it; the parser resolves a name with :func:`find_function`, and the
compile caches key on :func:`active_modules`. A compiled filter keeps the functions it was
compiled with (:func:`function` finds any module's function once a text has parsed).

``VALUE_LOOKUP`` reads the :class:`~protocol.filter.context.MessageContext`'s ``lookup``
(the server's lookups, ``lookup(name, values) -> str | None``) and gives NULL without one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Any

from .functions import FUNCTIONS, Function, _timestamp
from .values import to_str

__all__ = [
    "LEGACY_LIBRARY", "EXPERIMENTAL_LIBRARY", "FUNCTION_LIBRARIES", "MODULE_FUNCTIONS",
    "active_modules", "find_function", "function", "function_modules", "use_function_modules",
    "reset_function_modules",
]

LEGACY_LIBRARY = "libamps_udf_legacy_compatibility.so"
EXPERIMENTAL_LIBRARY = "libamps_udf_experimental.so"

_DAY = 86400


def _seconds(v) -> int | None:
    """Whole UNIX seconds of a timestamp argument (a number or an ISO-8601 basic text)."""
    t = _timestamp(v)
    if t is None or abs(t) > 1e14:  # (past what a calendar holds)
        return None
    return int(t // 1)


def _utc(v) -> time.struct_time | None:
    s = _seconds(v)
    return None if s is None else time.gmtime(s)


def _local_midnight(s: int) -> int:
    lt = time.localtime(s)
    return int(time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, 0, 0, 0, 0, 0, -1)))


def _timezoneoffset() -> int:
    return time.localtime().tm_gmtoff


def _year(ts) -> int | None:
    t = _utc(ts)
    return None if t is None else t.tm_year


def _month(ts) -> int | None:
    t = _utc(ts)
    return None if t is None else t.tm_mon


def _day(ts) -> int | None:
    t = _utc(ts)
    return None if t is None else t.tm_mday


def _date_utc(ts) -> int | None:
    s = _seconds(ts)
    return None if s is None else s - s % _DAY


def _date(ts) -> int | None:
    s = _seconds(ts)
    return None if s is None else _local_midnight(s)


def _today_utc() -> int:
    s = int(time.time())
    return s - s % _DAY


def _today() -> int:
    return _local_midnight(int(time.time()))


def _value_lookup(ctx, name, *values):
    lookup = None if ctx is None else ctx.lookup
    key = to_str(name)
    if lookup is None or key is None:
        return None
    return lookup(key, values)


def _table(*entries: tuple[str, Callable[..., Any], int, str, bool]) -> dict[str, Function]:
    return {name: Function(name, impl, n, None if kind == "context" else n, kind, det)
            for name, impl, n, kind, det in entries}


#: library -> the functions it adds. What reads the clock is kept out of constant folding
#: (AMPS calls these deterministic: the value is the same for every message of a moment).
MODULE_FUNCTIONS: dict[str, dict[str, Function]] = {
    LEGACY_LIBRARY: _table(
        ("TIMEZONEOFFSET", _timezoneoffset, 0, "value", False),
        ("YEAR", _year, 1, "value", True),
        ("MONTH", _month, 1, "value", True),
        ("DAY", _day, 1, "value", True),
        ("DATE_UTC", _date_utc, 1, "value", True),
        ("DATE", _date, 1, "value", True),
        ("TODAY_UTC", _today_utc, 0, "value", False),
        ("TODAY", _today, 0, "value", False),
    ),
    # (name, then one or more values: the lookup's own count is checked where it is declared)
    EXPERIMENTAL_LIBRARY: _table(("VALUE_LOOKUP", _value_lookup, 2, "context", False)),
}
FUNCTION_LIBRARIES = frozenset(MODULE_FUNCTIONS)

_ALL: dict[str, Function] = {n: f for table in MODULE_FUNCTIONS.values() for n, f in table.items()}
_ACTIVE: ContextVar[frozenset[str]] = ContextVar("amps_filter_function_modules",
                                                 default=frozenset())


def active_modules() -> frozenset[str]:
    """The function libraries loaded where the caller runs (empty: the built-ins alone)."""
    return _ACTIVE.get()


def find_function(name: str) -> Function | None:
    """The function an upper-case ``name`` calls here: a built-in, else one of a loaded
    library's; None: unknown."""
    fn = FUNCTIONS.get(name)
    if fn is not None:
        return fn
    fn = _ALL.get(name)
    if fn is None:
        return None
    for library in _ACTIVE.get():
        if name in MODULE_FUNCTIONS.get(library, ()):
            return fn
    return None


def function(name: str) -> Function:
    """The function of a parsed call (built in or of any library); KeyError if neither."""
    fn = FUNCTIONS.get(name)
    return fn if fn is not None else _ALL[name]


def _libraries(libraries: Iterable[str]) -> frozenset[str]:
    return frozenset(lib for lib in libraries if lib in MODULE_FUNCTIONS)


def use_function_modules(libraries: Iterable[str]) -> Token[frozenset[str]]:
    """Load ``libraries`` (the others are ignored) where the caller runs and in what it starts
    from now on; the token undoes it (:func:`reset_function_modules`)."""
    return _ACTIVE.set(_libraries(libraries))


def reset_function_modules(token: Token[frozenset[str]]) -> None:
    _ACTIVE.reset(token)


@contextmanager
def function_modules(libraries: Iterable[str]) -> Iterator[None]:
    """``with function_modules(libs):`` the filters parsed inside know those libraries."""
    token = use_function_modules(libraries)
    try:
        yield
    finally:
        _ACTIVE.reset(token)

