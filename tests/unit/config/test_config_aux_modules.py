"""The auxiliary modules of ``Modules`` the emulator implements: read, checked at their
element (file:line), and what the configuration then holds."""

from __future__ import annotations

import pytest

from amps_emulator.config import ConfigError, loads_config
from amps_emulator.protocol.filter.modules import EXPERIMENTAL_LIBRARY, LEGACY_LIBRARY

LEGACY = ("<Module><Name>compatibility-functions-module</Name>"
          "<Library>libamps_udf_legacy_compatibility.so</Library></Module>")
EXPERIMENTAL = ("<Module><Name>experimental-udf</Name><Library>libamps_udf_experimental.so</Library>"
                "<Options>{lookups}</Options></Module>")
CHAINING = "<Module><Name>key-chaining</Name><Library>libamps_id_chaining_key_generator.so</Library></Module>"


def config(modules: str = "", sow: str = "", extra: str = "") -> str:
    return f"""<AMPSConfig><Name>x</Name>
<Modules>{modules}</Modules>
<Transports><Transport><Name>j</Name><Type>tcp</Type><InetAddr>9007</InetAddr>
  <MessageType>json</MessageType><Protocol>amps</Protocol></Transport></Transports>
<SOW>
  {sow}
</SOW>
{extra}
</AMPSConfig>"""


def errors(text: str) -> list[tuple[int, str]]:
    with pytest.raises(ConfigError) as info:
        loads_config(text, "m.xml")
    return [(e.line, e.reason) for e in info.value.errors]


def line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


ENRICHED = """<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
    <Durability>transient</Durability><RecoveryPoint>now</RecoveryPoint>
    <Enrichment><Field>{field}</Field></Enrichment></Topic>"""
CUSTOMERS = """<Topic><Name>customers</Name><MessageType>json</MessageType><Key>/id</Key>
    <Durability>transient</Durability></Topic>"""


def test_the_legacy_functions_are_known_only_where_the_module_is_loaded():
    field = "YEAR(/t) AS /year"
    cfg = loads_config(config(LEGACY, ENRICHED.format(field=field)))
    assert cfg.modules.function_libraries == {LEGACY_LIBRARY}
    assert not [w for w in cfg.warnings if "Module" in w.reason]
    text = config("", ENRICHED.format(field=field))
    ((line, reason),) = errors(text)
    assert line == line_of(text, "<Field>") and "unknown function 'YEAR'" in reason


def test_a_lookup_is_declared_and_its_topic_indexed_on_the_lookup_fields():
    lookups = "<Lookup>name-by-id;1;json;customers;/name;/id</Lookup>"
    cfg = loads_config(config(EXPERIMENTAL.format(lookups=lookups),
                              CUSTOMERS + ENRICHED.format(field="VALUE_LOOKUP('name-by-id', /cust) AS /n")))
    (lookup,) = cfg.modules.lookups
    assert (lookup.name, lookup.topic, lookup.return_field, lookup.fields) == (
        "name-by-id", "customers", "/name", ("/id",))
    assert cfg.modules.function_libraries == {EXPERIMENTAL_LIBRARY}
    customers = next(t for t in cfg.sow_topics if t.name == "customers")
    assert ("/id",) in customers.hash_indexes


@pytest.mark.parametrize(("lookup", "reason"), [
    ("a;1;json;customers;/name", "every part required"),
    ("a;x;json;customers;/name;/id", "is not a whole number"),
    ("a;2;json;customers;/name;/id", "declares 2 parameter(s) but names 1"),
    ("a;1;jsn;customers;/name;/id", "'jsn'"),
    ("a;1;json;customers;name;/id", "invalid field identifier"),
    ("a;1;json;nowhere;/name;/id", "is not a SOW <Topic>"),
    ("a;1;nvfix;customers;/name;/id", "is not a SOW <Topic>"),
])
def test_a_bad_lookup_is_an_error_at_its_element(lookup, reason):
    text = config(EXPERIMENTAL.format(lookups=f"\n<Lookup>{lookup}</Lookup>"), CUSTOMERS)
    found = errors(text)
    assert [line for line, _ in found] == [line_of(text, "<Lookup>")] and reason in found[0][1], found


