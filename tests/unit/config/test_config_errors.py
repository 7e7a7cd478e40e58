"""Bad configurations: every error is collected and located (file, line, reason); warnings."""

from __future__ import annotations

import os
import textwrap
import threading
from pathlib import Path

import pytest

from amps_emulator.config import ConfigError, ConfigIssue, load_config, loads_config
from tests.support import paths

FIXTURES = paths.FIXTURES / "config-load"  # configs these tests load (not started)


def xml(body: str) -> str:
    return textwrap.dedent(body).strip() + "\n"


def line_of(text: str, needle: str, nth: int = 1) -> int:
    seen = 0
    for n, line in enumerate(text.splitlines(), 1):
        if needle in line:
            seen += 1
            if seen == nth:
                return n
    raise AssertionError(f"{needle!r} not found")


def errors_of(text: str, filename: str = "bad.xml", **kw: object) -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as info:
        loads_config(text, filename, **kw)  # type: ignore[arg-type]
    return info.value.errors


def only_error(text: str, **kw: object) -> ConfigIssue:
    errs = errors_of(text, **kw)
    assert len(errs) == 1, errs
    return errs[0]


def wrap(inner: str, name: str = "<Name>x</Name>") -> str:
    return xml(f"""
        <AMPSConfig>
            {name}
        {textwrap.indent(textwrap.dedent(inner).strip(), '    ')}
        </AMPSConfig>
    """)


TRANSPORT = """
<Transports>
    <Transport>
        <Name>json-tcp</Name>
        <Type>tcp</Type>
        <InetAddr>{addr}</InetAddr>
        <{mt_tag}>json</{mt_tag}>
        <Protocol>amps</Protocol>
    </Transport>
</Transports>
"""


def test_typo_in_known_section_is_located_with_suggestion() -> None:
    text = wrap(TRANSPORT.format(addr="9007", mt_tag="MesageType"))
    e = only_error(text)
    assert e.file == "bad.xml"
    assert e.line == line_of(text, "<MesageType>")
    assert "unknown element <MesageType> in <Transport> 'json-tcp'" in e.reason
    assert "did you mean <MessageType>?" in e.reason


def test_element_names_are_case_sensitive() -> None:
    text = wrap(TRANSPORT.format(addr="9007", mt_tag="messageType"))
    e = only_error(text)
    assert e.line == line_of(text, "<messageType>")
    assert "case-sensitive" in e.reason and "<MessageType>" in e.reason


def test_bad_inet_addr() -> None:
    text = wrap(TRANSPORT.format(addr="localhost:70000", mt_tag="MessageType"))
    e = only_error(text)
    assert e.line == line_of(text, "<InetAddr>")
    assert "invalid <InetAddr>" in e.reason and "70000 out of range" in e.reason


@pytest.mark.parametrize(
    ("element", "needle"),
    [
        ("<LeasePeriod>30x</LeasePeriod>", "unknown unit 'x'"),
        ("<LeasePeriod>soon</LeasePeriod>", "invalid duration"),
        ("<MaxBacklog>10q</MaxBacklog>", "unknown unit 'q'"),
        ("<Semantics>exactly-once</Semantics>", "expected one of: at-least-once, at-most-once"),
        ("<FairnessModel>round-robbin</FairnessModel>", "did you mean 'round-robin'"),
        ("<Leasing>loose</Leasing>", "strict, sublet"),
        ("<MaxPerSubscriptionBacklog>0</MaxPerSubscriptionBacklog>", "greater than zero"),
        ("<RecoveryPoint>yesterday</RecoveryPoint>", "invalid recovery point"),
        ("<FileBackedMetadata>perhaps</FileBackedMetadata>", "enabled/disabled"),
        ("<MessageType>jsn</MessageType>", "did you mean 'json'"),
        ("<UnderlyingTopic>orders(</UnderlyingTopic>", "invalid regular expression"),
    ],
)
def test_bad_queue_values(element: str, needle: str) -> None:
    tag = element[1:element.index(">")]
    mt = "" if tag == "MessageType" else "<MessageType>json</MessageType>"
    text = wrap(f"""
        <SOW>
            <Queue>
                <Name>q</Name>
                {mt}
                {element}
            </Queue>
        </SOW>
    """)
    e = only_error(text)
    assert e.line == line_of(text, element)
    assert f"invalid <{tag}> in <Queue> 'q'" in e.reason
    assert needle in e.reason


