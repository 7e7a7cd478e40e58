"""auth modules and permissions: each module and option, and the B.6 scenarios at the decision level
(what the server will send: accept/refuse + reason, grants, filters, select lists)."""

from __future__ import annotations

import json

import pytest

from amps_emulator.auth import Credentials, SecurityLayer, block_from_values, parse_document
from amps_emulator.auth.config import AUTHENTICATION, ENTITLEMENT, ModuleDecl, SecurityConfig, resolve
from amps_emulator.auth.permissions import DocumentPermissions, combine_filters
from amps_emulator.protocol import reasons
from amps_emulator.protocol.filter import compile_filter
from amps_emulator.protocol.reasons import CommandError

MODULES = {"simple": ModuleDecl(name="simple", library="libamps_simple_access_entitlement.so"),
           "web": ModuleDecl(name="web", library="libamps_http_entitlement.so")}


def layer(auth: str = "amps-default-authentication-module", auth_opts=(),
          ent: str = "amps-default-entitlement-module", ent_opts=(), config_dir: str = ".",
          transports=None) -> SecurityLayer:
    if ent == "web" and auth == "web" and not ent_opts:
        ent_opts = auth_opts  # one module doing both: one document source
    cfg = SecurityConfig(authentication=block_from_values(AUTHENTICATION, auth, auth_opts, MODULES),
                         entitlement=block_from_values(ENTITLEMENT, ent, ent_opts, MODULES),
                         transports=transports or {}, config_dir=config_dir)
    return SecurityLayer(cfg)


async def logon(lay: SecurityLayer, user: str = "alice", pw: str | None = "pw", explicit: bool = True,
                transport: str | None = None):
    return await lay.transport(transport).logon(Credentials(user, pw, explicit))


async def perms_of(lay: SecurityLayer, user: str = "alice"):
    out = await logon(lay, user)
    assert out.session is not None, out
    return out.session.permissions


# --- authentication modules -------------------------------------------------------------------

async def test_default_module_accepts_any_and_identity_is_empty_without_spoofing():
    out = await logon(layer())
    assert out.accepted and out.session is not None and out.session.user_id == ""
    out = await logon(layer(auth_opts=[("AllowSpoofing", "true")]))
    assert out.session is not None and out.session.user_id == "alice"


async def test_default_module_require_logon_and_require_username():
    out = await logon(layer(), "", None, explicit=False)  # scenario 3: a command before logon
    assert not out.accepted and out.reason == reasons.LOGON_REQUIRED
    out = await logon(layer(auth_opts=[("RequireLogon", "false")]), "", None, explicit=False)
    assert out.accepted
    out = await logon(layer(auth_opts=[("RequireUsername", "true")]), "", "pw")  # scenario 14 (end)
    assert not out.accepted and out.reason == reasons.AUTH_FAILURE
    assert (await logon(layer(auth_opts=[("RequireUsername", "true")]), "bob")).accepted


async def test_implicit_module_serves_a_command_before_logon():
    out = await logon(layer("amps-implicit-authentication-module"), "", None, explicit=False)
    assert out.accepted
    spoof = layer("amps-implicit-authentication-module", [("AllowSpoofing", "true")])
    carol = (await logon(spoof, "carol")).session
    assert carol is not None and carol.user_id == "carol"


async def test_no_authentication_module_refuses_everything():  # scenario 1
    out = await logon(layer("amps-default-no-authentication-module"))
    assert not out.accepted and out.reason == reasons.AUTH_FAILURE and "alice" in out.detail
    out = await logon(layer("amps-default-no-authentication-module"), "", None, explicit=False)
    assert not out.accepted


async def test_transport_override():  # scenario 2
    open_auth = block_from_values(AUTHENTICATION, "amps-default-authentication-module")
    default_ent = resolve(None, None, ENTITLEMENT)
    lay = layer("amps-default-no-authentication-module", transports={"open": (open_auth, default_ent)})
    assert (await logon(lay, transport="open")).accepted
    assert not (await logon(lay, transport="other")).accepted


# --- entitlement modules -----------------------------------------------------------------------

