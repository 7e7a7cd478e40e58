"""A fuzzer for the entitlement layer: hypothesis over permission documents, user names, topic
names (control characters, the type separator ``\\x1f``, unicode, regex metacharacters) and
filters, checking that the decisions hang together:

* one key per topic: a name from the wire is refused (``invalid topic``) exactly when it holds
  a control character; the accepted (type, name) pairs map one to one to the server's keys, so
  no spelling of one topic reaches another type's;
* a decision is the first matching entry's, whatever is asked (a literal subscribe, a read, a
  write, a delivery to a regex subscription on the server's key, the cache, a switch of
  entitlement off and on), so a topic a document denies is never granted another way;
* a regex subscription covers only its own type's keys;
* an entitlement filter joined with any client filter never admits what it excludes, and a
  client's select list never brings back a field the entitlement's removes;
* a user name fills a ``file:`` ResourceURI as one file name: no name reads another's document.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from amps_emulator.auth import SecurityState, parse_document
from amps_emulator.auth.permissions import DocumentPermissions
from amps_emulator.protocol import reasons
from amps_emulator.protocol.filter import FilterError, compile_filter
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.protocol.topics import (
    TYPE_SEP,
    check_topic_name,
    display_name,
    qualify,
    split_topic,
    valid_topic_name,
)
from amps_emulator.server.core.router import ReadEntitlement, Router, Subscription
from tests.support.filter_corpus import client_filters, documents
from tests.unit.auth.test_auth_decisions import layer, logon

SETTINGS = settings(max_examples=300, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])

MESSAGE_TYPES = ["json", "nvfix", "fix", "xml", "bflat"]
SPECIAL = "\x00\x01\x1f\x7f\n\r\t ./*^$|()[]{}?+\\-_:é€😀"

#: topic names as a client may spell them: the names the documents use, with special
#: characters and another type's key among them
names = st.one_of(
    st.sampled_from(["orders", "secret", "orders/a", "public", "Secret", "orders" + TYPE_SEP + "nvfix",
                     "secret" + TYPE_SEP + "json", "secret\x00", " secret", "secret "]),
    st.text(alphabet=st.one_of(st.sampled_from(SPECIAL), st.characters(codec="utf-8")),
            max_size=12),
    st.builds(lambda a, c, b: a + c + b, st.sampled_from(["orders", "secret", ""]),
              st.sampled_from(SPECIAL), st.sampled_from(["", "nvfix", "json", "x"])),
)
message_types = st.sampled_from(MESSAGE_TYPES)

ENTRY_TOPICS = ["orders", "secret", "public", "orders/a", "^orders/.*", "sec.*", ".*", "^[a-z]+$",
                "x|secret", "^pub"]
GRANTS = st.one_of(st.booleans(), st.sampled_from(["/a = 1", "/priority = 1 OR /b = 2"]))
entries = st.lists(st.fixed_dictionaries({"topic": st.sampled_from(ENTRY_TOPICS), "read": GRANTS,
                                          "write": GRANTS}), max_size=5)
users = st.text(alphabet=st.one_of(st.sampled_from(SPECIAL), st.characters(codec="utf-8")),
                min_size=0, max_size=10)


def _reference(doc_entries: list[dict], topic: str) -> dict | None:
    """The first entry matching ``topic``: a literal entry by equality, a regex one searched."""
    for e in doc_entries:
        t = e["topic"]
        if (re.search(t, topic) is not None) if any(c in t for c in ".*+?^$[](){}|\\") else t == topic:
            return e
    return None


@SETTINGS
@given(names, message_types, names, message_types)
def test_one_key_per_topic_and_control_characters_refused(n1, t1, n2, t2):
    for n in (n1, n2):
        control = any(ord(c) < 0x20 or ord(c) == 0x7F for c in n)
        assert valid_topic_name(n) is not control, repr(n)
        if control:
            with pytest.raises(CommandError) as e:
                check_topic_name(n)
            assert e.value.reason == reasons.INVALID_TOPIC
        else:
            check_topic_name(n)
    assume(valid_topic_name(n1) and valid_topic_name(n2))
    k1, k2 = qualify(n1, t1), qualify(n2, t2)
    assert split_topic(k1) == (n1, t1) and display_name(k1) == n1
    assert (k1 == k2) == ((n1, t1) == (n2, t2)), (n1, t1, n2, t2)


@SETTINGS
@given(users, entries, names, message_types)
def test_every_way_of_asking_gives_the_first_matching_entrys_decision(user, doc_entries, name, mt):
    assume(valid_topic_name(name))
    state = SecurityState()
    perms = DocumentPermissions(parse_document(json.dumps({"logon": True, "topic": doc_entries}),
                                               user), state=state)
    want = _reference(doc_entries, name)
    readable = want is not None and want["read"] is not False
    writable = want is not None and want["write"] is not False
    read = perms.read_grant(mt, name)
    assert (read is not None) is readable
    if readable:
        assert read is not None
        assert read.filter_text == (want["read"] if isinstance(want["read"], str) else None)
        assert perms.check_read(mt, name) is read
        assert perms.check_subscribe(mt, name, regex=False) is read
        assert perms.check_queue_consume(mt, name) is read
    else:
        for check in (perms.check_read, perms.check_queue_consume, perms.check_queue_ack):
            with pytest.raises(CommandError) as e:
                check(mt, name)
            assert e.value.reason == reasons.NOT_ENTITLED and user in e.value.detail
    write = perms.write_grant(mt, name)
    assert (write is not None) is writable
    if writable:
        assert write is not None
        assert write.filter_text == (want["write"] if isinstance(want["write"], str) else None)
    # the same decision for every type, and on delivery, where the server asks with its key
    for other in MESSAGE_TYPES:
        assert perms.read_grant(other, name) is read
        delivered = ReadEntitlement(perms, other, True).grant(qualify(name, other))
        assert delivered is read, (name, other)
    # switched off, everything; back on, what it was
    state.entitlement_enabled = False
    assert perms.read_grant(mt, name) is not None and perms.write_grant(mt, name) is not None
    state.entitlement_enabled = True
    assert perms.read_grant(mt, name) is read and perms.write_grant(mt, name) is write


@SETTINGS
@given(st.sampled_from(["^orders.*", "orders", ".*", "^sec", "ret$", "[a-z]+", "s.c.e."]),
       message_types, names, message_types)
def test_a_regex_subscription_covers_its_own_types_topics_only(pattern, sub_type, name, mt):
    assume(valid_topic_name(name))
    sub = Subscription(None, "s", qualify(pattern, sub_type), None, {})
    router = Router()
    router.add(sub)
    key = qualify(name, mt)
    covered = sub.matches_topic(key)
    assert covered is (sub in router.match(key))
    if covered:
        assert mt == sub_type and re.search(pattern, name) is not None


@SETTINGS
@given(st.sampled_from(["/a = 1", "/priority = 1 OR /b = 2", "NOT /b = 2"]), client_filters,
       st.lists(documents, min_size=1, max_size=3))
def test_a_grants_filter_joined_with_any_client_filter_never_admits_what_it_excludes(
        ent, client, docs):
    perms = DocumentPermissions(parse_document(json.dumps(
        {"logon": True, "topic": [{"topic": "t", "read": ent, "write": ent}]}), "u"))
    grant = perms.check_read("json", "t")
    try:
        joined = grant.combined_filter(client)
    except FilterError as exc:
        assert exc.reason == reasons.BAD_FILTER
        return
    assert joined is not None
    f = compile_filter(joined)
    for doc in docs:
        assert not f(doc) or grant.admits(doc), (ent, client, doc)


@pytest.fixture(scope="module")
def perm_dir(tmp_path_factory) -> Path:
    """``perms/alice.json`` (a document), and documents beside and below ``perms`` that a user
    name must not reach."""
    root = tmp_path_factory.mktemp("fuzz")
    (root / "perms" / "sub").mkdir(parents=True)
    everything = json.dumps({"logon": True, "password": "pw", "topic": [
        {"topic": ".*", "read": True, "write": True}]})
    (root / "perms" / "alice.json").write_text(json.dumps(
        {"logon": True, "password": "pw", "topic": [{"topic": "secret", "read": False, "write": False}]}))
    (root / "outside.json").write_text(everything)
    (root / "perms" / "sub" / "inner.json").write_text(everything)
    return root


@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.one_of(users, st.sampled_from(["../outside", "sub/inner", "..\\outside", "%2e%2e/outside",
                                         "sub%2Finner", "alice\x00", "./alice", "alice/../alice",
                                         "..", ".", "", "ALICE", "alice"])))
def test_a_user_name_reads_only_its_own_document(perm_dir, user):
    lay = layer("web", [("ResourceURI", "file:perms/{{USER_NAME}}.json")], "web",
                config_dir=str(perm_dir))
    out = asyncio.run(logon(lay, user, "pw"))
    if user != "alice":
        assert not out.accepted, user
        return
    assert out.session is not None
    with pytest.raises(CommandError):
        out.session.permissions.check_read("json", "secret")


def _paths(doc, path=()) -> set[tuple]:
    """Every field path of ``doc``, objects and values (a value's own path only)."""
    out = {path}
    if type(doc) is dict:
        for k, v in doc.items():
            out |= _paths(v, path + (k,))
    return out


FIELDS = ["id", "secret", "n", "a", "a b", "x.y"]
nested = st.recursive(st.integers(0, 3), lambda kids: st.dictionaries(st.sampled_from(FIELDS), kids,
                                                                      max_size=4), max_leaves=8)
select_items = st.builds(lambda sign, path: sign + path, st.sampled_from("+-"), st.one_of(
    st.sampled_from(["/", "/id", "/secret", "/a/secret", "/a", "[/a b]", "[/a/secret]", "/x.y",
                     "[/secret,+/secret]", "/secret/", "//secret"]),
    st.lists(st.sampled_from(FIELDS), min_size=1, max_size=3).map(lambda p: "/" + "/".join(p))))


@SETTINGS
@given(st.sampled_from(["-/secret", "-/,+/id,+/n", "-/a/secret", "-/a,+/a/n"]),
       st.lists(select_items, max_size=5).map(",".join), st.dictionaries(
           st.sampled_from(FIELDS), nested, max_size=5))
def test_a_subscribers_select_list_never_brings_back_what_the_entitlements_removes(ent, theirs, doc):
    """As the server composes them (``entitle._entitlement_select``: the composed list's text,
    which the handler parses again): what a client's list keeps is within what the
    entitlement's keeps, or the command is refused (``invalid options``)."""
    from amps_emulator.sow.query import apply_select, compose_select, parse_select

    mine = parse_select(ent)
    assert mine is not None
    try:
        own = parse_select(theirs)
        composed = parse_select(compose_select(mine, own).text)
    except CommandError as exc:
        assert exc.reason == reasons.INVALID_OPTIONS
        return
    allowed = _paths(apply_select(doc, mine))
    got = apply_select(doc, composed) if composed is not None else doc
    assert _paths(got) <= allowed, (ent, theirs, doc)
