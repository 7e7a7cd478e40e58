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

from amps_emulator.sow.keys import KeyGenerator, generate_sow_key, key_text, sow_key_py
from tests.compiled import compiled
from tests.compiled import speedups as _speedups

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
