"""Authentication and entitlements, as AMPS does them: the decision layer (no I/O on the event loop).

README -- what the server calls, and where
==========================================

Start-up (config loading)::

    from amps_emulator.auth import read_security, SecurityLayer
    security_config, errors = read_security(root_node, config_dir)  # [ConfigIssue(file, line, why)]
    layer = SecurityLayer(security_config, transport_names)

``read_security`` reads the instance, per-``Transport`` and ``Admin`` ``Authentication`` /
``Entitlement`` blocks and ``Modules`` declarations from the config loader's element tree; unknown
modules, modules in the wrong kind of block, unknown options and bad option values are located
errors (``load_security`` raises ``ConfigError``). ``config_dir`` anchors ``file:`` ResourceURIs.

Logon (the ``logon`` command; and the first other command of a connection, as an implicit logon)::

    outcome = await layer.transport(transport_name).logon(Credentials(user, password))
    outcome = await layer.transport(transport_name).logon(Credentials(explicit=False))   # implicit
    if not outcome.accepted:
        # ack status=failure reason=outcome.reason ("auth failure", "logon required", "not
        # entitled"); log outcome.detail once (it names the user and the cause); close the connection
    session = outcome.session            # keep on the connection
    session.user_id                      # the identity for the connection's lifetime

Client name already in use by connection ``old``: ``old.session.may_take_over(new.user_id)`` --
True: drop ``old`` (takeover); False: refuse with ``name in use``.

Every command (``perms = session.permissions``; ``mt`` = the connection's message type)::

    subscribe / delta_subscribe / sow / sow_and_subscribe / sow_and_delta_subscribe:
        grant = perms.check_subscribe(mt, topic)   # CommandError(not entitled) for a literal topic
        grant is None (regex topic): per concrete topic, when it first has something to deliver,
            g = perms.read_grant(mt, concrete)     # None: skip that topic silently (cache per sub)
        filter = grant.combined_filter(subscriber_filter)   # entitlement AND subscriber
        grant.select: entitlement select list, applied before the subscriber's
        an update whose new body fails the entitlement filter (grant.admits(doc) False) while the
        old one passed: OOF with reason "entitlement" (reasons.OOF_ENTITLEMENT) and the old body
    publish / delta_publish:
        grant = perms.check_write(mt, topic); refuse (not entitled) if not grant.admits(doc)
        -- for delta_publish ``doc`` is the delta itself, before merge/preprocessing/enrichment
    sow_delete:  grant = perms.check_write(mt, topic); delete only records with grant.admits(rec)
        (a regex-topic delete: check_write per concrete topic)
    queues: consume and ack = perms.check_queue_consume / check_queue_ack (read);
        publishing into the queue = perms.check_queue_publish (write)
    Admin GET path (with the Admin's own modules, ``layer.admin()``): perms.check_admin(path)

A refusal raises ``protocol.reasons.CommandError(not entitled)``: the usual failure ack (or, for a
publish with a persisted ack, the failed persisted ack); count denied reads/writes for Admin.

Connection closed: ``session.close()`` (releases the user's cached web document).

Switches: SIGUSR1 -> ``layer.disable_authentication(); layer.disable_entitlement()``; SIGUSR2 ->
the ``enable_*`` ones; the same for ``amps-action-do-{disable,enable}-{authentication,entitlement}``.
While entitlement is disabled every check allows (existing sessions too); grants already handed
out stay. ``POST /emulator/reset`` and ``amps-action-do-reset-*``: ``layer.reload()`` (then
disconnect the clients, as AMPS's reset does).

``EntitlementTimeout``: when ``layer.recheck_interval`` is not None, every that many seconds
``keys = await layer.recheck()`` and disconnect the sessions whose ``session.document_key`` is in
``keys``.

Modules: ``config`` (blocks, catalogue, resolution, reading the tree), ``documents`` (permission
document format), ``permissions`` (per-user checks), ``web`` (HTTP(S)/``file:`` fetch, cache,
re-check), ``modules`` (the AMPS modules), ``layer`` (per transport, switches).
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
from .web import DocumentSource, FetchError

__all__ = [
    "AUTHENTICATION", "ENTITLEMENT", "ModuleDecl", "SecurityBlock", "SecurityConfig", "block_from_values",
    "load_security", "read_security", "resolve", "PermissionDocument", "PermissionDocumentError",
    "parse_document", "LogonOutcome", "SecurityLayer", "Session", "TransportSecurity", "AuthResult",
    "Credentials", "ALLOW", "Permissions", "SecurityState", "TopicGrant", "combine_filters",
    "may_take_over_name", "DocumentSource", "FetchError",
]
