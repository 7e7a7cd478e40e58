"""``start_timer`` / ``stop_timer`` sent by the official client as raw commands (its
``start_timer()`` / ``stop_timer()`` methods refuse a 5.3.2+ server): acknowledged with
success, as the Go client's integration suite requires, and the connection stays up."""

from __future__ import annotations

import threading

import AMPS


def _acks(client, command) -> list[tuple[str, str, str]]:
    got: list[tuple[str, str, str]] = []
    done = threading.Event()

    def on(m) -> None:
        got.append((m.get_ack_type(), m.get_status(), m.get_reason()))
        if m.get_ack_type() == "completed":
            done.set()

    client.execute_async(command, on)
    assert done.wait(10), got
    return got


def test_start_and_stop_timer_are_acknowledged(client_factory):
    c = client_factory()
    start = AMPS.Command("start_timer").set_topic("amps.timer.1").set_options("interval=500ms")
    start.add_ack_type("processed").add_ack_type("completed")
    assert _acks(c, start) == [("processed", "success", ""), ("completed", "success", "")]
    stop = AMPS.Command("stop_timer").set_topic("amps.timer.1")
    stop.add_ack_type("processed").add_ack_type("completed")
    assert _acks(c, stop) == [("processed", "success", ""), ("completed", "success", "")]
    c.publish("after-timers", "{}")
    c.flush(5000)  # still connected and served
