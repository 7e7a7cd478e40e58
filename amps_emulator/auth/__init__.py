"""Authentication and entitlements, as AMPS does them: the decision layer (no I/O on the event loop).

``read_security`` reads the config's ``Authentication`` / ``Entitlement`` blocks and ``Modules``;
a :class:`SecurityLayer` answers logons per transport with a session whose ``permissions`` check
each command. Modules: ``config`` (blocks, catalogue, resolution), ``documents`` (permission
documents), ``permissions`` (per-user checks), ``web`` (HTTP(S)/``file:`` fetch, cache, re-check),
``modules`` (the AMPS modules), ``layer`` (per transport, switches). What the server calls, and
where: docs/contributing/internals.md, "The authentication layer".
"""

from __future__ import annotations

from .config import (
    AUTHENTICATION,
    ENTITLEMENT,
    ModuleDecl,
    SecurityBlock,
    SecurityConfig,
    block_from_values,
    load_security,
    read_security,
    resolve,
)
from .documents import PermissionDocument, PermissionDocumentError, parse_document
from .layer import LogonOutcome, SecurityLayer, Session, TransportSecurity
from .modules import AuthResult, Credentials
from .permissions import (
    ALLOW,
    Permissions,
    SecurityState,
    TopicGrant,
    combine_filters,
    may_take_over_name,
)
from .web import DocumentSource, FetchError, LogonContext

__all__ = [
    "AUTHENTICATION", "ENTITLEMENT", "ModuleDecl", "SecurityBlock", "SecurityConfig", "block_from_values",
    "load_security", "read_security", "resolve", "PermissionDocument", "PermissionDocumentError",
    "parse_document", "LogonOutcome", "SecurityLayer", "Session", "TransportSecurity", "AuthResult",
    "Credentials", "ALLOW", "Permissions", "SecurityState", "TopicGrant", "combine_filters",
    "may_take_over_name", "DocumentSource", "FetchError", "LogonContext",
]
