"""A plan's deliveries in one call: the compiled ``_speedups.fan_send`` against its pure-Python
twin (``server.delivery.plan.fan_send_py``): the same frames to the same sends, in order, the
same byte count, and an error of a send stops both where it happened."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator.protocol.codec import frame_raw
from amps_emulator.server.delivery.plan import fan_send_py
from tests.support.compiled import compiled
from tests.support.compiled import speedups as _speedups

SENDERS = [pytest.param(fan_send_py, id="pure"),
           pytest.param(_speedups and _speedups.fan_send, id="compiled", marks=compiled)]


class Out:
    def __init__(self, log: list, name: int, fail: bool = False) -> None:
        self.log, self.name, self.fail = log, name, fail

    def send(self, data: bytes) -> None:
        if self.fail:
            raise RuntimeError(f"send {self.name}")
        self.log.append((self.name, data))


@pytest.mark.parametrize("fan_send", SENDERS)
@settings(max_examples=150, deadline=None)
@given(sids=st.lists(st.binary(max_size=20), max_size=8), head=st.binary(max_size=40),
       tail=st.binary(max_size=40), body=st.binary(max_size=500))
def test_each_target_gets_its_frame_in_order(fan_send, sids, head, tail, body) -> None:
    log: list = []
    targets = [(Out(log, i).send, s, i) for i, s in enumerate(sids)]
    total = fan_send(targets, head, tail, body)
    want = [(i, frame_raw(head + s + tail, body)) for i, s in enumerate(sids)]
    assert log == want and total == sum(len(f) for _, f in want)


@pytest.mark.parametrize("fan_send", SENDERS)
def test_a_send_that_fails_stops_the_rest(fan_send) -> None:
    log: list = []
    targets = [(Out(log, 0).send, b"a", 0), (Out(log, 1, fail=True).send, b"b", 1),
               (Out(log, 2).send, b"c", 2)]
    with pytest.raises(RuntimeError, match="send 1"):
        fan_send(targets, b"{", b"}", b"")
    assert [name for name, _ in log] == [0]


@pytest.mark.parametrize("fan_send", SENDERS)
def test_targets_are_send_and_bytes_sids(fan_send) -> None:
    with pytest.raises((TypeError, ValueError)):
        fan_send([(print, "sids", 0)], b"{", b"}", b"")
    with pytest.raises((TypeError, ValueError)):
        fan_send([(print,)], b"{", b"}", b"")
