"""Two filters joined as expressions (``protocol.filter.conjoin``), the way an entitlement's
filter narrows a client's: whatever the client's text holds (unbalanced parentheses, quotes,
comment-like text, ``OR`` injections, random characters), the joined filter either is refused
as a bad filter (the client's text does not parse on its own) or matches exactly the documents
both match, so never one the entitlement's filter excludes."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amps_emulator.protocol.filter import FilterError, compile_filter, conjoin, conjoin_ast, parse
from amps_emulator.protocol.filter import ast as A
from amps_emulator.protocol.reasons import BAD_FILTER
from tests.support.filter_corpus import client_filters, documents

SETTINGS = settings(max_examples=400, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

ENTITLEMENTS = ["/a = 1", "/a = 1 OR /b = 1", "/n > 2 AND /c IS NOT NULL", "NOT /a = 2",
                "/l IN (1, 2) OR /b LIKE 'x'", "/c BEGINS WITH ('a') OR /n BETWEEN 1 AND 3"]


def _parses(text: str) -> bool:
    try:
        compile_filter(text)
    except FilterError:
        return False
    return True


@SETTINGS
@given(st.sampled_from(ENTITLEMENTS), client_filters, st.lists(documents, min_size=1, max_size=4))
def test_the_join_never_matches_what_the_entitlement_excludes(ent_text, client, docs):
    ent = compile_filter(ent_text)
    try:
        joined = conjoin(ent_text, client)
    except FilterError as exc:
        assert exc.reason == BAD_FILTER
        assert not _parses(client) or len(ent_text) + len(client) > 200_000, client
        return
    for doc in docs:  # the property that matters: nothing the entitlement excludes
        assert not joined(doc) or ent(doc), (ent_text, client, doc)
    if not client.strip():
        assert joined.text == ent_text
        return
    own = compile_filter(client)  # it parsed on its own, or the join would have failed
    # the entitlement's tree is a conjunct of what is kept as text, whatever the client wrote
    root = parse(joined.text)
    assert isinstance(root, A.And) and root == conjoin_ast(ent.ast, own.ast)
    for doc in docs:
        assert joined(doc) == (ent(doc) and own(doc)), (ent_text, client, doc)


@pytest.mark.parametrize("client", ["1=1) OR (1=1", "/a = 2) OR (/a = 2", "1=1 -- ", "/* x */ 1=1",
                                    "1=1) OR NOT (1=0", ") OR (", "'", "/a = 1)", "(/a = 1"])
def test_a_client_filter_that_does_not_parse_alone_is_a_bad_filter(client):
    with pytest.raises(FilterError) as e:
        conjoin("/a = 1", client)
    assert e.value.reason == BAD_FILTER


def test_the_join_is_flat_cached_and_keeps_each_operand_whole():
    joined = conjoin("/a = 1 OR /b = 1", "/c = 1 AND /n > 2")
    assert joined.text == "(/a = 1 OR /b = 1) AND /c = 1 AND /n > 2"
    assert conjoin("/a = 1 OR /b = 1", "/c = 1 AND /n > 2") is joined  # compiled once
    assert joined({"a": 1, "c": 1, "n": 3}) and not joined({"c": 1, "n": 3})
    assert conjoin("/a = 1", "1=1 OR 1=1")({"a": 2}) is False
    assert conjoin("/a = 1", "  ").text == "/a = 1"