async def test_default_entitlement_allows_everything():
    perms = await perms_of(layer())
    assert perms.check_read("json", "anything").unrestricted
    assert perms.check_write("json", "/AMPS/x").unrestricted
    assert perms.check_admin("/amps/instance", write=True)


async def test_simple_access_denied_topics_and_granted_permissions():  # scenario 13
    perms = await perms_of(layer(ent="simple", ent_opts=[("DeniedTopics", "^secret")]))
    with pytest.raises(CommandError) as e:
        perms.check_read("json", "secret/x")
    assert e.value.reason == reasons.NOT_ENTITLED
    perms.check_read("json", "orders")
    perms.check_write("json", "public/secret")  # ^ anchors: not denied
    ro = await perms_of(layer(ent="simple", ent_opts=[("GrantedPermissions", "read")]))
    ro.check_read("json", "orders")
    with pytest.raises(CommandError):
        ro.check_write("json", "orders")
    allowed = await perms_of(layer(ent="simple", ent_opts=[("AllowedTopics", "^orders/")]))
    assert allowed.read_grant("json", "orders/1") is not None
    assert allowed.read_grant("json", "trades") is None


SCENARIO_DOC = {"logon": True, "topic": [
    {"topic": "test", "read": "/priority = 1", "write": False},
    {"topic": ".*", "read": True, "write": True}]}


def perms_for(doc: dict, user: str = "alice") -> DocumentPermissions:
    return DocumentPermissions(parse_document(json.dumps(doc), user))


def test_scenario_5_read_filter_and_refused_write():
    p = perms_for(SCENARIO_DOC)
    grant = p.check_subscribe("json", "test")
    assert grant is not None and grant.filter_text == "/priority = 1"
    assert grant.admits({"priority": 1}) and not grant.admits({"priority": 2})
    with pytest.raises(CommandError) as e:
        p.check_write("json", "test")
    assert e.value.reason == reasons.NOT_ENTITLED
    assert 'User "alice" not entitled to topic "test"' in str(e.value)
    assert p.check_write("json", "other").unrestricted


def test_scenario_7_entitlement_filter_decides_the_oof():
    grant = perms_for(SCENARIO_DOC).check_read("json", "test")
    old, new = {"id": 1, "priority": 1}, {"id": 1, "priority": 2}
    assert grant.admits(old) and not grant.admits(new)  # -> OOF reason "entitlement"
    assert reasons.OOF_ENTITLEMENT == "entitlement"


def test_read_filter_is_anded_with_the_subscriber_filter():
    grant = perms_for(SCENARIO_DOC).check_read("json", "test")
    combined = grant.combined_filter("/qty > 10")
    f = compile_filter(combined)
    assert f({"priority": 1, "qty": 11})
    assert not f({"priority": 2, "qty": 11}) and not f({"priority": 1, "qty": 1})
    assert combine_filters(None, "/a = 1") == "/a = 1" and combine_filters("/a = 1", None) == "/a = 1"
    assert combine_filters("/a = 1 OR /b = 1", "/c = 1") == "(/a = 1 OR /b = 1) AND /c = 1"


def test_a_subscriber_filter_that_does_not_parse_alone_is_refused_not_pasted_in():
    grant = perms_for(SCENARIO_DOC).check_read("json", "test")
    for bad in ("1=1) OR (1=1", "/priority = 2) OR (/priority = 2", "1=1 OR (", ")"):
        with pytest.raises(CommandError) as e:
            grant.combined_filter(bad)
        assert e.value.reason == reasons.BAD_FILTER, bad
    # one that parses is one operand of the AND, whatever it holds
    f = compile_filter(grant.combined_filter("1=1 OR 1=1"))
    assert f({"priority": 1}) and not f({"priority": 2})


def test_scenario_8_and_9_write_filter_on_message_delta_and_each_record():
    p = perms_for({"logon": True, "topic": [{"topic": "orders", "read": True, "write": "/owner = 'alice'"}]})
    grant = p.check_write("json", "orders")
    assert not grant.admits({"id": 1, "owner": "bob"})
    assert grant.admits({"id": 1, "owner": "alice"})
    assert not grant.admits({"id": 1, "x": 5})  # the delta itself, before merge
    records = [{"id": 1, "owner": "alice"}, {"id": 2, "owner": "bob"}, {"id": 3, "owner": "alice"}]
    assert [r["id"] for r in records if grant.admits(r)] == [1, 3]  # sow_delete 1=1 deletes 2 records


