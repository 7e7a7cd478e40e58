"""Long arithmetic chains (``/a + /b + ...``) are one level of nesting, not one per operator:
a generated filter summing hundreds of fields is legal AMPS, while real nesting stays bounded."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator.protocol.filter import FilterError, compile_expression, compile_filter, parse
from amps_emulator.protocol.filter import ast as A
from amps_emulator.protocol.filter.interpreter import evaluate
from amps_emulator.protocol.filter.parser import MAX_DEPTH
from tests.support.filter_corpus import same_value

_INT64 = 1 << 63
numbers = st.one_of(st.integers(-_INT64, _INT64 - 1),
                    st.floats(allow_nan=False, allow_infinity=False, width=64))


def _reference(ops: list[str], values: list) -> int | float:
    """Left to right with AMPS promotion: integers stay exact inside the 64-bit range (the
    result too, else it is a double); any double makes the rest double."""
    r = values[0]
    for op, v in zip(ops, values[1:], strict=True):
        if type(r) is int and type(v) is int:
            r = r + v if op == "+" else r - v if op == "-" else r * v
            if not -(1 << 64) < r < (1 << 64):
                r = float(r)
        else:
            r = float(r) + float(v) if op == "+" else float(r) - float(v) if op == "-" \
                else float(r) * float(v)
    return r


@pytest.mark.parametrize("n", [1, 2, 3, 8, 9, 50, 128, 129, 200, 300])
def test_a_sum_of_n_fields_is_python_sum(n):
    doc = {f"f{i}": i * 7 - 300 for i in range(n)}
    text = " + ".join(f"/f{i}" for i in range(n))
    assert compile_expression(text)(doc) == sum(doc.values())
    assert evaluate(parse(text), doc) == sum(doc.values())
    assert compile_filter(f"{text} = {sum(doc.values())}")(doc) is True
    assert compile_filter(f"{text} = {sum(doc.values()) + 1}")(doc) is False


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("+-"), numbers), min_size=1, max_size=300))
def test_a_chain_agrees_with_a_left_to_right_reference(pairs):
    ops = [op for op, _ in pairs[1:]]
    values = [v for _, v in pairs]
    doc = {f"f{i}": v for i, v in enumerate(values)}
    text = "/f0" + "".join(f" {op} /f{i + 1}" for i, op in enumerate(ops))
    want = _reference(ops, values)
    assert same_value(compile_expression(text)(doc), want)
    assert same_value(evaluate(parse(text), doc), want)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(numbers, st.none(), st.just(math.nan), st.just("12"),
                          st.just("x"), st.booleans()), min_size=1, max_size=300),
       st.lists(st.sampled_from(["+", "-", "*", "/", "MOD"]), min_size=300, max_size=300))
def test_compiled_chains_agree_with_the_interpreter(values, ops):
    """NULL, NaN, strings and booleans on any operand, every operator (* / MOD make a chain
    of their own level): the compiled code gives what the interpreter gives."""
    doc = {f"f{i}": v for i, v in enumerate(values)}
    text = "/f0" + "".join(f" {ops[i]} /f{i + 1}" for i in range(len(values) - 1))
    root = parse(text)
    assert same_value(compile_expression(text)(doc), evaluate(root, doc))


def test_a_chain_of_200_terms_is_accepted_and_flat():
    text = " + ".join(["/a"] * 200) + " = 400"
    assert A.depth(parse(text)) <= 3
    f = compile_filter(text)
    assert f({"a": 2}) is True and f({"a": 1}) is False
    assert f.source is not None  # generated code, not the interpreter
    assert compile_filter(" * ".join(["/a"] * 200) + " = 1")({"a": 1}) is True
    assert compile_filter(" - ".join(["/a"] * 200) + " = -198")({"a": 1}) is True


def test_the_longest_sum_the_text_limit_allows_compiles():
    n = 87_000  # "/a+" a term: about 256 KiB
    f = compile_filter("+".join(["/a"] * n) + f" = {n}")
    assert f({"a": 1}) is True and f({"a": 2}) is False


def test_operators_keep_their_grouping():
    doc = {"a": 10, "b": 4, "c": 3}
    assert compile_expression("/a - /b - /c")(doc) == 3
    assert compile_expression("/a - (/b - /c)")(doc) == 9
    assert compile_expression("/a - /b * /c + /a MOD /c")(doc) == -1
    assert compile_expression("(/a + /b) * /c")(doc) == 42
    assert parse("(/a + /b) + /c") == parse("/a + /b + /c")  # the same value either way
    assert parse("/a + (/b + /c)") != parse("/a + /b + /c")


def test_real_nesting_is_still_refused():
    nested = "/a"
    for _ in range(MAX_DEPTH + 1):
        nested = f"(/a + {nested})"  # right-nested: each level a real sub-expression
    with pytest.raises(FilterError, match="nested too deeply"):
        compile_filter(nested + " = 1")
    alternating = "/a"
    for i in range(MAX_DEPTH + 1):
        alternating = f"({alternating} {'+*'[i % 2]} 1)"  # a sum in a product in a sum...
    with pytest.raises(FilterError, match="nested too deeply"):
        compile_filter(alternating + " = 1")
    with pytest.raises(FilterError, match="nested too deeply"):
        compile_filter("ABS(" * 200 + "/a" + ")" * 200 + " = 1")
    with pytest.raises(FilterError, match="nested too deeply"):
        compile_filter("-" * 500 + "/a = 1")
