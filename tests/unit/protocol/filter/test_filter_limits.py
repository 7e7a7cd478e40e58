"""Filter costs a client cannot inflate: the size limit, cached refusals, IN lists."""

from __future__ import annotations

import pytest

from amps_emulator.protocol.filter import FilterError, compile_filter, interpret_filter, parse
from amps_emulator.protocol.filter.compiler import MAX_TEXT, _compile_cached


def test_a_filter_longer_than_the_limit_is_refused_before_parsing():
    before = _compile_cached.cache_info().misses
    with pytest.raises(FilterError, match="more than"):
        compile_filter("/a = 1 OR " * (MAX_TEXT // 10 + 1) + "/a = 2")
    assert _compile_cached.cache_info().misses == before


def test_a_refusal_is_cached_like_a_success():
    text = "/a = 1 AND (" + "/b = 2 OR " * 300 + "/c ="  # long and broken at the very end
    with pytest.raises(FilterError) as first:
        compile_filter(text)
    hits = _compile_cached.cache_info().hits
    with pytest.raises(FilterError) as second:
        compile_filter(text)
    assert _compile_cached.cache_info().hits == hits + 1
    assert str(first.value) == str(second.value) and first.value is not second.value


@pytest.mark.parametrize("text", [
    "/a IN (1, 'true', 'x')", "/a IN (0, 2)", "/a IN ('false')", "/a NOT IN (1, 'x')",
    "/a IN (1, NULL)", "/a NOT IN (0, NULL)",
    "/a IN (" + ", ".join(str(i) for i in range(3000)) + ")",
])
def test_in_lists_answer_as_the_interpreter_for_every_kind_of_value(text):
    fn, tree = compile_filter(text), parse(text)
    for v in (True, False, None, {"k": 1}, [True, 2], [], 1, 2999, "true", "1", 0, 1.0):
        assert fn({"a": v}) == interpret_filter(tree, {"a": v}), v