def test_scenario_10_regex_subscription_skips_unentitled_topics():
    p = perms_for({"logon": True, "topic": [{"topic": "orders/a", "read": True, "write": False}]})
    assert p.check_subscribe("json", "orders/.*") is None  # accepted; ask per topic
    assert p.read_grant("json", "orders/a") is not None
    assert p.read_grant("json", "orders/b") is None
    with pytest.raises(CommandError):
        p.check_subscribe("json", "orders/b")  # a literal topic is refused at once
    with pytest.raises(CommandError):
        p.check_subscribe("json", "orders/.*", regex=False)  # non_regex_topic: a literal name


def test_scenario_11_select_list():
    p = perms_for({"logon": True,
                   "topic": [{"topic": "t", "read": True, "write": True, "select": "-/, +/id"}]})
    assert p.select("json", "t") == "-/,+/id"
    assert p.check_read("json", "t").select == "-/,+/id"


def test_first_matching_entry_wins_and_no_match_is_denied():
    p = perms_for({"logon": True, "topic": [{"topic": "a.*", "read": False, "write": True},
                                            {"topic": "abc", "read": True, "write": False}]})
    assert p.read_grant("json", "abc") is None  # the regex entry came first
    assert p.write_grant("json", "abc") is not None
    assert p.read_grant("json", "zzz") is None
    assert perms_for({"logon": True}).read_grant("json", "t") is None  # no topic list


def test_queue_rules_and_admin():
    p = perms_for({"logon": True, "topic": [{"topic": "q", "read": True, "write": False},
                                            {"topic": "fwd", "read": False, "write": True}],
                   "admin": [{"topic": "/amps/instance.*", "read": True, "write": False}]})
    p.check_queue_consume("json", "q")
    p.check_queue_ack("json", "q")
    with pytest.raises(CommandError):
        p.check_queue_publish("json", "q")
    assert p.check_admin("/amps/instance/clients") and not p.check_admin("/amps/instance", write=True)
    assert not p.check_admin("/amps/administrator/disconnect")


def test_scenario_12_name_takeover_same_user_only():
    alice = perms_for(SCENARIO_DOC, "alice")
    from amps_emulator.auth import Session

    s = Session("alice", alice)
    assert s.may_take_over("alice") and not s.may_take_over("bob")


async def test_scenario_14_disable_enable_entitlement():
    lay = layer(ent="simple", ent_opts=[("DeniedTopics", "^secret")])
    session = (await logon(lay)).session
    assert session is not None
    perms = session.permissions
    with pytest.raises(CommandError):
        perms.check_read("json", "secret/x")
    lay.disable_authentication()
    lay.disable_entitlement()  # SIGUSR1
    granted = perms.check_read("json", "secret/x")  # the refused subscribe now succeeds
    assert granted.unrestricted
    late = (await logon(lay)).session
    assert late is not None
    lay.enable_authentication()
    lay.enable_entitlement()  # SIGUSR2
    with pytest.raises(CommandError):
        perms.check_read("json", "secret/x")  # new subscribes refused again
    assert granted.unrestricted  # the grant handed out (the existing subscription) stays


async def test_authentication_disabled_accepts_refused_logons():
    lay = layer("amps-default-no-authentication-module")
    lay.disable_authentication()
    out = await logon(lay, "dave")
    assert out.session is not None and out.session.user_id == "dave"
    lay.enable_authentication()
    assert not (await logon(lay, "dave")).accepted