@pytest.mark.parametrize(("field", "reason"), [
    ("VALUE_LOOKUP('other', /c) AS /n", "no <Lookup> declares"),
    ("VALUE_LOOKUP('by-id', /c, /d) AS /n", "takes 1 value(s)"),
    ("VALUE_LOOKUP(/name, /c) AS /n", "must be the name of a <Lookup>"),
])
def test_a_bad_value_lookup_call_is_an_error_at_its_topic(field, reason):
    text = config(EXPERIMENTAL.format(lookups="<Lookup>by-id;1;json;customers;/name;/id</Lookup>"),
                  CUSTOMERS + ENRICHED.format(field=field))
    found = errors(text)
    assert len(found) == 1 and reason in found[0][1], found
    assert found[0][0] == line_of(text, "<Name>orders</Name>")


def test_value_lookup_is_refused_in_a_view_and_on_a_transient_topic_recovered_from_the_log():
    lookups = EXPERIMENTAL.format(lookups="<Lookup>by-id;1;json;customers;/name;/id</Lookup>")
    view = """<View><Name>v</Name><MessageType>json</MessageType><UnderlyingTopic>customers</UnderlyingTopic>
      <Projection><Field>VALUE_LOOKUP('by-id', /id) AS /n</Field><Field>/id</Field></Projection>
      <Grouping><Field>/id</Field></Grouping></View>"""
    text = config(lookups, CUSTOMERS + view)
    found = errors(text)
    assert found == [(line_of(text, "<View>"), "<View> 'v': VALUE_LOOKUP cannot be used in a view definition")]
    epoch = ENRICHED.format(field="VALUE_LOOKUP('by-id', /c) AS /n").replace(
        "<RecoveryPoint>now</RecoveryPoint>", "")
    text = config(lookups, CUSTOMERS + epoch)
    ((line, reason),) = errors(text)
    assert line == line_of(text, "<Name>orders</Name>") and "transient topic" in reason and "'epoch'" in reason


def test_the_chaining_key_generator_options():
    sow = """<Topic><Name>Orders</Name><MessageType>json</MessageType><FileName>./sow/%n.sow</FileName>
      <KeyGenerator><Module>key-chaining</Module><Options>
        <Primary>/DocumentNumber</Primary><Key>/ParentDocument</Key><Key>/RelatedDocument</Key>
        <FileName>./sow/Orders.chain</FileName><Validation>true</Validation></Options></KeyGenerator>
    </Topic>
    <Topic><Name>ExternalOrders</Name><MessageType>fix</MessageType><FileName>./sow/%n.sow</FileName>
      <KeyGenerator><Module>key-chaining</Module><Options><Key>/11</Key><Key>/41</Key></Options></KeyGenerator>
    </Topic>"""
    cfg = loads_config(config(CHAINING, sow))
    a, b = (t.key_generator for t in cfg.sow_topics)
    assert a is not None and b is not None
    assert (a.primary, a.secondary, a.file_name, a.validation) == (
        "/DocumentNumber", ("/ParentDocument", "/RelatedDocument"), "./sow/Orders.chain", True)
    assert (b.primary, b.secondary, b.file_name, b.validation) == ("/11", ("/41",), None, False)
    assert cfg.warnings == ()


@pytest.mark.parametrize(("options", "reason"), [
    ("<Key>/a</Key>", "a primary field and at least one secondary field"),
    ("<Primary>/a</Primary>", "a primary field and at least one secondary field"),
    ("<Key>/a</Key><Key>b</Key>", "invalid field identifier"),
    ("<Key>/a</Key><Key>/b</Key><Validation>maybe</Validation>", "<Validation>"),
    ("<Key>/a</Key><Key>/b</Key><Chain>/c</Chain>", "unknown option <Chain>"),
    ("<Primary>/a</Primary><Primary>/b</Primary><Key>/c</Key>", "more than once"),
])
def test_bad_chaining_options_are_errors(options, reason):
    text = config(CHAINING, f"""<Topic><Name>t</Name><MessageType>json</MessageType>
      <Durability>transient</Durability>
      <KeyGenerator><Module>key-chaining</Module><Options>{options}</Options></KeyGenerator></Topic>""")
    found = errors(text)
    assert len(found) == 1 and reason in found[0][1], found


