"""Sending the acks a command asked for (``a``), in the order AMPS sends them.

``received``/``parsed`` go first (:func:`early`); then the command's work; then
``processed``, ``completed`` and ``stats`` (:func:`final`), each only if requested. A
command whose ``processed`` ack must precede its output (a query) sends that one itself and
calls :func:`final` with ``processed=False``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.connection import Connection


def early(conn: "Connection", cmd: "Command") -> None:
    acks = cmd.acks
    if "received" in acks:
        conn.ack(cmd, "received")
    if "parsed" in acks:
        conn.ack(cmd, "parsed")


def final(conn: "Connection", cmd: "Command", processed: bool = True, **counts: Any) -> None:
    acks = cmd.acks
    if processed and "processed" in acks:
        conn.ack(cmd, "processed")
    if "completed" in acks:
        conn.ack(cmd, "completed", **counts)
    if "stats" in acks:
        conn.ack(cmd, "stats", **counts)
