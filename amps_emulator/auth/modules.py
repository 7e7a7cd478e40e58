"""The authentication and entitlement modules, built from resolved :class:`SecurityBlock` s.

Authentication (:class:`Authenticator`) turns the logon's credentials into an accepted identity
or a refusal with AMPS's reason:

* ``amps-default-authentication-module``: any credentials. ``AllowSpoofing`` (default false):
  the logon's user name becomes the identity, else the identity is empty. ``RequireLogon``
  (default true): an implicit logon (any command before ``logon``) is refused with
  ``logon required``. ``RequireUsername`` (default false): a logon without a user name is refused.
* ``amps-implicit-authentication-module``: any credentials, implicit logon allowed;
  ``AllowSpoofing`` as above.
* ``amps-default-no-authentication-module``: every logon refused.
* web-entitlements (``libamps_http_entitlement.so``): the logon is accepted when the user's
  permission document can be fetched with its credentials (HTTP 401/403/404, a timeout, an
  unparsable document: refused) and, emulator only, matches the document's ``password`` if it
  has one. The document's ``user_name`` becomes the identity (default the logon's user name).
  An empty user name is refused unless ``ServerAcceptsEmptyAuthId``; with ``EntitlementOnly``
  the module does not authenticate (every logon accepted, identity = the user name).

Entitlement (:class:`Entitler`) gives the accepted identity its :class:`Permissions`:
``amps-default-entitlement-module`` (everything), simple-access (the same rules for everyone) and
web-entitlements (the user's document: reused from authentication when the same module did both,
else fetched; with ``EntitlementOnly`` fetched for the authenticated identity without credentials).
"""

from __future__ import annotations

import hmac
from typing import NamedTuple

from amps_emulator.config.units import parse_bool
from amps_emulator.protocol import reasons

from .config import (
    DEFAULT_AUTHENTICATION_MODULE,
    DEFAULT_ENTITLEMENT_MODULE,
    IMPLICIT_AUTHENTICATION_MODULE,
    NO_AUTHENTICATION_MODULE,
    SIMPLE_ACCESS_LIBRARY,
    WEB_LIBRARY,
    SecurityBlock,
    simple_access_options,
    web_options,
)
from .documents import PermissionDocument, PermissionDocumentError
from .permissions import (
    AllowAllPermissions,
    DocumentPermissions,
    Permissions,
    SecurityState,
    SimpleAccessPermissions,
)
from .web import DocumentSource, FetchError, LogonContext

__all__ = ["Credentials", "AuthResult", "Authenticator", "DefaultAuthentication", "NoAuthentication",
           "WebAuthentication", "Entitler", "DefaultEntitlement", "SimpleAccessEntitlement",
           "WebEntitlement", "build_authenticator", "build_entitler", "EntitlementRefused"]


class Credentials(NamedTuple):
    """What a connection presents: ``explicit`` False for an implicit logon (another command first,
    user and password then empty); ``context`` what the logon says of its connection, for the
    web-entitlements ``HTTPHeader`` tokens (None: an Admin request, a replication link)."""

    user: str = ""
    password: str | None = None
    explicit: bool = True
    context: LogonContext | None = None


class AuthResult(NamedTuple):
    """``accepted`` with the identity, or a refusal: ``reason`` for the client, ``detail`` for the log."""

    accepted: bool
    user_id: str = ""
    reason: str = ""
    detail: str = ""
    #: the permission document read while authenticating (web-entitlements), for the entitlement step
    document: PermissionDocument | None = None
    source: DocumentSource | None = None


def _refuse(reason: str, detail: str) -> AuthResult:
    return AuthResult(False, reason=reason, detail=detail)


class EntitlementRefused(Exception):
    """No permissions for an accepted identity (no/bad document): the logon is refused."""

    def __init__(self, user: str, detail: str) -> None:
        super().__init__(detail)
        self.user = user
        self.detail = detail


def _switch(block: SecurityBlock, name: str, default: bool) -> bool:
    text = block.option(name)
    return default if text is None else parse_bool(text)


class Authenticator:
    """The base: ``authenticate`` decides one logon."""

    name = ""

    async def authenticate(self, creds: Credentials) -> AuthResult:
        raise NotImplementedError


class DefaultAuthentication(Authenticator):
    """``amps-default-authentication-module`` and (``require_logon=False``) the implicit one."""

    def __init__(self, *, allow_spoofing: bool = False, require_logon: bool = True,
                 require_username: bool = False, name: str = DEFAULT_AUTHENTICATION_MODULE) -> None:
        self.allow_spoofing = allow_spoofing
        self.require_logon = require_logon
        self.require_username = require_username
        self.name = name

    async def authenticate(self, creds: Credentials) -> AuthResult:
        if not creds.explicit and self.require_logon:
            return _refuse(reasons.LOGON_REQUIRED, f"{self.name}: a command before logon (RequireLogon)")
        if creds.explicit and self.require_username and not creds.user:
            return _refuse(reasons.AUTH_FAILURE, f"{self.name}: logon without a user name (RequireUsername)")
        return AuthResult(True, user_id=creds.user if self.allow_spoofing else "")


class NoAuthentication(Authenticator):
    """``amps-default-no-authentication-module``: refuses every logon."""

    name = NO_AUTHENTICATION_MODULE

    async def authenticate(self, creds: Credentials) -> AuthResult:
        if not creds.explicit:
            return _refuse(reasons.LOGON_REQUIRED, f"{self.name}: a command before logon")
        return _refuse(reasons.AUTH_FAILURE, f"{self.name}: every logon is refused (user {creds.user!r})")


