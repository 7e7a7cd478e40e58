"""The ``Options`` of ``amps-action-on-publish-message``: the subscribe options of the
subscription AMPS makes of the action, checked when the configuration loads (file:line of
the ``Options`` element, the reason)."""

from __future__ import annotations

import pytest

from amps_emulator.config import ConfigError, loads_config
from amps_emulator.config.actions_section import NOT_FOR_ACTIONS, SUBSCRIBE_OPTIONS
from tests.unit.config.test_config_errors import TRANSPORT, errors_of, line_of, wrap

KEYED = ("<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>"
         "<FileName>./%n.sow</FileName></Topic>")
QUEUE = ("<Queue><Name>jobs</Name><MessageType>json</MessageType>"
         "<UnderlyingTopic>jobs-in</UnderlyingTopic></Queue>")
SELF_QUEUE = "<Queue><Name>work</Name><MessageType>json</MessageType></Queue>"


def on_publish(options: str, topic: str = "orders") -> str:
    """An action whose trigger's subscription has ``options``; the ``Options`` on a line of
    its own."""
    return f"""
<Actions><Action>
<On><Module>amps-action-on-publish-message</Module><Options>
<Topic>{topic}</Topic><MessageType>json</MessageType>
<Options>{options}</Options>
</Options></On>
<Do><Module>amps-action-do-nothing</Module></Do>
</Action></Actions>"""


def text_for(options: str, topic: str = "orders") -> str:
    return wrap(TRANSPORT.format(addr="9007", mt_tag="MessageType")
                + "<TransactionLog><JournalDirectory>./j</JournalDirectory>"
                  "<Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>"
                + f"<SOW>{KEYED}{QUEUE}{SELF_QUEUE}</SOW>" + on_publish(options, topic))


@pytest.mark.parametrize("options", [
    "select=[-/,+/id]",
    "conflation=100ms",
    "conflation=auto,timestamp",
    "conflation=none",
    "conflation=1s,conflation_key=[/id],oof,no_sowkey,bookmark,none,max_backlog=5",
    "non_regex_topic, select=[+/a]",
    "",
])
def test_the_subscribe_options_an_action_takes_load(options: str) -> None:
    cfg = loads_config(text_for(options), "a.xml")
    (on,) = cfg.actions[0].on
    assert on.option("Options") == options


@pytest.mark.parametrize(("options", "reason"), [
    ("rate=1000", "'rate' in <Options> applies only to a bookmark replay"),
    ("rate_max_gap=1s", "'rate_max_gap' in <Options> applies only to a bookmark replay"),
    ("live", "'live' in <Options> applies only to a bookmark replay"),
    ("pause", "'pause' in <Options> applies only to a bookmark replay"),
    ("bookmark_not_found=now", "applies only to a bookmark replay"),
    ("replace", "'replace' in <Options> replaces a client's subscription"),
    ("send_keys", "'send_keys' in <Options> is a delta_subscribe option"),
    ("no_empties", "'no_empties' in <Options> is a delta_subscribe option"),
    ("projection=[/a],grouping=[/b]", "'projection' in <Options> is an option of a SOW query"),
    ("conflaton=1s", "'conflaton' in <Options> is not a subscribe option; did you mean 'conflation'?"),
    ("pull", "'pull' in <Options> is not a subscribe option (options: none, bookmark,"),
    ("conflation", "'conflation' in <Options> needs a value"),
    ("select", "'select' in <Options> needs a value"),
    ("conflation=soon", "'conflation' in <Options> must be an interval, auto or none"),
    ("conflation=0s", "'conflation' in <Options> must be a positive interval"),
    ("max_backlog=0", "'max_backlog' in <Options> must be a positive integer"),
    ("select=[/a", "invalid <Options> 'select=[/a': unbalanced brackets"),
])
def test_what_an_action_subscription_cannot_take_is_an_error_at_its_options(
        options: str, reason: str) -> None:
    text = text_for(options)
    errs = errors_of(text, "a.xml")
    assert errs[0].file == "a.xml" and errs[0].line == line_of(text, f"<Options>{options}</Options>")
    assert reason in errs[0].reason, errs


def test_every_accepted_or_refused_name_is_told_apart() -> None:
    assert not set(SUBSCRIBE_OPTIONS) & set(NOT_FOR_ACTIONS)
    for name in NOT_FOR_ACTIONS:
        with pytest.raises(ConfigError, match=f"'{name}' in <Options>"):
            loads_config(text_for(name + ("=1" if name.startswith(("rate", "top", "skip")) else "")))


def test_conflating_a_topic_without_a_sow_key_needs_a_conflation_key() -> None:
    text = text_for("conflation=1s", topic="trades")
    (e,) = errors_of(text, "a.xml")
    assert e.line == line_of(text, "<Options>conflation=1s</Options>")
    assert "conflation on 'trades', which is not a SOW topic, needs a conflation_key" in e.reason
    loads_config(text_for("conflation=1s,conflation_key=[/sym]", topic="trades"))
    loads_config(text_for("conflation=1s", topic="^trad"))  # a regex: each topic's SowKey
    loads_config(text_for("conflation=1s"))  # orders is keyed


@pytest.mark.parametrize(("topic", "says"), [
    ("jobs", "name 'jobs-in' to run the action for the messages that enter the queue"),
    ("^jo", "name 'jobs-in' to run the action for the messages that enter the queue"),
    ("work", "the action runs for every publish to 'work'"),
])
def test_a_topic_naming_a_queue_is_warned_at_the_topic(topic: str, says: str) -> None:
    text = text_for("", topic=topic)
    cfg = loads_config(text, "a.xml")
    got = [w for w in cfg.warnings if "names the queue" in w.reason]
    assert [w.line for w in got] == [line_of(text, f"<Topic>{topic}</Topic>")], cfg.warnings
    assert "leases its messages and never acknowledges them" in got[0].reason
    assert says in got[0].reason
    assert not [w for w in loads_config(text_for("", topic="jobs-in")).warnings
                if "names the queue" in w.reason]
