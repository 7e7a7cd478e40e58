"""Entitlement checks at command time (issue 22; beyond-json.md B.3, B.4).

:func:`check` runs before a command's handler, only for a connection whose logon was decided by
the configured security modules (``client.session``): a connection of a server without
Authentication/Entitlement blocks never gets here, so the message path pays nothing.

* reads (``subscribe``, ``delta_subscribe``, ``sow``, ``sow_and_subscribe``,
  ``sow_and_delta_subscribe``) on a literal topic: refused with ``not entitled``, or the
  entitlement's read filter ANDed into the command's filter, so that live delivery, the SOW
  query, a bookmark replay and an aggregated query all see it (the handlers read ``cmd.filter``);
* writes (``publish``, ``delta_publish``): refused with ``not entitled`` when the topic is not
  writable or the message (for a delta, the delta itself, before any merge) fails the write
  filter; a publish-store publish gets the failure on its persisted ack, so the client's
  failed-write handler sees it;
* ``sow_delete``: refused when the topic is not writable; a filter delete deletes only the
  records the write filter admits (the filters are ANDed).

Refusals are counted in ``broker.denied`` (``reads`` / ``writes``) for the Admin tree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from amps_emulator.auth import Session
from amps_emulator.protocol import reasons
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.server.acks import early as acks_early
from amps_emulator.server.acks import refused as acks_refused
from amps_emulator.server.delivery import decode_or_none

if TYPE_CHECKING:
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.broker import Broker
    from amps_emulator.server.ports import Client

__all__ = ["check", "READS", "WRITES"]

READS = frozenset({"subscribe", "delta_subscribe", "sow", "sow_and_subscribe",
                   "sow_and_delta_subscribe"})
WRITES = frozenset({"publish", "delta_publish"})


def check(broker: Broker, client: Client, session: Session, cmd: Command) -> bool:
    """Apply the session's entitlements to ``cmd`` (its filter may be narrowed). False: the
    command was refused and answered here; raises ``CommandError(not entitled)`` for the usual
    failure ack."""
    name = cmd.command
    topic = cmd.topic
    if not topic:
        return True  # the handler reports the missing topic
    perms = session.permissions
    mt = client.listener.message_type
    if name in READS:
        try:
            grant = perms.check_subscribe(mt, topic)
        except CommandError:
            broker.denied["reads"] += 1
            raise
        if grant is not None and grant.filter_text is not None:
            cmd.filter = grant.combined_filter(cmd.filter)
        return True
    if name in WRITES:
        grant = perms.write_grant(mt, topic)
        if grant is not None and (grant.filter_text is None
                                  or grant.admits(decode_or_none(cmd.body))):
            return True
        broker.denied["writes"] += 1
        reason = reasons.NOT_ENTITLED
        seq = cmd.seq  # an int once parsed (Command.__post_init__)
        if isinstance(seq, int) and "persisted" in cmd.acks:
            acks_early(client, cmd)
            if "processed" in cmd.acks:
                client.ack(cmd, "processed", "failure", reason)
            acks_refused(client, cmd, seq, reason, broker.txlog)
            return False
        raise CommandError(reason, f'User "{perms.user}" not entitled to topic "{topic}".')
    if name == "sow_delete":
        try:
            grant = perms.check_write(mt, topic)
        except CommandError:
            broker.denied["writes"] += 1
            raise
        if grant.filter_text is not None:
            if not cmd.filter:
                broker.denied["writes"] += 1
                raise CommandError(reasons.NOT_ENTITLED,
                                   f"a write filter applies to {topic!r}: delete by filter")
            cmd.filter = grant.combined_filter(cmd.filter)
    return True