@pytest.mark.parametrize(
    ("inner", "needle", "reason"),
    [
        ("<SOW><Topic><Name>t</Name><MessageType>json</MessageType><FileName>s</FileName>"
         "<Expiration>10 parsecs</Expiration></Topic></SOW>", "<Expiration>", "expected enabled, disabled or a duration"),
        ("<TransactionLog><JournalDirectory>j</JournalDirectory><JournalSize>1QB</JournalSize></TransactionLog>",
         "<JournalSize>", "unknown unit"),
        ("<TransactionLog><JournalDirectory>j</JournalDirectory><FlushInterval>5s</FlushInterval></TransactionLog>",
         "<FlushInterval>", "outside the allowed range"),
        ("<TransactionLog><JournalDirectory>j</JournalDirectory><Durability>fsync</Durability></TransactionLog>",
         "<Durability>", "group, strict, memory"),
        ("<Logging><Target><Protocol>kafka</Protocol></Target></Logging>", "<Protocol>", "stdout, stderr, file"),
        ("<Logging><Target><Protocol>stdout</Protocol><Level>verbose</Level></Target></Logging>", "<Level>",
         "expected one of"),
        ("<Admin><InetAddr>8085</InetAddr><Interval>100ms</Interval></Admin>", "<Interval>", "minimum of 1s"),
        ("<SOW><Topic><Name>t</Name><MessageType>json</MessageType><FileName>s</FileName>"
         "<History><Window>0s</Window><Granularity>1s</Granularity></History></Topic></SOW>",
         "<Window>", "greater than zero"),
        ("<SOW><Topic><Name>t</Name><MessageType>json</MessageType><FileName>s</FileName>"
         "<History><Window>1d</Window><Granularity>soon</Granularity></History></Topic></SOW>",
         "<Granularity>", "invalid duration"),
        ("<SOW><Topic><Name>t</Name><MessageType>json</MessageType><FileName>s</FileName>"
         "<History><Window>1d</Window></History></Topic></SOW>",
         "<History>", "missing required element <Granularity>"),
        ("<SOW><Topic><Name>t</Name><MessageType>json</MessageType><FileName>s</FileName>"
         "<History><Window>1d</Window><Granularity>1s</Granularity><Depth>3</Depth></History>"
         "</Topic></SOW>", "<Depth>", "<Depth>"),
        ("<SOW><ConflatedTopic><Name>c</Name><MessageType>json</MessageType><UnderlyingTopic>x</UnderlyingTopic>"
         "<Interval>10ms</Interval></ConflatedTopic></SOW>", "<Interval>", "minimum of 100ms"),
    ],
)
def test_bad_values_in_other_sections(inner: str, needle: str, reason: str) -> None:
    text = wrap(inner)
    errs = errors_of(text)
    assert errs[0].line == line_of(text, needle)
    assert reason in errs[0].reason


def test_missing_required_name_is_reported_at_the_parent() -> None:
    text = wrap("""
        <Transports>
            <Transport>
                <Type>tcp</Type>
                <InetAddr>9007</InetAddr>
            </Transport>
        </Transports>
        <SOW>
            <Queue>
                <MessageType>json</MessageType>
            </Queue>
        </SOW>
    """)
    errs = errors_of(text)
    assert [(e.line, e.reason) for e in errs] == [
        (line_of(text, "<Transport>"), "<Transport> is missing required element <Name>"),
        (line_of(text, "<Queue>"), "<Queue> is missing required element <Name>"),
    ]


def test_missing_instance_name() -> None:
    e = only_error("<AMPSConfig>\n  <Description>d</Description>\n</AMPSConfig>\n")
    assert (e.line, e.reason) == (1, "<AMPSConfig> is missing required element <Name>")


def test_unset_environment_variable_is_named() -> None:
    text = wrap(TRANSPORT.format(addr="${AMPS_TEST_PORT_UNSET}", mt_tag="MessageType"))
    e = only_error(text, env={})
    assert e.line == line_of(text, "<InetAddr>")
    assert "environment variable AMPS_TEST_PORT_UNSET is not set" in e.reason