async def test_file_documents_logon_false_password_and_bad_document(tmp_path):
    perms = tmp_path / "perms"
    perms.mkdir()
    (perms / "alice.json").write_text(json.dumps({**SCENARIO_DOC, "password": "s3cret"}))
    (perms / "bob.json").write_text(json.dumps({"logon": False}))
    (perms / "eve.json").write_text('{"logon": "yes"}')
    (perms / "zed.json").write_text(json.dumps({"logon": True, "user_name": "zed-real"}))
    lay = layer("web", [("ResourceURI", "file:perms/{{USER_NAME}}.json")], "web", config_dir=str(tmp_path))
    ok = await logon(lay, "alice", "s3cret")
    assert ok.session is not None and ok.session.user_id == "alice"
    assert ok.session.permissions.check_read("json", "test").filter_text == "/priority = 1"
    wrong = await logon(lay, "alice", "nope")
    assert not wrong.accepted and wrong.reason == reasons.AUTH_FAILURE and "password" in wrong.detail
    bob = await logon(lay, "bob", "any")  # no password in the document: any password
    assert not bob.accepted and bob.reason == reasons.NOT_ENTITLED  # but "logon": false
    eve = await logon(lay, "eve", "x")
    assert not eve.accepted and eve.reason == reasons.AUTH_FAILURE
    assert "'eve'" in eve.detail and "logon" in eve.detail
    nobody = await logon(lay, "nobody", "x")
    assert not nobody.accepted and nobody.reason == reasons.AUTH_FAILURE
    sneaky = await logon(lay, "../perms/alice", "s3cret")  # quoted: cannot step out of the path
    assert not sneaky.accepted
    zed = await logon(lay, "zed", "x")
    assert zed.session is not None and zed.session.user_id == "zed-real"


async def test_file_documents_cached_while_connected_and_reloaded(tmp_path):
    doc = tmp_path / "alice.json"
    doc.write_text(json.dumps(SCENARIO_DOC))
    lay = layer("web", [("ResourceURI", "file:{{USER_NAME}}.json")], "web", config_dir=str(tmp_path))
    source = lay.sources[0]
    s1 = (await logon(lay)).session
    assert s1 is not None
    doc.write_text(json.dumps({"logon": True, "topic": [{"topic": ".*", "read": True, "write": True}]}))
    s2 = (await logon(lay)).session  # the cached document, although the file changed
    assert s2 is not None and s2.permissions.read_filter("json", "test") == "/priority = 1"
    assert source.requests == 1
    s1.close()
    s2.close()
    s2.close()  # idempotent
    assert source.cached_users() == []
    s3 = (await logon(lay)).session  # last connection gone: fetched again
    assert s3 is not None and s3.permissions.read_filter("json", "test") is None
    lay.reload()
    assert source.cached_users() == []


async def test_entitlement_only_web_module_with_other_authentication(tmp_path):
    (tmp_path / "alice.json").write_text(json.dumps(SCENARIO_DOC))
    lay = layer("amps-default-authentication-module", [("AllowSpoofing", "true")], "web",
                [("ResourceURI", "file:{{USER_NAME}}.json"), ("EntitlementOnly", "true")],
                config_dir=str(tmp_path))
    ok = await logon(lay, "alice", "whatever")
    assert ok.session is not None and ok.session.permissions.read_filter("json", "test") == "/priority = 1"
    assert ok.session.document_key == "alice"
    missing = await logon(lay, "mallory", "x")
    assert not missing.accepted and missing.reason == reasons.AUTH_FAILURE


async def test_entitlement_timeout_recheck_reports_changed_documents(tmp_path):
    doc = tmp_path / "alice.json"
    doc.write_text(json.dumps(SCENARIO_DOC))
    now = [0.0]
    lay = layer("web", [("ResourceURI", "file:{{USER_NAME}}.json"), ("EntitlementTimeout", "10s")], "web",
                config_dir=str(tmp_path))
    source = lay.sources[0]
    source._clock = lambda: now[0]
    assert lay.recheck_interval == 10.0
    session = (await logon(lay)).session
    assert session is not None
    assert await lay.recheck() == set()  # not due yet
    now[0] = 11.0
    assert await lay.recheck() == set()  # due, unchanged
    assert source.cached_users() == ["alice"]
    doc.write_text(json.dumps({"logon": True}))
    now[0] = 22.0
    assert await lay.recheck() == {"alice"}
    assert source.cached_users() == []
