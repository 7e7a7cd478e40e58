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
    from amps_emulator.server.core.ports import Client, PersistWaiter


def early(conn: Client, cmd: Command) -> None:
    acks = cmd.acks
    if "received" in acks:
        conn.ack(cmd, "received")
    if "parsed" in acks:
        conn.ack(cmd, "parsed")


def final(conn: Client, cmd: Command, processed: bool = True, **counts: Any) -> None:
    acks = cmd.acks
    if processed and "processed" in acks:
        conn.ack(cmd, "processed")
    if "completed" in acks:
        conn.ack(cmd, "completed", **counts)
    if "stats" in acks:
        conn.ack(cmd, "stats", **counts)


def refused(conn: Client, cmd: Command, seq: int | None, reason: str,
            txlog: PersistWaiter | None) -> None:
    """A publish (or delete) not stored: its persisted ack is a failure with ``reason`` and
    its ``s`` (released after the persisted acks of the commands before it, so the client's
    publish store discards nothing unsettled), else its first requested ack is."""
    if seq is not None and "persisted" in cmd.acks:
        if txlog is not None:
            txlog.wait_persisted(conn, seq, reason=reason)
        else:
            conn.persisted_failure(seq, reason)
    elif cmd.acks:
        conn.fail(cmd, reason)