class WebAuthentication(Authenticator):
    """Web-entitlements authentication against a :class:`DocumentSource`."""

    def __init__(self, source: DocumentSource, name: str) -> None:
        self.source = source
        self.name = name

    async def authenticate(self, creds: Credentials) -> AuthResult:
        o = self.source.options
        if o.entitlement_only:
            return AuthResult(True, user_id=creds.user)
        if not creds.explicit and not o.server_accepts_empty_auth_id:
            return _refuse(reasons.LOGON_REQUIRED, f"{self.name}: a command before logon")
        if not creds.user and not o.server_accepts_empty_auth_id:
            return _refuse(reasons.AUTH_FAILURE, f"{self.name}: logon without a user name "
                                                 f"(ServerAcceptsEmptyAuthId is false)")
        try:
            doc = await self.source.document(creds.user, creds.password, creds.context)
        except (FetchError, PermissionDocumentError) as e:
            return _refuse(reasons.AUTH_FAILURE, f"{self.name}: {e}")
        if doc.password is not None and not hmac.compare_digest(
                doc.password.encode("utf-8", "surrogatepass"),
                (creds.password or "").encode("utf-8", "surrogatepass")):
            return _refuse(reasons.AUTH_FAILURE, f"{self.name}: wrong password for user {creds.user!r}")
        return AuthResult(True, user_id=doc.user_name or creds.user, document=doc, source=self.source)


class Entitler:
    """The base: ``permissions`` for an accepted identity; raises :class:`EntitlementRefused`.

    ``document_key`` is the name the module caches a document under for this logon (``None``: the
    module caches nothing), for :meth:`DocumentSource.acquire` / ``release``.
    """

    name = ""
    source: DocumentSource | None = None

    async def permissions(self, user_id: str, creds: Credentials, auth: AuthResult,
                          state: SecurityState) -> tuple[Permissions, str | None]:
        raise NotImplementedError


class DefaultEntitlement(Entitler):
    name = DEFAULT_ENTITLEMENT_MODULE

    async def permissions(self, user_id: str, creds: Credentials, auth: AuthResult,
                          state: SecurityState) -> tuple[Permissions, str | None]:
        return AllowAllPermissions(user_id, state=state), None


class SimpleAccessEntitlement(Entitler):
    def __init__(self, block: SecurityBlock) -> None:
        self.name = block.module
        self.options = simple_access_options(block)

    async def permissions(self, user_id: str, creds: Credentials, auth: AuthResult,
                          state: SecurityState) -> tuple[Permissions, str | None]:
        o = self.options
        return SimpleAccessPermissions(user_id, allowed=o.allowed_topics, denied=o.denied_topics,
                                       read=o.read, write=o.write, state=state), None


class WebEntitlement(Entitler):
    def __init__(self, source: DocumentSource, name: str) -> None:
        self.web = source
        self.source = source
        self.name = name

    async def permissions(self, user_id: str, creds: Credentials, auth: AuthResult,
                          state: SecurityState) -> tuple[Permissions, str | None]:
        if auth.document is not None and auth.source is self.web:
            return DocumentPermissions(auth.document, user=user_id, state=state), creds.user
        o = self.web.options
        # with EntitlementOnly the request names the identity alone: no logon tokens
        key, password, context = (user_id, None, None) if o.entitlement_only \
            else (creds.user, creds.password, creds.context)
        try:
            doc = await self.web.document(key, password, context)
        except (FetchError, PermissionDocumentError) as e:
            raise EntitlementRefused(user_id, f"{self.name}: {e}") from None
        return DocumentPermissions(doc, user=user_id, state=state), key


def build_authenticator(block: SecurityBlock, sources: dict[object, DocumentSource],
                        config_dir: str) -> Authenticator:
    """The module a (checked) Authentication block names; web sources are shared via ``sources``."""
    impl = block.implementation
    if impl == DEFAULT_AUTHENTICATION_MODULE:
        return DefaultAuthentication(allow_spoofing=_switch(block, "AllowSpoofing", False),
                                     require_logon=_switch(block, "RequireLogon", True),
                                     require_username=_switch(block, "RequireUsername", False))
    if impl == IMPLICIT_AUTHENTICATION_MODULE:
        return DefaultAuthentication(allow_spoofing=_switch(block, "AllowSpoofing", False),
                                     require_logon=False, name=IMPLICIT_AUTHENTICATION_MODULE)
    if impl == NO_AUTHENTICATION_MODULE:
        return NoAuthentication()
    if impl == WEB_LIBRARY:
        return WebAuthentication(_source(block, sources, config_dir), block.module)
    raise ValueError(f"{block.module!r} is not an authentication module")


def build_entitler(block: SecurityBlock, sources: dict[object, DocumentSource], config_dir: str) -> Entitler:
    impl = block.implementation
    if impl == DEFAULT_ENTITLEMENT_MODULE:
        return DefaultEntitlement()
    if impl == SIMPLE_ACCESS_LIBRARY:
        return SimpleAccessEntitlement(block)
    if impl == WEB_LIBRARY:
        return WebEntitlement(_source(block, sources, config_dir), block.module)
    raise ValueError(f"{block.module!r} is not an entitlement module")


def _source(block: SecurityBlock, sources: dict[object, DocumentSource], config_dir: str) -> DocumentSource:
    options = web_options(block, config_dir)
    source = sources.get(options)
    if source is None:
        source = sources[options] = DocumentSource(options)
    return source
