"""The security layer the server holds: one per configuration.

:class:`SecurityLayer` builds the modules every transport (and Admin) resolves to, sharing one
:class:`~auth.web.DocumentSource` between blocks that configure the same web-entitlements
service, and keeps the :class:`~auth.permissions.SecurityState` switches.

:meth:`TransportSecurity.logon` runs authentication, then entitlement, and answers a
:class:`LogonOutcome`: accepted with a :class:`Session` (identity + permissions), or refused with
the reason to send (``auth failure``, ``logon required``, ``not entitled`` when the document says
``"logon": false``, or ``"replication-logon": false`` for a replication peer) and a detail for
the one log line.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from amps_emulator.protocol import reasons

from .config import SecurityBlock, SecurityConfig
from .modules import (
    Authenticator,
    AuthResult,
    Credentials,
    EntitlementRefused,
    Entitler,
    build_authenticator,
    build_entitler,
)
from .permissions import AllowAllPermissions, Permissions, SecurityState, may_take_over_name
from .web import DocumentSource

__all__ = ["SecurityLayer", "TransportSecurity", "Session", "LogonOutcome"]


class Session:
    """An accepted logon: the identity for the connection's lifetime, and its permissions.
    Call :meth:`close` once when the connection closes (releases a cached document)."""

    __slots__ = ("user_id", "permissions", "_source", "_key", "_closed")

    def __init__(self, user_id: str, permissions: Permissions, source: DocumentSource | None = None,
                 key: str | None = None) -> None:
        self.user_id = user_id
        self.permissions = permissions
        self._source = source
        self._key = key
        self._closed = False
        if source is not None and key is not None:
            source.acquire(key)

    @property
    def document_key(self) -> str | None:
        """The name this session's permission document is cached under (web-entitlements), else None."""
        return self._key if self._source is not None else None

    def may_take_over(self, new_user_id: str) -> bool:
        """Whether a logon as ``new_user_id`` may take over this session's client name."""
        return may_take_over_name(self.user_id, new_user_id)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._source is not None and self._key is not None:
            self._source.release(self._key)


class LogonOutcome(NamedTuple):
    session: Session | None
    reason: str = ""
    detail: str = ""

    @property
    def accepted(self) -> bool:
        return self.session is not None


class TransportSecurity:
    """The authentication and entitlement modules one transport (or Admin) uses."""

    def __init__(self, authenticator: Authenticator, entitler: Entitler, state: SecurityState,
                 blocks: tuple[SecurityBlock, SecurityBlock]) -> None:
        self.authenticator = authenticator
        self.entitler = entitler
        self.state = state
        self.blocks = blocks

    async def logon(self, creds: Credentials, *, replication: bool = False) -> LogonOutcome:
        """Decide a logon (explicit, or implicit: ``Credentials(explicit=False)``).
        ``replication``: an upstream instance logging on to the replication transport, which
        needs ``replication_logon`` rather than ``logon``."""
        if self.state.authentication_enabled:
            auth = await self.authenticator.authenticate(creds)
            if not auth.accepted:
                return LogonOutcome(None, auth.reason, auth.detail)
        else:
            auth = AuthResult(True, user_id=creds.user)
        if not self.state.entitlement_enabled:
            return LogonOutcome(Session(auth.user_id, AllowAllPermissions(auth.user_id, state=self.state)))
        try:
            permissions, key = await self.entitler.permissions(auth.user_id, creds, auth, self.state)
        except EntitlementRefused as e:
            return LogonOutcome(None, reasons.AUTH_FAILURE, e.detail)
        if replication and not permissions.replication_logon:
            return LogonOutcome(None, reasons.NOT_ENTITLED,
                                f"{self.entitler.name}: user {auth.user_id!r} may not log on as a "
                                'replication peer ("replication-logon": false)')
        if not replication and not permissions.can_logon:
            return LogonOutcome(None, reasons.NOT_ENTITLED,
                                f"{self.entitler.name}: user {auth.user_id!r} may not log on "
                                '("logon": false)')
        return LogonOutcome(Session(auth.user_id, permissions, self.entitler.source, key))


class SecurityLayer:
    """Every transport's modules, the shared switches, the document sources."""

    def __init__(self, config: SecurityConfig, transport_names: Iterable[str] = ()) -> None:
        self.config = config
        self.state = SecurityState()
        #: counts the resets (:meth:`reload`) and the re-checks that changed a document: a
        #: session kept across requests (an Admin session cookie) is valid only in the
        #: generation it was made in
        self.generation = 0
        self._sources: dict[object, DocumentSource] = {}
        self._built: dict[tuple[SecurityBlock, SecurityBlock], TransportSecurity] = {}
        self._transports: dict[str, TransportSecurity] = {}
        for name in {*config.transports, *transport_names}:
            self._transports[name] = self._build(config.for_transport(name))
        self._instance = self._build(config.for_transport(None))
        self._admin = self._build(config.for_admin())

    def _build(self, blocks: tuple[SecurityBlock, SecurityBlock]) -> TransportSecurity:
        ts = self._built.get(blocks)
        if ts is None:
            auth_block, ent_block = blocks
            ts = TransportSecurity(build_authenticator(auth_block, self._sources, self.config.config_dir),
                                   build_entitler(ent_block, self._sources, self.config.config_dir),
                                   self.state, blocks)
            self._built[blocks] = ts
        return ts

    def transport(self, name: str | None) -> TransportSecurity:
        """The modules of the transport ``name`` (an unknown name gets the instance-level ones)."""
        if name is not None and name in self._transports:
            return self._transports[name]
        return self._instance

    def admin(self) -> TransportSecurity:
        return self._admin

    @property
    def sources(self) -> list[DocumentSource]:
        return list(self._sources.values())

    # -- switches (SIGUSR1 / SIGUSR2, amps-action-do-{disable,enable}-{authentication,entitlement})
    def disable_authentication(self) -> None:
        self.state.authentication_enabled = False

    def enable_authentication(self) -> None:
        self.state.authentication_enabled = True

    def disable_entitlement(self) -> None:
        self.state.entitlement_enabled = False

    def enable_entitlement(self) -> None:
        self.state.entitlement_enabled = True

    def reload(self) -> None:
        """Forget every cached document (``POST /emulator/reset``, the reset actions; the caller
        disconnects the clients, as AMPS's reset does)."""
        self.generation += 1
        for source in self._sources.values():
            source.reload()

    @property
    def recheck_interval(self) -> float | None:
        """The shortest ``EntitlementTimeout`` configured (seconds), or None: no re-check to run."""
        timeouts = [s.options.entitlement_timeout for s in self._sources.values()
                    if s.options.entitlement_timeout is not None]
        return min(timeouts) if timeouts else None

    async def recheck(self) -> set[str]:
        """Run due ``EntitlementTimeout`` re-checks; the document keys (:attr:`Session.document_key`)
        whose document changed or vanished: disconnect those sessions."""
        changed: set[str] = set()
        for source in list(self._sources.values()):
            changed.update(await source.recheck())
        if changed:
            self.generation += 1
        return changed
