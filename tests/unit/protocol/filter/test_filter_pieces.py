"""A long filter is compiled in pieces (``protocol.filter.pieces``): ``compile()`` holds the
interpreter lock for the whole call, so one call for a filter of thousands of clauses stopped
every other thread (the server's event loop too) for most of a second. Split or not, the
compiled filter answers as the reference interpreter does."""

from __future__ import annotations

import builtins
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amps_emulator.protocol.filter import ast as A
from amps_emulator.protocol.filter import compile_ast, compiler, interpret_filter, parse, pieces, to_text
from amps_emulator.protocol.filter.fields import fields_filter
from tests.support.filter_corpus import contexts, documents, expressions


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(expressions, min_size=2, max_size=6), st.sampled_from(["AND", "OR"]),
       st.lists(documents, min_size=1, max_size=4), contexts)
def test_split_filter_agrees_with_interpreter(terms, joiner, docs, ctx):
    # every AND/OR heavier than 2 nodes becomes part functions, nested ones included
    text = f" {joiner} ".join(f"({to_text(t)})" for t in terms)
    root = parse(text)
    before = compiler.recoveries
    with mock.patch.object(pieces, "SPLIT_WEIGHT", 2):
        f = compile_ast(root, text)
        g = compile_ast(A.Not(root))  # the FALSE mode
    for doc in docs:
        assert f(doc, ctx) is interpret_filter(root, doc, ctx), (text, doc)
        assert g(doc, ctx) is interpret_filter(A.Not(root), doc, ctx), (text, doc)
    assert compiler.recoveries == before, "compiled code raised; interpreter answered"


@pytest.mark.parametrize("text", [
    " AND ".join(["1 = 1"] * 100 + ["/a = 1"] * 100),
    " OR ".join(["1 = 2"] * 100 + ["/a = 1"] * 100),
    " AND ".join(["/a = 1"] * 100 + ["1 = 1"] * 90 + ["/b = 1"] * 100),
], ids=["and", "or", "and-around"])
def test_the_runs_of_a_split_filter_are_not_taken_for_one_another(text):
    # each run of a heavy AND/OR is a node made for the time of its part; the next run's node
    # can be made at the same address: a constant run's "constant" was then given to it, and
    # the run that reads /a was folded to a constant (TRUE for OR, FALSE for AND)
    root = parse(text)
    f = compile_ast(root, text)
    for doc in ({"a": 1, "b": 1}, {"a": 2, "b": 2}, {"a": 1, "b": 2}, {}):
        assert f(doc) is interpret_filter(root, doc, None), doc


def test_a_filter_of_ten_thousand_clauses_compiles_in_small_calls(monkeypatch):
    sizes: list[int] = []

    def compile_spy(source, *args, **kwargs):
        sizes.append(len(source))
        return builtins.compile(source, *args, **kwargs)

    monkeypatch.setattr(pieces, "compile", compile_spy, raising=False)
    text = " OR ".join(f"(/id = {i} AND /sym != 'S{i}')" for i in range(10_000))
    f = compile_ast(parse(text), text)
    assert sum(sizes) > 1_000_000  # megabytes of generated source...
    assert max(sizes) < 64_000, max(sizes)  # ...none of it in one long hold of the lock
    assert f({"id": 9_999, "sym": "X"}) is True
    assert f({"id": 9_999, "sym": "S9999"}) is False
    assert f({"id": 10_000}) is False
    assert f([1]) is False  # not an object: the generic function, split too
    assert compile_ast(A.Not(parse(text)))({"id": 5}) is False
    # a scan's fields mode inlines the whole test in one loop (one compile): not for this
    assert fields_filter(f) is None


def test_a_short_filter_is_one_function():
    f = compile_ast(parse("/a = 1 OR /b = 2"))
    assert f.source is not None and "_part" not in f.source
    assert fields_filter(f) is not None


@settings(max_examples=300, deadline=None, database=None)
@given(expressions, st.integers(min_value=0, max_value=60))
def test_heavier_says_what_weight_says(expr, limit):
    assert pieces.heavier(expr, limit) is (pieces.weight(expr, {}) > limit)


def test_heavier_looks_at_no_more_nodes_than_its_limit(monkeypatch):
    """Whether a scan may inline a filter is asked on the event loop: a sum of 100,000 terms
    is answered from the first nodes, not by weighing all of them."""
    text = "/a = " + "+".join(["/b"] * 100_000)
    root, f = parse(text), compile_ast(parse(text), text)
    looked = []
    real = A.children
    monkeypatch.setattr(A, "children", lambda n: (looked.append(n), real(n))[1])
    assert pieces.heavier(root, pieces.SPLIT_WEIGHT)
    assert len(looked) <= pieces.SPLIT_WEIGHT + 1
    looked.clear()
    assert fields_filter(f) is None  # (too long to inline: found without weighing it all)
    assert len(looked) <= pieces.SPLIT_WEIGHT + 1
