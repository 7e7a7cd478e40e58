"""The session commands: ``logon``, ``heartbeat``, ``flush`` and the timer commands.

Each handler gets ``(broker, client, cmd)``, does the work, and sends exactly the acks the
command asked for (``a``): ``received``/``parsed`` first, then ``processed``, then
``completed``/``stats``. A :class:`protocol.reasons.CommandError` raised here becomes a
failure ack with the AMPS reason string."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from amps_emulator.protocol import reasons
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.server.core.amps_names import SESSION_LOGON, amps_id
from amps_emulator.server.delivery.acks import early as acks_early
from amps_emulator.server.delivery.acks import final as acks_final

if TYPE_CHECKING:
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.core.ports import Client
    from amps_emulator.server.messaging.broker import Broker

log = logging.getLogger("amps_emulator.commands")

# -- logon / heartbeat / flush -------------------------------------------------------------

def logon(broker: Broker, client: Client, cmd: Command) -> None:
    acks_early(client, cmd)
    if client.logged_on:
        # AMPS takes one logon per connection (the first command, or the implicit logon
        # of another first command); the identity it gave stays for the connection's life
        raise CommandError(reasons.DUPLICATE_LOGON,
                           f"already logged on as {client.client_name!r}")
    fixed = client.listener.message_type
    mt = cmd.message_type or fixed or "json"
    if fixed is not None and mt != fixed:  # a transport of one type serves only that type
        raise CommandError(reasons.INVALID_MESSAGE_TYPE, mt)
    if mt not in broker.message_types:
        raise CommandError(reasons.INVALID_MESSAGE_TYPE, mt)
    client.message_type = mt
    name = cmd.client_name or f"anonymous-{client.conn_id}"
    previous = broker.by_name.get(name)
    session = client.session
    if previous is not None and previous is not client and session is not None \
            and previous.session is not None and not previous.session.may_take_over(session.user_id):
        raise CommandError(reasons.NAME_IN_USE, f"client name {name!r} is logged on as another user")
    if previous is not None and previous is not client:
        # AMPS treats a second logon with the same name as a reconnect: the older
        # connection is disconnected and the new one takes the name over.
        previous.close(f"{reasons.DISCONNECT_NAME_IN_USE}: a logon from {client.peer} "
                       f"took over the client name {name!r}")  # a WARNING with both peers
        broker.drop_client(previous)
    if client.client_name is not None and client.client_name != name:
        if broker.by_name.get(client.client_name) is client:
            del broker.by_name[client.client_name]
    client.client_name = name
    client.user_id = session.user_id if session is not None else cmd.user_id
    client.client_version = cmd.version
    client.correlation_id = cmd.correlation_id
    client.logged_on = True
    broker.by_name[name] = client
    log.info("AMPS client session logon for: %s", name, extra=amps_id(SESSION_LOGON))
    acks = cmd.acks
    extra: dict[str, Any] = {"version": broker.server_version, "client_name": name}
    txlog = broker.txlog
    if txlog is not None:
        journal = txlog.journal
        if name not in broker.client_seqs:
            broker.client_seqs[name] = journal.last_seq_for_client(name, persisted=False)
        extra["s"] = journal.last_seq_for_client(name)
        pid = journal.publisher_id(name)
        extra["bookmark"] = f"{pid}|{journal.last_sequence_for_publisher(pid)}|"
    elif name in broker.client_seqs:
        extra["s"] = broker.client_seqs[name]
    if cmd.user_id is not None:
        extra["user_id"] = cmd.user_id
    for ack_type in ("processed", "completed"):
        if ack_type in acks:
            client.ack(cmd, ack_type, **extra)
    for listener in broker.logon_callbacks:
        listener(client)


def heartbeat(broker: Broker, client: Client, cmd: Command) -> None:
    opts = (cmd.options or "").split(",")
    if opts and opts[0] == "start":
        try:
            interval = float(opts[1]) if len(opts) > 1 and opts[1] else 0.0
        except ValueError:
            raise CommandError(reasons.INVALID_OPTIONS, cmd.options or "") from None
        if interval <= 0:
            raise CommandError(reasons.INVALID_OPTIONS, cmd.options or "")
        client.start_heartbeat(interval)
    elif opts and opts[0] == "stop":
        client.stop_heartbeat()
    # "beat": any inbound traffic already refreshed the timer.
    acks_early(client, cmd)
    acks_final(client, cmd)


def timer(broker: Broker, client: Client, cmd: Command) -> None:
    """``start_timer`` / ``stop_timer``: commands AMPS dropped in 5.3.2.0 (the 5.3.4 clients
    call them no longer valid on such a server) that clients still send through a raw command
    (60East's JavaScript client routes ``stop_timer`` like ``heartbeat`` and waits for its
    processed ack, and the Go client's integration suite requires a successful one). What
    those clients expect of a 5.3.2+ server: the acks asked for, successful, and no timer;
    ``completed``, which ``stop_timer`` asked for to carry the timing, carries nothing."""
    log.info("%s: %s acknowledged; no timer since AMPS 5.3.2.0", client.describe(), cmd.command)
    acks_early(client, cmd)
    acks_final(client, cmd)


def flush(broker: Broker, client: Client, cmd: Command) -> None:
    acks_early(client, cmd)
    # Everything this client sent before the flush has been processed in order; pending
    # persisted acks go out before the flush's own ack.
    client.emit_persisted()
    acks_final(client, cmd)
    if "persisted" in cmd.acks:  # publish_flush(ack_type=persisted)
        if broker.txlog is not None:
            broker.txlog.flush_persisted(client, cmd)
        else:
            client.ack(cmd, "persisted")  # nothing is journalled: processed is all there is
