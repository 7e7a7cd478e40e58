"""How AMPS names what it reports: a connection's name, and the message ids of its event log.

**Connection names.** AMPS names a connection after its instance and the transport it came
in on, with a number: ``AMPS-Sample-any-tcp-1-...`` in the User Guide's log excerpts. The
``/AMPS/ClientStatus`` events, the Admin interface's ``connection_name`` and the
web-entitlements ``{{AMPS_CONNECTION_NAME}}`` token all give :func:`connection_name`.

**Event ids.** Each AMPS log message has an id ``CC-NNNN`` (category, number), which a
``Logging/Target``'s ``IncludeErrors`` / ``ExcludeErrors`` match. The emulator gives its own
log lines the id 60East's documentation shows for the same event, as the ``amps_id`` of the
record (:func:`amps_id` builds the ``extra`` for it), so an operator's filters written for AMPS
select the same lines. Only the ids the User Guide names with their event are used; the
emulator's other lines carry none (they pass or fail a target by level alone).
"""

from __future__ import annotations

from typing import Any

__all__ = ["connection_name", "amps_id", "STARTUP_BANNER", "INITIALIZED", "CLIENT_DISCONNECTED",
           "HEARTBEAT_DISCONNECT", "TRANSPORT_DISABLED", "NAME_IN_USE_DISCONNECT",
           "SLOW_CLIENT_DISCONNECT", "SESSION_LOGON"]

#: 00-0001 (info): the first line of a start (AMPS: its copyright and version)
STARTUP_BANNER = "00-0001"
#: 00-0015 (info): start-up finished: "AMPS initialization completed (N seconds)."
INITIALIZED = "00-0015"
#: 07-0013 (info): a client connection closed: "client[NAME] disconnected."
CLIENT_DISCONNECTED = "07-0013"
#: 07-0042 (error): an unresponsive client disconnected by the heartbeat
HEARTBEAT_DISCONNECT = "07-0042"
#: 07-0047 (info): "Transport[NAME] being disabled."
TRANSPORT_DISABLED = "07-0047"
#: 02-0025 (warning): a logon with a client name in use forced the other connection off
NAME_IN_USE_DISCONNECT = "02-0025"
#: 70-0004 (error): a client that does not consume its messages is disconnected
SLOW_CLIENT_DISCONNECT = "70-0004"
#: 1F-0004 (info): "AMPS client session logon for: NAME"
SESSION_LOGON = "1F-0004"


def amps_id(ident: str) -> dict[str, Any]:
    """The ``extra`` of a log call whose record carries the AMPS message id ``ident``."""
    return {"amps_id": ident}


def connection_name(instance: str, client: Any) -> str:
    """The name of ``client``'s connection: instance, transport and connection number."""
    return f"{instance}-{client.listener.name}-{client.conn_id}"
