"""``MessageTypes/MessageType``: declarations read into the codec registry, errors at file:line."""

from __future__ import annotations

import pytest

from amps_emulator.config import ConfigError, loads_config
from amps_emulator.protocol.msgtypes import build_registry
from amps_emulator.protocol.topics import display_name, qualify, split_topic, type_of


def config(types: str) -> str:
    return ("<AMPSConfig>\n<Name>x</Name>\n<MessageTypes>\n" + types
            + "\n</MessageTypes>\n</AMPSConfig>\n")


def test_declarations_build_the_registry() -> None:
    cfg = loads_config(config(
        "<MessageType><Name>pipe-fix</Name><Module>fix</Module>"
        "<FieldSeparator>124</FieldSeparator></MessageType>\n"
        "<MessageType><Name>composite-json-binary</Name><Module>composite-local</Module>"
        "<MessageType>json</MessageType><MessageType>binary</MessageType></MessageType>"))
    reg = build_registry(cfg.message_type_decls)
    assert reg.codec("pipe-fix").decode(b"35=D|55=IBM|") == {"35": "D", "55": "IBM"}
    assert [d.source for d in cfg.message_type_decls] == ["<string>:4", "<string>:5"]
    assert "composite-json-binary" in cfg.message_types


@pytest.mark.parametrize(("decl", "reason"), [
    ("<MessageType><Name>mine</Name><Module>libmine</Module></MessageType>",
     "custom message type modules are shared libraries"),
    ("<MessageType><Name>f</Name><Module>fix</Module><FieldSeparator>|</FieldSeparator>"
     "</MessageType>", "decimal ASCII code"),
    ("<MessageType><Name>c</Name><Module>composite-local</Module>"
     "<MessageType>nosuch</MessageType></MessageType>", "part 'nosuch'"),
    ("<MessageType><Module>fix</Module></MessageType>", "needs a <Name>"),
])
def test_what_cannot_be_served_is_an_error_at_its_element(decl: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        loads_config(config(decl), "types.xml")
    (e,) = info.value.errors
    assert (e.file, e.line) == ("types.xml", 4)
    assert reason in e.reason


def test_topic_keys() -> None:
    assert qualify("orders", "json") == "orders"  # the JSON path is unchanged
    key = qualify("orders", "fix")
    assert key != "orders" and display_name(key) == "orders" and type_of(key) == "fix"
    assert split_topic(key) == ("orders", "fix") and split_topic("orders") == ("orders", "json")
    assert display_name(None) is None