def test_unset_variable_inside_an_ignored_element_is_not_an_error() -> None:
    cfg = loads_config(wrap("""
        <Transports>
            <Transport>
                <Name>unix</Name><Type>amps-unix</Type><InetAddr>9443</InetAddr>
                <FileName>${NO_SUCH_SOCKET_DIR}/amps.sock</FileName>
            </Transport>
        </Transports>
        <Externals><Options><Secret>${NO_SUCH_SECRET}</Secret></Options></Externals>
    """), env={})
    # the "no supported transport" warning is anchored at <Transports>, so it comes first
    # (<Authentication> used to be the ignored element here; it is read since issue 22)
    assert [w.reason.split(" ")[0] for w in cfg.warnings] == ["no", "<Transport>", "<Externals>"]
    assert cfg.transports == ()


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("<AMPSConfig>\n  <Name>x</Name>\n  <SOW>\n  </Sow>\n</AMPSConfig>\n", 4, "mismatched tag"),
        ("<AMPSConfig>\n  <Name>x & y</Name>\n</AMPSConfig>\n", 2, "not well-formed"),
        ("<AMPSConfig>\n  <Name>x</Name>\n", 3, "no element found"),
        ("", 1, "no element found"),
        ("<AMPSConfig><Name>x</Name></AMPSConfig>\n<Extra/>\n", 2, "junk after document element"),
    ],
)
def test_malformed_xml(text: str, line: int, reason: str) -> None:
    e = only_error(text)
    assert (e.file, e.line) == ("bad.xml", line)
    assert e.reason.startswith("malformed XML") and reason in e.reason


def test_dtd_and_entity_expansion_are_refused() -> None:
    bomb = xml("""
        <?xml version="1.0"?>
        <!DOCTYPE lolz [
          <!ENTITY lol "lol">
          <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
        ]>
        <AMPSConfig><Name>&lol2;</Name></AMPSConfig>
    """)
    e = only_error(bomb)
    assert e.line == 2 and "DOCTYPE" in e.reason
    ext = '<?xml version="1.0"?>\n<!DOCTYPE a SYSTEM "file:///etc/passwd">\n<AMPSConfig><Name>&x;</Name></AMPSConfig>\n'
    assert "DOCTYPE" in only_error(ext).reason


def test_wrong_root_element() -> None:
    e = only_error("<Config>\n<Name>x</Name>\n</Config>\n")
    assert (e.line, e.reason) == (1, "the root element must be <AMPSConfig>, not <Config>")


def test_all_errors_are_collected_in_document_order() -> None:
    text = wrap("""
        <Transports>
            <Transport>
                <Name>a</Name><Type>tpc</Type><InetAddr>9007</InetAddr>
            </Transport>
            <Transport>
                <Name>b</Name><Type>tcp</Type><InetAddr>abc</InetAddr>
            </Transport>
        </Transports>
        <TransactionLog>
            <JournalDirectory>j</JournalDirectory>
            <JournalSize>big</JournalSize>
        </TransactionLog>
        <SOW>
            <Topic><Name>t</Name><MessageType>json</MessageType><FileName>f</FileName><Kye>/id</Kye></Topic>
        </SOW>
        <Actions>
            <Action>
                <On><Module>amps-action-on-startup</Module></On>
                <Do><Module>amps-action-do-publish-mesage</Module></Do>
            </Action>
        </Actions>
    """, name="<Name>bad/name</Name>")
    errs = errors_of(text)
    assert [e.line for e in errs] == [
        line_of(text, "bad/name"),
        line_of(text, "<Type>tpc"),
        line_of(text, "<InetAddr>abc"),
        line_of(text, "<JournalSize>"),
        line_of(text, "<Kye>"),
        line_of(text, "amps-action-do-publish-mesage"),
    ]
    assert "invalid instance name" in errs[0].reason
    assert "did you mean 'tcp'" in errs[1].reason
    assert "did you mean <Key>" in errs[4].reason
    assert "did you mean 'amps-action-do-publish-message'" in errs[5].reason
    # str() lists every error, one "file:line: reason" per line
    with pytest.raises(ConfigError) as info:
        loads_config(text, "bad.xml")
    lines = str(info.value).splitlines()
    assert lines == [f"bad.xml:{e.line}: {e.reason}" for e in errs]


