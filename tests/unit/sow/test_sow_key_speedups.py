"""The compiled SowKey (``_speedups.sow_key``) against its pure-Python twin
(``sow.keys.sow_key_py``), and both against the general key generation.

Same inputs to both, the odd ones included (ints past 64 bits, lone surrogates, floats,
bools, None, containers, domains and values across BLAKE2b's 128-byte block); the reference
is hashlib's BLAKE2b through :func:`sow.keys.generate_sow_key`, which neither uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator.protocol.reasons import CommandError
from amps_emulator.sow.keys import KeyGenerator, generate_sow_key, key_text, sow_key_py, sow_keyed_py
from tests.support.compiled import compiled
from tests.support.compiled import speedups as _speedups

KEYERS = [pytest.param(sow_key_py, id="pure"),
          pytest.param(_speedups and _speedups.sow_key, id="compiled", marks=compiled)]

I64 = 1 << 63


def _prefix(domain: str) -> bytes:
    d = domain.encode("utf-8", "surrogatepass")
    return b"%d:%b" % (len(d), d)


def _expected(domain: str, value: Any) -> str | None:
    """What a keyer must return: the general key for an int in 64 bits or an encodable
    str, else None (declined)."""
    if type(value) is int and -I64 <= value < I64:
        return generate_sow_key(domain, [str(value)])
    if type(value) is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return None
        return generate_sow_key(domain, [value])
    return None


DOMAINS = ["", "orders", "é", "d" * 100, "d" * 120, "d" * 123, "d" * 124, "d" * 125,
           "d" * 128, "d" * 250, "d" * 1000]
VALUES: list[Any] = [0, -1, 1, 5, I64 - 1, -I64, I64, -I64 - 1, 1 << 100, "", "5", "a" * 115,
                     "a" * 116, "a" * 117, "a" * 300, "é€𝄞", "\ud800", "a\udfffb", True,
                     False, None, 1.5, 5.0, [1], {"a": 1}, b"5"]


@pytest.mark.parametrize("keyer", KEYERS)
@pytest.mark.parametrize("domain", DOMAINS)
def test_the_keyer_gives_the_general_key_or_declines(keyer: Callable, domain: str) -> None:
    for v in VALUES:
        assert keyer(_prefix(domain), v) == _expected(domain, v), v


@compiled
@settings(max_examples=300, deadline=None)
@given(domain=st.text(max_size=200), value=st.integers() | st.text(max_size=300))
def test_both_keyers_agree(domain: str, value: int | str) -> None:
    assert _speedups is not None
    pre = _prefix(domain)
    assert _speedups.sow_key(pre, value) == sow_key_py(pre, value) == _expected(domain, value)


@compiled
def test_the_compiled_keyer_wants_a_bytes_prefix() -> None:
    """(The pure twin is only called by KeyGenerator, with bytes: it does not check.)"""
    assert _speedups is not None
    with pytest.raises(TypeError):
        _speedups.sow_key("1:x", 5)


@settings(max_examples=200, deadline=None)
@given(domain=st.text(max_size=50),
       value=st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40)
       | st.lists(st.integers(), max_size=3))
def test_a_one_field_key_is_the_general_key_whatever_the_value(domain: str, value: Any) -> None:
    gen = KeyGenerator(domain, ["/id"])
    text = key_text(value)
    assert gen({"id": value}) == generate_sow_key(domain, ["" if text is None else text])


# -- a run of documents (KeyGenerator.keyed's loop) ---------------------------------------

KEYEDS = [pytest.param(sow_keyed_py, id="pure"),
          pytest.param(_speedups and _speedups.sow_keyed, id="compiled", marks=compiled)]

_DOC_VALUES = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
               | st.lists(st.integers(), max_size=2))
_DOCS = st.lists(st.one_of(st.fixed_dictionaries({"id": _DOC_VALUES}),
                           st.fixed_dictionaries({"id": _DOC_VALUES, "x": st.integers()}),
                           st.just({}), st.just({"other": 1}), st.none(), st.just([1]),
                           st.integers()),
                 max_size=12)


def _keyed_expected(prefix: bytes, docs: list) -> list:
    out = []
    for d in docs:
        k = sow_key_py(prefix, d.get("id")) if type(d) is dict else None
        if k is None:
            break
        out.append((d, k))
    return out


@pytest.mark.parametrize("keyed", KEYEDS)
@settings(max_examples=300, deadline=None)
@given(domain=st.text(max_size=30), docs=_DOCS)
def test_a_run_is_keyed_up_to_the_first_declined(keyed: Callable, domain: str,
                                                 docs: list) -> None:
    pre = _prefix(domain)
    got = keyed(pre, "id", docs)
    want = _keyed_expected(pre, docs)
    assert got == want
    assert all(g[0] is d for g, d in zip(got, docs[:len(got)], strict=True))  # the documents themselves


@settings(max_examples=200, deadline=None)
@given(domain=st.text(max_size=30), docs=_DOCS)
def test_the_key_generators_run_is_its_keys_one_by_one(domain: str, docs: list) -> None:
    """KeyGenerator.keyed: each (document, SowKey) up to the first without one."""
    gen = KeyGenerator(domain, ["/id"])
    want = []
    for d in docs:
        try:
            want.append((d, gen(d)))
        except CommandError:
            break
    assert gen.keyed(docs) == want


@compiled
def test_the_compiled_run_keyer_wants_its_types() -> None:
    assert _speedups is not None
    for args in ((b"1:x", "id"), ("1:x", "id", []), (b"1:x", 5, []), (b"1:x", "id", ())):
        with pytest.raises(TypeError):
            _speedups.sow_keyed(*args)
