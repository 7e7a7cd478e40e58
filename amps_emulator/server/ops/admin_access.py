"""Who may use the Admin interface (:mod:`server.ops.admin`), and what every answer carries.

**Logging on.** Admin is AMPS's ``amps-admin`` transport: when a security block applies to it
(``SecurityConfig.admin_secured``) a request logs on with its HTTP Basic credentials through
the resolved modules (401 with the ``WWWAuthenticate`` challenge otherwise), and the user's
``admin`` permissions are checked on the request's canonical path, read or write
(:func:`admin_http.needs_write`), on every request.

**Session cookie.** A request whose credentials logged on is answered with a cookie,
``amps_admin_session=<token>; <SessionOptions>`` (default ``max-age=86400; path=/; HttpOnly``):
a browser that sends it back is not asked for credentials again. The token is 256 random bits
(:func:`secrets.token_urlsafe`). The same credentials logging on again while their session
lives get that session's cookie again (a script that never sends it back holds one session,
and a browser and a script of one user do not push each other out); the server keeps at most
:data:`MAX_SESSIONS` sessions and :data:`SESSIONS_PER_USER` per user (past them, the oldest
goes), each until its ``max-age`` has passed on the server's clock (the test clock under
``--test-clock``). A session ends early when authentication or entitlement is reset
(``/amps/administrator/authorization/<authentication|entitlement>/reset``, the reset actions,
``POST /emulator/reset``) or a re-check finds a permission document changed: the security
layer's :attr:`~auth.layer.SecurityLayer.generation` moves on. Entitlement is still checked on
each request, with the permissions the session's log-on was given (its permission document is
not held in the cache meanwhile: the user's next logon elsewhere fetches it again). The
credentials are kept with the session only when a websocket protocol has ``TrustedAdmin``
(:meth:`AdminSessions.credentials`), since its connections log on with them.

**Anonymous paths.** A GET or HEAD whose canonical path (``admin_http.parse_target``: decoded
once, no ``.``/``..`` segment, no query, no format suffix) the ``AnonymousPaths`` regular
expression matches (a search, as AMPS's regexes: anchor it with ``^``/``$``) is served without
credentials and without an entitlement check, as the Configuration Reference says; this
includes an administrator action on such a path. A target that has no canonical form is never
anonymous (it goes through the log-on, then is a 404), nor is any other method (the
emulator's own ``/emulator`` writes).

**Headers.** Every answer carries ``Access-Control-Allow-Origin``: ``*``, or with
``AccessControlAllowOrigin`` the request's ``Origin`` when the expression matches it (a
search) and otherwise the address the server was reached at; then each configured ``Header``,
as written (checked at load time: ``config.httpd.headers``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import h11

from amps_emulator.auth import Credentials
from amps_emulator.config.httpd.admin import DEFAULT_SESSION_OPTIONS, session_max_age
from amps_emulator.server.net.ws_upgrade import ADMIN_COOKIE, TOKEN, admin_token, basic_credentials
from amps_emulator.server.ops.admin_http import HttpError, Target, needs_write

if TYPE_CHECKING:
    from amps_emulator.auth.layer import SecurityLayer, Session
    from amps_emulator.server.app import Server

__all__ = ["AdminAccess", "AdminSessions", "Grant", "SESSION_COOKIE", "WWW_AUTHENTICATE"]

log = logging.getLogger("amps_emulator.admin")

#: the challenge a 401 carries when the config names none
WWW_AUTHENTICATE = 'Basic realm="AMPS Admin"'
SESSION_COOKIE = ADMIN_COOKIE
MAX_SESSIONS = 4096
SESSIONS_PER_USER = 16


@dataclass
class _Entry:
    user: str
    session: Session
    credentials: tuple[str, str | None] | None
    expires: float
    generation: int
    fingerprint: bytes


class AdminSessions:
    """The Admin sessions a cookie names (module docstring): bounded, expiring on ``clock``."""

    def __init__(self, clock: Callable[[], float], max_age: float, keep_credentials: bool, *,
                 limit: int = MAX_SESSIONS, per_user: int = SESSIONS_PER_USER) -> None:
        self.clock = clock
        self.max_age = max_age
        self.keep_credentials = keep_credentials
        self.limit = limit
        self.per_user = per_user
        self._entries: dict[str, _Entry] = {}  # oldest first
        self._by_user: dict[str, list[str]] = {}
        #: the session of each credentials (a keyed hash of them, the key this process's)
        self._by_credentials: dict[bytes, str] = {}
        self._key = secrets.token_bytes(32)

    def __len__(self) -> int:
        return len(self._entries)

    def issue(self, session: Session, credentials: tuple[str, str | None], generation: int) -> str:
        """The session of an accepted log-on; its token. The same credentials logging on
        again while their session lives get that session (with the permissions of this
        log-on) rather than another: a script that never sends its cookie back holds one."""
        # its permissions are kept, its cached permission document is not: a live Admin
        # session does not keep a document from being fetched again at the user's next logon
        session.close()
        user, password = credentials
        fingerprint = hmac.new(self._key, f"{user}\0{password}".encode("utf-8", "surrogatepass"),
                               hashlib.sha256).digest()
        live = self._by_credentials.get(fingerprint)
        if live is not None and (entry := self.find(live, generation)) is not None \
                and entry.user == session.user_id:
            entry.session = session
            return live
        mine = self._by_user.get(session.user_id, [])
        while len(mine) >= self.per_user:
            self._drop(mine[0])
        if len(self._entries) >= self.limit:
            now = self.clock()
            for token in [t for t, e in self._entries.items() if e.expires <= now]:
                self._drop(token)
            while len(self._entries) >= self.limit:
                self._drop(next(iter(self._entries)))
        token = secrets.token_urlsafe(32)
        self._entries[token] = _Entry(session.user_id, session,
                                      credentials if self.keep_credentials else None,
                                      self.clock() + self.max_age, generation, fingerprint)
        self._by_user.setdefault(session.user_id, []).append(token)
        self._by_credentials[fingerprint] = token
        return token

    def find(self, token: str, generation: int) -> _Entry | None:
        """The live session of ``token`` (one that expired or is of an older generation
        ends now)."""
        entry = self._entries.get(token)
        if entry is None:
            return None
        if entry.expires <= self.clock() or entry.generation != generation:
            self._drop(token)
            return None
        return entry

    def credentials(self, token: str, generation: int) -> tuple[str, str | None] | None:
        """The credentials of a live session (kept for ``TrustedAdmin`` only), else None."""
        entry = self.find(token, generation)
        return entry.credentials if entry is not None else None

    def clear(self) -> int:
        """End every session; how many there were."""
        n = len(self._entries)
        for token in list(self._entries):
            self._drop(token)
        return n

    def _drop(self, token: str) -> None:
        entry = self._entries.pop(token)
        mine = self._by_user[entry.user]
        mine.remove(token)
        if not mine:
            del self._by_user[entry.user]
        if self._by_credentials.get(entry.fingerprint) == token:
            del self._by_credentials[entry.fingerprint]
        entry.session.close()


class Grant(NamedTuple):
    """A request's log-on: the session whose permissions it is checked with (None: not
    checked), and the ``Set-Cookie`` value of a session it started (None: none)."""

    session: Session | None
    cookie: str | None = None


class AdminAccess:
    """The log-on, entitlement, anonymous paths and response headers of one Admin interface
    (module docstring). ``cfg``: the config's ``Admin`` (None: started by ``--admin``)."""

    def __init__(self, server: Server, cfg: Any, scheme: str = "http") -> None:
        self.server = server
        security = server.broker.security
        self.secured = security is not None and security.config.admin_secured
        self.challenge: str = getattr(cfg, "www_authenticate", None) or WWW_AUTHENTICATE
        self.headers: list[tuple[str, str]] = list(getattr(cfg, "headers", ()))
        origin, anonymous = getattr(cfg, "allow_origin", None), getattr(cfg, "anonymous_paths", None)
        self.origin = re.compile(origin) if origin else None
        self.anonymous = re.compile(anonymous) if anonymous else None
        self.cookie_options: str = getattr(cfg, "session_options", None) or DEFAULT_SESSION_OPTIONS
        #: Galvanometer disabled: the emulator's console, its stand-in, is not served
        self.console: bool = getattr(cfg, "galvanometer", True)
        self.scheme = scheme
        trusted = any(p.trusted_admin for p in getattr(server.config, "protocols", ()))
        self.sessions = AdminSessions(server.timebase.monotonic,
                                      session_max_age(self.cookie_options), trusted)

    @property
    def _security(self) -> SecurityLayer:
        security = self.server.broker.security
        assert security is not None  # (secured)
        return security

    # -- headers ----------------------------------------------------------------------------
    def allow_origin(self, origin: str | None, sockname: Any) -> str:
        if self.origin is None:
            return "*"
        if origin is not None and origin.isascii() and origin.isprintable() \
                and self.origin.search(origin):
            return origin  # (echoed: only printable ASCII, whatever the expression allows)
        if isinstance(sockname, tuple):
            host = sockname[0]
            return f"{self.scheme}://{f'[{host}]' if ':' in host else host}:{sockname[1]}"
        return "null"

    def response_headers(self, req: h11.Request | None, sockname: Any) -> list[tuple[str, str]]:
        """What every answer to ``req`` carries besides its own headers (None: an answer to
        a request whose head never arrived)."""
        origin = None
        if req is not None:
            origin = next((v.decode("latin-1") for n, v in req.headers if n == b"origin"), None)
        return [("access-control-allow-origin", self.allow_origin(origin, sockname)), *self.headers]

    # -- log-on and entitlement -----------------------------------------------------------------
    def is_anonymous(self, target: Target | None, method: str) -> bool:
        return (self.secured and self.anonymous is not None and target is not None
                and method in ("GET", "HEAD") and self.anonymous.search(target.path) is not None)

    async def logon(self, req: h11.Request, method: str) -> Grant:
        """The request's session: its cookie's, else a log-on with its Basic credentials
        (``HttpError`` 401 when refused); ``Grant(None)`` when Admin asks no one."""
        if not self.secured:
            return Grant(None)
        security = self._security
        token = admin_token(req.headers)
        if token is not None:
            entry = self.sessions.find(token, security.generation)
            if entry is not None:
                return Grant(entry.session)
        try:
            creds = basic_credentials(req.headers) or ("", None)
        except ValueError as exc:
            raise HttpError(401, str(exc)) from None
        outcome = await security.admin().logon(Credentials(*creds))
        if outcome.session is None:
            log.warning("admin %s %s refused (%s): %s", method, req.target.decode("latin-1"),
                        outcome.reason, outcome.detail)
            raise HttpError(401, outcome.reason)
        token = self.sessions.issue(outcome.session, creds, security.generation)
        return Grant(outcome.session, f"{SESSION_COOKIE}={token}; {self.cookie_options}")

    def entitle(self, session: Session | None, method: str, target: Target) -> None:
        """The user's ``admin`` permissions on the canonical path: read, or write for a
        request that changes state (:func:`admin_http.needs_write`), whatever its method."""
        if session is None:
            return
        write = needs_write(target, method)
        if not session.permissions.check_admin(target.path, write=write):
            self.server.broker.denied["writes" if write else "reads"] += 1
            log.warning("admin %s %s refused: user %r may not %s it", method, target.path,
                        session.user_id, "write" if write else "read")
            raise HttpError(403, f"user {session.user_id!r} is not entitled to "
                                 f"{'write' if write else 'read'} {target.path}")

    def trusted_credentials(self, token: str) -> tuple[str, str | None] | None:
        """For a websocket protocol with ``TrustedAdmin``: the credentials of the live Admin
        session ``token`` names."""
        if not self.secured or not TOKEN.fullmatch(token):
            return None
        return self.sessions.credentials(token, self._security.generation)


def admin_tls(cfg: Any) -> ssl.SSLContext | None:
    """The HTTPS context of the config's ``Admin`` (None: plain HTTP); its files were loaded
    once already, when the config was read (``config.httpd.admin``)."""
    if cfg is None or not getattr(cfg, "tls", False):
        return None
    from amps_emulator.config import ConfigError, ConfigIssue
    from amps_emulator.config.tls import TLSSetupError, server_context

    try:
        return server_context(cfg.certificate, cfg.private_key, cfg.ciphers,
                              protocols=cfg.secure_socket_protocols)
    except TLSSetupError as exc:  # the files changed since the config was loaded
        raise ConfigError([ConfigIssue(cfg.file, cfg.line, f"<Admin>: {exc}")]) from None
