"""An entitlement's select list applies before the subscriber's (docs/design/beyond-json.md B.3): the
composed list keeps a field only when both keep it."""

from __future__ import annotations

from amps_emulator.server.handlers.entitle import compose_select
from amps_emulator.sow.query import apply_select, parse_select

DOC = {"id": 1, "secret": "x", "a": {"b": 1, "c": 2}, "d": 4}


def both(first: str, then: str | None) -> object:
    e = parse_select(first)
    assert e is not None
    s = parse_select(then) if then is not None else None
    step = apply_select(DOC, e)
    return apply_select(step, s) if s is not None else step


def test_entitlement_alone() -> None:
    e = parse_select("-/,+/id")
    assert e is not None
    assert apply_select(DOC, compose_select(e, None)) == {"id": 1}


def test_the_subscriber_cannot_reinclude_what_the_entitlement_removed() -> None:
    e, s = parse_select("-/,+/id"), parse_select("+/secret")
    assert e is not None and s is not None
    assert apply_select(DOC, compose_select(e, s)) == {"id": 1}


def test_composition_equals_applying_one_after_the_other() -> None:
    cases = [("-/secret", "-/,+/a/b,+/id"), ("-/a/c", "-/d"), ("-/,+/a", "-/a/b"),
             ("+/id,-/secret", None), ("-/a", "+/a/b")]
    for first, then in cases:
        e = parse_select(first)
        s = parse_select(then) if then is not None else None
        assert e is not None
        assert apply_select(DOC, compose_select(e, s)) == both(first, then), (first, then)
