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


def early(client: Client, cmd: Command) -> None:
    acks = cmd.acks
    if "received" in acks:
        client.ack(cmd, "received")
    if "parsed" in acks:
        client.ack(cmd, "parsed")


def final(client: Client, cmd: Command, processed: bool = True, **counts: Any) -> None:
    acks = cmd.acks
    if processed and "processed" in acks:
        client.ack(cmd, "processed")
    if "completed" in acks:
        client.ack(cmd, "completed", **counts)
    if "stats" in acks:
        client.ack(cmd, "stats", **counts)


def refused(client: Client, cmd: Command, seq: int | None, reason: str,
            txlog: PersistWaiter | None) -> None:
    """A publish (or delete) not stored: its persisted ack is a failure with ``reason`` and
    its ``s`` (released after the persisted acks of the commands before it, so the client's
    publish store discards nothing unsettled), else its first requested ack is."""
    if seq is not None and "persisted" in cmd.acks:
        if txlog is not None:
            txlog.wait_persisted(client, seq, reason=reason)
        else:
            client.persisted_failure(seq, reason)
    elif cmd.acks:
        client.fail(cmd, reason)


def persisted(client: Client, item: Any, reason: str | None) -> None:
    """The persisted ack of one entry of the transaction log's FIFO: a publish's sequence
    number, or the ``flush`` command that waits for everything before it."""
    if type(item) is int:
        if reason is None:
            client.note_persisted(item)
        else:
            client.persisted_failure(item, reason)
    elif not client.closed:
        if reason is None:
            client.emit_persisted()  # the conflated ack of the publishes before the flush first
            client.ack(item, "persisted")
        else:
            client.ack(item, "persisted", "failure", reason)
