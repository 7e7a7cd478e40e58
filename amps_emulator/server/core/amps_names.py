"""How AMPS names what it reports: a connection's name.

AMPS names a connection after its instance and the transport it came in on, with a number:
``AMPS-Sample-any-tcp-1-...`` in the User Guide's log excerpts. The ``/AMPS/ClientStatus``
events, the Admin interface's ``connection_name`` and the web-entitlements
``{{AMPS_CONNECTION_NAME}}`` token all give :func:`connection_name`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["connection_name"]


def connection_name(instance: str, client: Any) -> str:
    """The name of ``client``'s connection: instance, transport and connection number."""
    return f"{instance}-{client.listener.name}-{client.conn_id}"
