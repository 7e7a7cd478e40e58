"""protocol.saferegex: each pattern on the cheapest safe engine, with Python ``re``'s
answers (PCRE spellings translated) wherever the pattern is not pathological."""

from __future__ import annotations

import re

import pytest

from amps_emulator.protocol.saferegex import compile_pattern, translate_regex

PATTERNS = ["abc", "^a.c$", "^(a+)+$", "x$", "a\\Z", "a\\z", "(?i)ab+c", "[$]+", "^jo.*th$",
            "[[:alpha:]]+[[:digit:]]{2,}", "sm(i|y)th", "\\Qa.b\\E", "(?<n>ab)\\k<n>",
            "^(?=a)(a|aa)+$", "(a)\\1", "\\d+-\\w+", "^$", "(?m)^b$", "a|b$"]
SUBJECTS = ["abc", "a.c", "aaaa", "x\n", "x\nx", "a", "a\n", "ABBC", "$$", "john.smith",
            "abc12", "smyth", "a.b", "abab", "aa", "12-ab", "", "a\nb\nc", "b\n"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_every_engine_answers_as_python_re(pattern):
    expected = re.compile(translate_regex(pattern), re.ASCII)
    rx = compile_pattern(pattern)
    for s in SUBJECTS:
        assert bool(rx.search(s)) == bool(expected.search(s)), (pattern, s, rx.engine)


@pytest.mark.parametrize("pattern,engine", [
    ("abc", "re"), ("^a.c$", "re"), ("(a)\\1", "re"),  # nothing to backtrack over
    ("^(a+)+$", "re2"), ("sm(i|y)th", "re2"),  # linear time
    ("(a+)\\1", "bounded"), ("^(?=a)(a|aa)+$", "bounded"),  # RE2 refuses these
])
def test_engine_choice(pattern, engine):
    assert compile_pattern(pattern).engine == engine


def test_pathological_subjects_are_no_match():
    assert compile_pattern("^(a+)+$").search("a" * 5000 + "!") is None
    assert compile_pattern("^(?=a)(a|aa)+$").search("a" * 60 + "!") is None
    assert compile_pattern("^(?=a)(a|aa)+$").sub("x", "a" * 60 + "!") is None


def test_literal_replacement():
    assert compile_pattern("a+").sub("\\1$0", "baad") == "b\\1$0d"
    assert compile_pattern("(a)\\1").sub("-", "xaax") == "x-x"


def test_unrunnable_patterns_raise_re_error():
    for bad in ("(", "a{2,1}", "[z-a]"):
        with pytest.raises(re.error):
            compile_pattern(bad)
