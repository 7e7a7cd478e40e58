"""``start_timer`` / ``stop_timer``: known commands, acknowledged as asked (successfully), with
no timer (AMPS dropped the timers in 5.3.2.0); through the same dispatch table the server uses."""

from __future__ import annotations

from typing import Any

import pytest

from amps_emulator.protocol.command import decode_header, finish_command
from amps_emulator.server.handlers.table import HANDLERS


class _Client:
    def __init__(self) -> None:
        self.acks: list[tuple[str | None, str, str, str | None, dict[str, Any]]] = []

    def ack(self, cmd: Any, ack_type: str, status: str = "success",
            reason: str | None = None, **extra: Any) -> None:
        self.acks.append((cmd.cid, ack_type, status, reason, extra))

    def describe(self) -> str:
        return "client timer-test [test]"


@pytest.mark.parametrize("name", ["start_timer", "stop_timer"])
def test_each_requested_ack_is_a_success_in_order(name):
    cmd = finish_command(decode_header(
        b'{"c":"%s","cid":"t1","t":"timer-1","o":"interval=500ms",'
        b'"a":"completed,processed,received"}' % name.encode()), b"")
    client = _Client()
    HANDLERS[cmd.command](None, client, cmd)
    assert client.acks == [("t1", "received", "success", None, {}),
                           ("t1", "processed", "success", None, {}),
                           ("t1", "completed", "success", None, {})]


def test_no_ack_asked_none_sent():
    cmd = finish_command(decode_header(b'{"c":"start_timer"}'), b"")
    client = _Client()
    HANDLERS["start_timer"](None, client, cmd)
    assert client.acks == []
