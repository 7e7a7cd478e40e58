"""The functions of AMPS's function modules (``libamps_udf_legacy_compatibility.so``,
``libamps_udf_experimental.so``): unknown unless the library is loaded where the text is
compiled, and what each returns."""

from __future__ import annotations

import calendar
import os
import threading
import time

import pytest

from amps_emulator.protocol.filter import FilterError, MessageContext, compile_expression, compile_filter
from amps_emulator.protocol.filter.modules import (
    EXPERIMENTAL_LIBRARY,
    LEGACY_LIBRARY,
    active_modules,
    function_modules,
)

#: January 25, 2010 at 10:04:05 UTC (the User Guide's example day)
TS = calendar.timegm((2010, 1, 25, 10, 4, 5))


@pytest.mark.parametrize("text", ["YEAR(/t) = 2010", "TODAY() > 0", "TIMEZONEOFFSET() = 0",
                                  "VALUE_LOOKUP('x', /id) = 'y'"])
def test_a_module_function_is_unknown_unless_its_library_is_loaded(text):
    with pytest.raises(FilterError, match="unknown function"):
        compile_filter(text)
    other = EXPERIMENTAL_LIBRARY if "VALUE_LOOKUP" not in text else LEGACY_LIBRARY
    with function_modules([other]), pytest.raises(FilterError, match="unknown function"):
        compile_filter(text)
    with function_modules([LEGACY_LIBRARY, EXPERIMENTAL_LIBRARY]):
        compile_filter(text)
    with pytest.raises(FilterError, match="unknown function"):  # (the cache keeps them apart)
        compile_filter(text)


@pytest.mark.parametrize(("expr", "value"), [
    ("YEAR(/t)", 2010), ("MONTH(/t)", 1), ("DAY(/t)", 25),
    ("DATE_UTC(/t)", calendar.timegm((2010, 1, 25, 0, 0, 0))),
    ("YEAR('20100125T100405Z')", 2010), ("DAY(/t + 14 * 3600)", 26),
    ("YEAR(/missing)", None), ("MONTH('not a time')", None),
])
def test_the_legacy_date_functions_read_the_day_in_utc(expr, value):
    with function_modules([LEGACY_LIBRARY]):
        assert compile_expression(expr)({"t": TS}) == value


def test_the_local_day_functions_follow_the_process_time_zone():
    with function_modules([LEGACY_LIBRARY]):
        lt = time.localtime(TS)
        midnight = time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, 0, 0, 0, 0, 0, -1))
        assert compile_expression("DATE(/t)")({"t": TS}) == midnight
        assert compile_expression("TIMEZONEOFFSET()")({}) == time.localtime().tm_gmtoff
        now = time.time()
        today_utc = compile_expression("TODAY_UTC()")({})
        assert today_utc % 86400 == 0 and 0 <= now - today_utc < 86400 + 1
        today = compile_expression("TODAY()")({})
        assert time.localtime(today)[:3] == time.localtime(now)[:3]
        assert time.localtime(today)[3:6] == (0, 0, 0)


@pytest.mark.skipif(not hasattr(time, "tzset"), reason="needs time.tzset")
def test_date_is_the_local_midnight(monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        with function_modules([LEGACY_LIBRARY]):
            # 2010-01-25 03:00 UTC is still the 24th in New York (UTC-5)
            at = calendar.timegm((2010, 1, 25, 3, 0, 0))
            assert compile_expression("DATE(/t)")({"t": at}) == calendar.timegm((2010, 1, 24, 5, 0, 0))
            assert compile_expression("DATE_UTC(/t)")({"t": at}) == calendar.timegm((2010, 1, 25, 0, 0, 0))
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert os.environ.get("TZ") is None


def test_clock_readers_are_not_folded_into_a_constant(monkeypatch):
    from amps_emulator.protocol.filter import modules

    with function_modules([LEGACY_LIBRARY]):
        f = compile_expression("TODAY_UTC() + 1")
        monkeypatch.setattr(modules.time, "time", lambda: 3 * 86400 + 5.5)
        assert f({}) == 3 * 86400 + 1
        monkeypatch.setattr(modules.time, "time", lambda: 4 * 86400 + 7.0)
        assert f({}) == 4 * 86400 + 1


def test_value_lookup_asks_the_context_and_gives_null_without_one():
    asked = []

    def lookup(name, values):
        asked.append((name, values))
        return "found" if values == (7,) else None

    with function_modules([EXPERIMENTAL_LIBRARY]):
        f = compile_expression("VALUE_LOOKUP('by-id', /id)")
        assert f.uses_context
        assert f({"id": 7}, MessageContext(lookup=lookup)) == "found"
        assert f({"id": 8}, MessageContext(lookup=lookup)) is None
        assert f({"id": 7}) is None and f({"id": 7}, MessageContext()) is None
    assert asked == [("by-id", (7,)), ("by-id", (8,))]


def test_the_loaded_libraries_belong_to_the_context_not_the_process():
    seen = {}
    with function_modules([LEGACY_LIBRARY]):
        t = threading.Thread(target=lambda: seen.setdefault("other", active_modules()))
        t.start()
        t.join()
        assert active_modules() == {LEGACY_LIBRARY}
    assert seen["other"] == frozenset() and active_modules() == frozenset()
