"""A replication peer's logon and what it may replicate, at the decision level: ``replication-logon``
instead of ``logon``, ``replicated-topics`` (names and regexes, first match), what the default and
simple-access modules grant, and the entitlement switch."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from amps_emulator.auth import Credentials, SecurityLayer, block_from_values, parse_document
from amps_emulator.auth.config import AUTHENTICATION, ENTITLEMENT, ModuleDecl, SecurityConfig
from amps_emulator.auth.permissions import DocumentPermissions, SimpleAccessPermissions
from amps_emulator.protocol import reasons

WEB = {"web": ModuleDecl(name="web", library="libamps_http_entitlement.so"),
       "simple": ModuleDecl(name="simple", library="libamps_simple_access_entitlement.so")}


def web_layer(tmp_path, docs: dict[str, dict]) -> SecurityLayer:
    for user, doc in docs.items():
        (tmp_path / f"{user}.json").write_text(json.dumps(doc))
    opts = [("ResourceURI", "file:{{USER_NAME}}.json")]
    cfg = SecurityConfig(authentication=block_from_values(AUTHENTICATION, "web", opts, WEB),
                         entitlement=block_from_values(ENTITLEMENT, "web", opts, WEB),
                         config_dir=str(tmp_path))
    return SecurityLayer(cfg)


async def test_replication_needs_replication_logon_not_logon(tmp_path):
    lay = web_layer(tmp_path, {
        "peer": {"logon": False, "replication-logon": True, "password": "p"},
        "app": {"logon": True, "password": "a"}})
    sec = lay.transport(None)
    assert (await sec.logon(Credentials("peer", "p"), replication=True)).accepted
    assert not (await sec.logon(Credentials("peer", "p"))).accepted  # not as a client
    out = await sec.logon(Credentials("app", "a"), replication=True)
    assert not out.accepted and out.reason == reasons.NOT_ENTITLED and "replication-logon" in out.detail
    out = await sec.logon(Credentials("peer", "wrong"), replication=True)
    assert not out.accepted and out.reason == reasons.AUTH_FAILURE


async def test_default_modules_accept_a_peer_and_everything_it_replicates():
    cfg = SecurityConfig(
        authentication=block_from_values(AUTHENTICATION, "amps-default-authentication-module"),
        entitlement=block_from_values(ENTITLEMENT, "amps-default-entitlement-module"))
    sec = SecurityLayer(cfg).transport("amps-replication")
    out = await sec.logon(Credentials("anyone"), replication=True)
    assert out.session is not None and out.session.permissions.may_replicate("any/topic")


def test_replicated_topics_first_match_names_and_regexes():
    doc = parse_document(json.dumps({"replication-logon": True, "replicated-topics": [
        {"topic": "^/orders/NYC/secret", "write": False}, "^/orders/NYC/.*", "/events/P1"]}), "r")
    p = DocumentPermissions(doc)
    assert p.may_replicate("/orders/NYC/1") and p.may_replicate("/events/P1")
    assert not p.may_replicate("/orders/NYC/secret")  # the first entry that matches refuses it
    assert not p.may_replicate("/events/P2") and not p.may_replicate("/orders/LDN/1")
    assert not DocumentPermissions(parse_document('{"replication-logon": true}', "r")).may_replicate("t")


def test_simple_access_replicates_what_it_lets_write_and_the_switch_allows_all():
    p = SimpleAccessPermissions("u", allowed="^pub", denied="secret")
    assert p.replication_logon and p.may_replicate("public") and not p.may_replicate("pub-secret")
    assert not SimpleAccessPermissions("u", write=False).may_replicate("public")
    doc = DocumentPermissions(parse_document('{"replicated-topics": ["a"]}', "r"))
    doc.state.entitlement_enabled = False
    try:
        assert doc.may_replicate("b")
    finally:
        doc.state.entitlement_enabled = True


@given(st.lists(st.from_regex(r"[a-z0-9/_-]{1,12}", fullmatch=True), max_size=5),
       st.from_regex(r"[a-z0-9/_-]{1,12}", fullmatch=True))
def test_a_list_of_literal_names_grants_exactly_those(names, topic):
    doc = parse_document(json.dumps({"replicated-topics": names}), "r")
    assert DocumentPermissions(doc).may_replicate(topic) == (topic in names)
