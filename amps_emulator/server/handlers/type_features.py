"""Query and subscription options a message type cannot serve, refused before anything runs.

The User Guide's message-types chapter lists what AMPS does not offer on some types because
the server would have to build messages of a fixed layout from arbitrary values: on
``protobuf`` no aggregated subscription (nor, on proto2, a select list); on ``struct`` neither
an aggregated subscription nor a select list; on ``binary`` nothing that parses the body.
The codecs carry those limits (:class:`protocol.msgtypes.Capabilities`); this module turns a
command that asks for one of them into a failure ack with reason ``invalid options`` (the
reason the emulator gives for an option the command cannot take; AMPS's own text for these
cases is not public).  Checked for ``sow``, ``sow_and_subscribe`` (and the delta forms) and
``subscribe`` alike, so a query never starts to build a message its type cannot hold.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from amps_emulator.protocol import reasons
from amps_emulator.protocol.msgtypes import MessageTypeConfigError
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.protocol.topics import TYPE_SEP, type_of

if TYPE_CHECKING:
    from amps_emulator.protocol.bodies import Bodies
    from amps_emulator.protocol.command import Command

__all__ = ["refuse_unsupported_options"]


def refuse_unsupported_options(bodies: Bodies, cmd: Command) -> None:
    """Raise ``CommandError(invalid options)`` if ``cmd`` asks its topic's message type for
    aggregation (``grouping``/``projection``) or a select list the type does not offer."""
    topic = cmd.topic
    if not topic or TYPE_SEP not in topic:  # json offers everything
        return
    opts = cmd.opts
    aggregated = "grouping" in opts or "projection" in opts
    selected = isinstance(opts.get("select"), str)
    if not (aggregated or selected):
        return
    mt = type_of(topic)
    try:
        caps = bodies.codec(mt).capabilities
    except MessageTypeConfigError:  # (the logon refused an unknown type already)
        return
    if aggregated and not caps.aggregates:
        raise CommandError(reasons.INVALID_OPTIONS,
                           f"{mt} messages do not support aggregation (grouping/projection)")
    if selected and not caps.select:
        raise CommandError(reasons.INVALID_OPTIONS, f"{mt} messages do not support select lists")