def test_errors_in_included_file_carry_its_name_and_line(tmp_path: Path) -> None:
    (tmp_path / "main.xml").write_text(xml("""
        <AMPSConfig>
            <Name>m</Name>
            <SOW>
                <Include>queues.xml</Include>
                <Include>broken.xml</Include>
            </SOW>
            <Logging>
                <Include>missing.xml</Include>
            </Logging>
        </AMPSConfig>
    """))
    (tmp_path / "queues.xml").write_text(
        "<Queue>\n  <Name>q</Name>\n  <MessageType>json</MessageType>\n  <LeasePeriod>1fortnight</LeasePeriod>\n</Queue>\n")
    (tmp_path / "broken.xml").write_text("<Queue>\n  <Name>q2</Name>\n</Queue\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "main.xml")
    errs = info.value.errors
    assert [(Path(e.file).name, e.line) for e in errs] == [("queues.xml", 4), ("broken.xml", 4), ("main.xml", 8)]
    assert "invalid <LeasePeriod>" in errs[0].reason
    assert errs[1].reason.startswith("malformed XML")
    assert "cannot read included file 'missing.xml'" in errs[2].reason


def test_include_cycle(tmp_path: Path) -> None:
    (tmp_path / "a.xml").write_text("<AMPSConfig>\n<Name>a</Name>\n<Include>b.xml</Include>\n</AMPSConfig>\n")
    (tmp_path / "b.xml").write_text("<Description>d</Description>\n<Include>a.xml</Include>\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "a.xml")
    (e,) = info.value.errors
    assert (Path(e.file).name, e.line) == ("b.xml", 2)
    assert e.reason == "include cycle: a.xml -> b.xml -> a.xml"


def test_a_broken_topic_does_not_cascade_into_its_view() -> None:
    text = wrap("""
        <SOW>
            <Topic><Name>t</Name><MessageType>json</MessageType><FileName>f</FileName>
                <Expiration>never</Expiration></Topic>
            <View><Name>v</Name><MessageType>json</MessageType><UnderlyingTopic>t</UnderlyingTopic>
                <Projection><Field>/a</Field></Projection><Grouping><Field>/a</Field></Grouping></View>
        </SOW>
    """)
    e = only_error(text)
    assert e.line == line_of(text, "<Expiration>never")


def test_unreadable_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.xml")
    (e,) = info.value.errors
    assert e.file.endswith("nope.xml") and e.line == 0 and "cannot read" in e.reason


@pytest.mark.parametrize("name, why", [("nope.xml", "No such file or directory"),
                                       (".", "Is a directory")])
def test_a_file_that_cannot_be_read_is_reported_without_a_line_number(
        tmp_path: Path, name: str, why: str) -> None:
    path = tmp_path / name
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: cannot read configuration file: {why}"


def test_an_issue_inside_a_file_keeps_its_line_number() -> None:
    assert str(ConfigIssue("amps.xml", 7, "bad")) == "amps.xml:7: bad"
    assert str(ConfigIssue("amps.xml", 0, "bad")) == "amps.xml: bad"


def test_duplicates_and_conflicts() -> None:
    text = wrap("""
        <Transports>
            <Transport><Name>z</Name><Type>tcp</Type><InetAddr>9001</InetAddr>
                <InetAddr>9008</InetAddr></Transport>
            <Transport><Name>a</Name><Type>tcp</Type><InetAddr>9007</InetAddr></Transport>
            <Transport><Name>a</Name><Type>tcp</Type><InetAddr>9009</InetAddr></Transport>
            <Transport><Name>c</Name><Type>tcp</Type><InetAddr>127.0.0.1:9007</InetAddr></Transport>
        </Transports>
        <SOW>
            <Topic><Name>t</Name><Topic>t</Topic><MessageType>json</MessageType><FileName>f</FileName></Topic>
            <Topic><Name>u</Name><MessageType>json</MessageType><FileName>f</FileName></Topic>
            <Queue><Name>u</Name><MessageType>json</MessageType></Queue>
        </SOW>
    """)
    errs = errors_of(text)
    assert [e.line for e in errs] == [
        line_of(text, "<InetAddr>9008"),
        line_of(text, "<InetAddr>9009") ,
        line_of(text, "127.0.0.1:9007"),
        line_of(text, "<Topic>t</Topic>"),
        line_of(text, "<Queue><Name>u"),
    ]
    assert "duplicate <InetAddr>" in errs[0].reason
    assert "duplicate transport name 'a'" in errs[1].reason
    assert "conflicts with transport 'a'" in errs[2].reason
    assert "its synonym <Name>" in errs[3].reason
    assert "already defined as <Topic>" in errs[4].reason


@pytest.mark.parametrize(
    ("queue", "needle", "reason"),
    [
        ("<Queue><Name>q</Name><MessageType>json</MessageType><Priority>/p</Priority>"
         "<BarrierExpression>/b = 1</BarrierExpression></Queue>", "<Queue>", "cannot be used together"),
        ("<Queue><Name>q</Name><MessageType>json</MessageType><Priority>/p</Priority>"
         "<TargetQueueDepth>5000</TargetQueueDepth></Queue>", "<Queue>", "<TargetQueueDepth> cannot be used"),
        ("<Queue><Name>q</Name><MessageType>json</MessageType><Semantics>at-most-once</Semantics>"
         "<FairnessModel>fast</FairnessModel></Queue>", "<Queue>", "only support the round-robin"),
        ("<Queue><Name>q</Name><MessageType>json</MessageType><UnderlyingTopic>^A|^B</UnderlyingTopic></Queue>",
         "<Queue>", "needs a <DefaultPublishTarget>"),
        ("<Queue><Name>q</Name><MessageType>json</MessageType><UnderlyingTopic>^A$|^B$</UnderlyingTopic>"
         "<DefaultPublishTarget>C</DefaultPublishTarget></Queue>", "<Queue>", "is not one of the topics"),
        ("<GroupLocalQueue><Name>q</Name><MessageType>json</MessageType></GroupLocalQueue>", "<GroupLocalQueue>",
         "missing required element <InitialOwner>"),
        ("<LocalQueue><Name>q</Name><MessageType>json</MessageType><InitialOwner>a</InitialOwner></LocalQueue>",
         "<LocalQueue>", "only valid in a <GroupLocalQueue>"),
        ("<Topic><Name>t</Name><MessageType>json</MessageType><FileName>f</FileName>"
         "<KeyDomain>d</KeyDomain></Topic>", "<Topic>", "needs at least one <Key>"),
        ("<View><Name>v</Name><MessageType>json</MessageType><UnderlyingTopic>nope</UnderlyingTopic>"
         "<Projection><Field>/a</Field></Projection><Grouping><Field>/a</Field></Grouping></View>",
         "<View>", "not a Topic, Queue, View or ConflatedTopic defined earlier"),
        ("<View><Name>v</Name><MessageType>json</MessageType><UnderlyingTopic>x</UnderlyingTopic>"
         "<Projection></Projection><Grouping><Field>/a</Field></Grouping></View>",
         "<View>", "must contain at least one <Field>"),
        ("<ConflatedTopic><Name>c</Name><MessageType>json</MessageType></ConflatedTopic>",
         "<ConflatedTopic>", "missing required element <UnderlyingTopic>"),
    ],
)
def test_cross_field_rules(queue: str, needle: str, reason: str) -> None:
    text = wrap(f"<SOW>\n{queue}\n</SOW>")
    e = only_error(text)
    assert e.line == line_of(text, needle)
    assert reason in e.reason


@pytest.mark.parametrize(
    ("steps", "reason"),
    [
        ("<On><Module>amps-action-do-shutdown</Module></On><Do><Module>amps-action-do-shutdown</Module></Do>",
         "belongs in <Do>, not in <On>"),
        ("<On><Module>amps-action-on-sow-expire-message</Module><Options><Topic>Jobs</Topic></Options></On>"
         "<Do><Module>amps-action-do-shutdown</Module></Do>", "missing required option(s): <MessageType>"),
        ("<On><Module>amps-action-on-startup</Module></On><Do><Module>amps-action-do-remove-journal</Module>"
         "<Options><Age>a week</Age></Options></Do>", "invalid option <Age>"),
        ("<On><Module>amps-action-on-schedule</Module><Options><Every>sometimes</Every></Options></On>"
         "<Do><Module>amps-action-do-shutdown</Module></Do>", "invalid option <Every>"),
        ("<On><Module>amps-action-on-startup</Module></On>", "needs at least one <Do>"),
        ("<On><Module>amps-action-on-startup</Module></On><Then><Module>x</Module></Then>"
         "<Do><Module>amps-action-do-shutdown</Module></Do>", "unknown element <Then>"),
    ],
)
def test_action_errors(steps: str, reason: str) -> None:
    text = wrap(f"<Actions>\n<Action>\n{steps}\n</Action>\n</Actions>")
    errs = errors_of(text)
    assert [reason in e.reason for e in errs] == [True], errs
    # located at the offending step (all steps are on one line here) or at the <Action>
    assert errs[0].line in (line_of(text, "<Action>"), line_of(text, steps[:30]))


# --- warnings ----------------------------------------------------------------------------

def test_production_config_warns_once_per_unsupported_element(tmp_path) -> None:
    from tests.support.tls import self_signed

    self_signed(tmp_path)  # the tcps transport is served, so its files must load
    cfg = load_config(FIXTURES / "production.xml",
                      env={"AMPS_INSTANCE": "hub", "AMPS_PORT": "9007", "AMPS_DATA": "/d",
                           "AMPS_CERT_DIR": str(tmp_path)})
    text = (FIXTURES / "production.xml").read_text()
    got = [(w.line, w.reason.split(" ")[0]) for w in cfg.warnings]
    assert got == [  # (MessageMemoryLimit is read: slow client offlining)
        (line_of(text, "<EarlyTerminationOptimization>"), "<EarlyTerminationOptimization>"),
        # (no <WWWAuthenticate>: the instance's <Authentication> secures Admin, which sends it)
        (line_of(text, "<O_DIRECT>"), "<O_DIRECT>"),
        (line_of(text, "<SlabSize>"), "<SlabSize>"),
        # the replication transport and <Replication> are read and connected: no warning
    ]
    assert all(w.file.endswith("production.xml") for w in cfg.warnings)
    quotes = next(t for t in cfg.sow_topics if t.name == "quotes")
    assert quotes.history == (7 * 86400.0, 15 * 60.0)


_ADMIN = "<Admin><InetAddr>8085</InetAddr>{inner}<WWWAuthenticate>Basic realm=\"x\"</WWWAuthenticate></Admin>"
_AUTH = "<Authentication><Module>amps-default-authentication-module</Module></Authentication>"
_ENT = "<Entitlement><Module>amps-default-entitlement-module</Module></Entitlement>"


@pytest.mark.parametrize("instance, admin, warned", [
    ("", "", True),  # nothing secures Admin: the challenge is never sent
    (_AUTH, "", False),  # the instance's blocks apply to Admin (its amps-admin transport)
    (_ENT, "", False),
    ("", _AUTH, False),  # Admin's own
    ("", _ENT + _AUTH, False),
])
def test_www_authenticate_is_warned_only_where_admin_asks_no_one(instance, admin, warned):
    text = wrap(instance + _ADMIN.format(inner=admin) + TRANSPORT.format(addr="9007", mt_tag="MessageType"))
    cfg = loads_config(text)
    got = [w for w in cfg.warnings if w.reason.startswith("<WWWAuthenticate>")]
    assert [w.line for w in got] == ([line_of(text, "<WWWAuthenticate>")] if warned else []), got
    assert cfg.security is None or cfg.security.admin_secured is not warned


def test_a_module_of_a_library_the_emulator_does_not_implement_is_warned_at_its_element() -> None:
    element = "<Modules><Module><Name>m</Name><Library>libm.so</Library><Bogus/></Module></Modules>"
    text = wrap(element + "\n" + TRANSPORT.format(addr="9007", mt_tag="MessageType"))
    cfg = loads_config(text, "w.xml")
    assert cfg.warnings == (ConfigIssue(
        "w.xml", line_of(text, element), "<Module> 'm': library 'libm.so' is not one the emulator "
                                         "implements; the module is ignored"),)


@pytest.mark.parametrize("element", ["<ProcessName>amps-x</ProcessName>"])
def test_each_unsupported_top_level_element_warns_exactly_once(element: str) -> None:
    text = wrap(element + "\n" + TRANSPORT.format(addr="9007", mt_tag="MessageType"))
    cfg = loads_config(text, "w.xml")
    tag = element[1:element.index(">")]
    assert cfg.warnings == (ConfigIssue(
        "w.xml", line_of(text, element), f"<{tag}> in <AMPSConfig> is not supported by the emulator and is ignored"),)


def test_minidump_settings_are_read_and_checked() -> None:
    text = wrap("<MiniDumpDirectory>/var/tmp/dumps</MiniDumpDirectory>\n"
                "<MiniDumpFileMask>0644</MiniDumpFileMask>\n"
                + TRANSPORT.format(addr="9007", mt_tag="MessageType"))
    cfg = loads_config(text, "m.xml")
    assert (cfg.minidump_directory, cfg.minidump_file_mask, cfg.warnings) == \
        ("/var/tmp/dumps", 0o644, ())
    bad = wrap("<MiniDumpFileMask>0964</MiniDumpFileMask>\n"
               + TRANSPORT.format(addr="9007", mt_tag="MessageType"))
    with pytest.raises(ConfigError, match="MiniDumpFileMask.*not an octal permissions mask"):
        loads_config(bad, "m.xml")


def test_unsupported_sow_topic_options_warn_and_topic_still_loads() -> None:
    text = wrap("""
        <Modules><Module><Name>key-generator</Name><Library>libmy_keys.so</Library></Module></Modules>
        <SOW>
            <Topic>
                <Name>t</Name><MessageType>json</MessageType><FileName>./%n.sow</FileName><Key>/id</Key>
                <SlabSize>1MB</SlabSize>
                <KeyGenerator><Module>key-generator</Module></KeyGenerator>
            </Topic>
        </SOW>
    """)
    cfg = loads_config(text)
    assert [w.reason.split(" ")[0] for w in cfg.warnings] == ["<Module>", "<SlabSize>", "<KeyGenerator>:",
                                                              "no"]
    assert cfg.sow_topics[0].keys == ("/id",)


def test_custom_action_module_warns_and_drops_the_action() -> None:
    text = wrap("""
        <Actions>
            <Action>
                <On><Module>my-company-trigger</Module></On>
                <Do><Module>amps-action-do-shutdown</Module></Do>
            </Action>
        </Actions>
    """ + TRANSPORT.format(addr="9007", mt_tag="MessageType"))
    cfg = loads_config(text)
    assert cfg.actions == ()
    (w,) = cfg.warnings
    assert w.line == line_of(text, "<Action>") and "'my-company-trigger'" in w.reason


def test_queue_not_recorded_in_transaction_log_warns() -> None:
    text = wrap("<SOW><Queue><Name>q</Name><MessageType>json</MessageType></Queue></SOW>\n"
                "<TransactionLog><JournalDirectory>./j</JournalDirectory></TransactionLog>\n"
                + TRANSPORT.format(addr="9007", mt_tag="MessageType"))
    cfg = loads_config(text)
    (w,) = cfg.warnings
    assert "not recorded in the <TransactionLog>" in w.reason


def test_a_device_that_never_ends_is_refused_after_the_limit(tmp_path: Path, monkeypatch) -> None:
    """/dev/zero as the config, or as a file it includes, is read up to the limit and refused,
    never read until the memory is full."""
    from amps_emulator.config import xmlload

    monkeypatch.setattr(xmlload, "MAX_FILE_BYTES", 1 << 20)
    with pytest.raises(ConfigError) as info:
        load_config("/dev/zero")
    assert str(info.value) == "/dev/zero: cannot read configuration file: larger than 1048576 bytes"
    top = tmp_path / "top.xml"
    top.write_text("<AMPSConfig>\n<Name>a</Name>\n<Include>/dev/zero</Include>\n</AMPSConfig>\n")
    with pytest.raises(ConfigError) as info:
        load_config(top)
    assert "larger than 1048576 bytes" in str(info.value)


def test_a_config_read_from_a_pipe_loads(tmp_path: Path) -> None:
    """What a shell's process substitution gives: ``amps-emulator <(envsubst < amps.xml)``."""
    fifo = tmp_path / "amps.xml"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_text,
                              args=("<AMPSConfig><Name>piped</Name></AMPSConfig>",))
    writer.start()
    try:
        assert load_config(fifo).name == "piped"
    finally:
        writer.join(10)


def test_a_config_file_larger_than_the_limit_is_refused(tmp_path: Path, monkeypatch) -> None:
    from amps_emulator.config import xmlload

    monkeypatch.setattr(xmlload, "MAX_FILE_BYTES", 1000)
    path = tmp_path / "amps.xml"
    path.write_text("<AMPSConfig><Name>a</Name>" + " " * 2000 + "</AMPSConfig>")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (f"{path}: cannot read configuration file: "
                               "larger than 1000 bytes")