def test_a_key_generator_module_must_be_declared_and_excludes_a_key_domain():
    sow = """<Topic><Name>t</Name><MessageType>json</MessageType><Durability>transient</Durability>
      <KeyGenerator><Module>key-chainin</Module></KeyGenerator></Topic>"""
    ((_, reason),) = errors(config(CHAINING, sow))
    assert "not declared in <Modules>" in reason and "did you mean 'key-chaining'" in reason
    sow = """<Topic><Name>t</Name><MessageType>json</MessageType><Durability>transient</Durability>
      <KeyDomain>d</KeyDomain>
      <KeyGenerator><Module>key-chaining</Module><Options><Key>/a</Key><Key>/b</Key></Options></KeyGenerator></Topic>"""
    ((_, reason),) = errors(config(CHAINING, sow))
    assert "<KeyDomain>" in reason


DEST = """<Replication><Destination><Name>B</Name><Group>B</Group><SyncType>async</SyncType>
  <Topic><Name>.*</Name><MessageType>json</MessageType></Topic>
  <Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:9100</InetAddr>
    <Authenticator><Module>{module}</Module><Options>{options}</Options></Authenticator>
  </Transport></Destination></Replication>
<TransactionLog><JournalDirectory>./j</JournalDirectory>
  <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>"""
EXEC = "<Module><Name>run-proc-authenticator</Name><Library>libamps_exec_authenticator.so</Library></Module>"
MULTI = "<Module><Name>multi-authenticator</Name><Library>libamps_multi_authenticator.so</Library></Module>"


def test_the_exec_authenticator_is_read():
    options = ("<UserName>repl</UserName><Command>/bin/echo --user \"{{AMPS_USER_NAME}}\" x</Command>"
               "<MaxLength>64</MaxLength>")
    cfg = loads_config(config(EXEC, extra=DEST.format(module="run-proc-authenticator", options=options)))
    auth = cfg.replication.destinations[0].transports[0].authenticator
    assert auth is not None
    assert (auth.library, auth.user, auth.command, auth.max_length) == (
        "libamps_exec_authenticator.so", "repl", ("/bin/echo", "--user", "{{AMPS_USER_NAME}}", "x"), 64)
    assert cfg.warnings == ()


def test_the_multi_authenticator_gives_an_ldap_user_and_password_file(tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("secret\n")
    options = f"<LDAP.Username>repl</LDAP.Username><LDAP.PasswordFile>{pw}</LDAP.PasswordFile>"
    cfg = loads_config(config(MULTI, extra=DEST.format(module="multi-authenticator", options=options)))
    auth = cfg.replication.destinations[0].transports[0].authenticator
    assert auth is not None and auth.credentials() == ("repl", "secret")


@pytest.mark.parametrize(("module", "options", "at", "reason"), [
    (EXEC, "<Command>/bin/echo x</Command>", "<Authenticator>", "needs <UserName>"),
    (EXEC, "<UserName>u</UserName>", "<Authenticator>", "needs <Command>"),
    (EXEC, "<UserName>u</UserName><Command>/bin/echo 'x</Command>", "<Command>", "cannot be split"),
    (EXEC, "<UserName>u</UserName><Command>/bin/echo</Command><MaxLength>0</MaxLength>", "<MaxLength>",
     "1 or more"),
    (EXEC, "<UserName>u</UserName><Command>/bin/echo</Command><Timeout>1</Timeout>", "<Timeout>",
     "unknown option <Timeout>"),
    (MULTI, "", "<Authenticator>", "needs a method"),
    (MULTI, "<Kerberos.SPN>AMPS/h</Kerberos.SPN><Kerberos.Keytab>/k</Kerberos.Keytab>", "<Kerberos.SPN>",
     "Kerberos credentials are not implemented"),
    (MULTI, "<LDAP.PasswordFile>/pw</LDAP.PasswordFile>", "<LDAP.PasswordFile>", "needs <LDAP.Username>"),
])
def test_bad_authenticator_options_are_errors_at_their_element(module, options, at, reason):
    name = "run-proc-authenticator" if module == EXEC else "multi-authenticator"
    text = config(module, extra=DEST.format(module=name, options=options))
    found = errors(text)
    assert len(found) == 1 and reason in found[0][1], found
    assert found[0][0] == line_of(text, at)


def test_a_missing_program_is_a_warning():
    options = "<UserName>u</UserName><Command>./no-such-token-program --x</Command>"
    cfg = loads_config(config(EXEC, extra=DEST.format(module="run-proc-authenticator", options=options)))
    assert [w.reason for w in cfg.warnings if "no-such-token-program" in w.reason]
