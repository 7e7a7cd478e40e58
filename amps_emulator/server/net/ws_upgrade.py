"""Who a websocket upgrade logs on, for a custom ``websocket`` protocol's options
(Configuration Reference, "Websocket Options"; :mod:`server.net.websocket` asks).

* ``WWWAuthenticate`` (``Basic realm="..."``): the upgrade request must carry
  ``Authorization: Basic`` credentials that the transport's modules accept (as a logon's), else
  it is answered 401 with the challenge and closed. Accepted, the connection is that user's:
  its ``logon`` command is accepted without its password being checked again, and refused if
  it names another user. With no security block in the config anyone is accepted (as the
  default modules do) but credentials must still be sent.
* ``TrustedAdmin``: an upgrade carrying a live Admin session cookie (``amps_admin_session``,
  set by the Admin interface, :mod:`server.ops.admin_access`) logs on with the credentials
  that session logged on with, through the transport's modules, and needs no other
  credentials. A browser sends that cookie to any port of the host, so a cross-site page could
  make it open a connection: the cookie is honoured only when the upgrade carries no
  ``Origin`` or one of the host the upgrade was addressed to (the Admin console's page).

The credentials and cookie are read from the request head, which the transport's
``MaxFrameSizeBeforeLogon`` and the WebSocket parser's own limits bound.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from amps_emulator.auth import Session
    from amps_emulator.server.core.ports import ConnectionHost, ListenerInfo

__all__ = ["ADMIN_COOKIE", "TOKEN", "Verdict", "admin_token", "basic_credentials", "decide"]

#: the Admin interface's session cookie, and the form of its token (256 bits, urlsafe base64)
ADMIN_COOKIE = "amps_admin_session"
TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("latin-1")


def basic_credentials(headers: Iterable[tuple[Any, Any]]) -> tuple[str, str | None] | None:
    """``(user, password)`` of the first ``Authorization: Basic`` header among ``(name,
    value)`` pairs (str or bytes, any case); None without one; ``ValueError`` for one that
    does not decode."""
    for name, value in headers:
        if _text(name).lower() != "authorization":
            continue
        scheme, _, encoded = _text(value).strip().partition(" ")
        if scheme.lower() != "basic":
            continue
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            raise ValueError("bad Basic credentials") from None
        user, _, password = decoded.partition(":")
        return user, password
    return None


def admin_token(headers: Iterable[tuple[Any, Any]]) -> str | None:
    """The Admin session token the ``Cookie`` headers carry (a well-formed one), else None."""
    for name, value in headers:
        if _text(name).lower() != "cookie":
            continue
        for part in _text(value).split(";"):
            key, _, token = part.strip().partition("=")
            if key == ADMIN_COOKIE and TOKEN.fullmatch(token):
                return token
    return None


class Verdict(NamedTuple):
    """An upgrade's log-on: refused (``detail`` says why), or accepted as ``user`` with its
    ``session`` (both None: nobody in particular, the logon command decides as usual)."""

    accepted: bool
    user: str | None = None
    session: Session | None = None
    detail: str = ""


def _same_host(headers: list[tuple[str, str]]) -> bool:
    """Whether the request has no ``Origin``, or one of the host it was addressed to."""
    origin = next((v for n, v in headers if n.lower() == "origin"), None)
    if origin is None:
        return True
    host = next((v for n, v in headers if n.lower() == "host"), "")
    try:
        want = urlsplit("//" + host).hostname
        return want is not None and urlsplit(origin).hostname == want
    except ValueError:
        return False


async def decide(headers: list[tuple[str, str]], listener: ListenerInfo, host: ConnectionHost,
                 peer: str) -> Verdict:
    """Who the upgrade with request ``headers`` logs on (module docstring)."""
    if listener.trusted_admin and _same_host(headers):
        token = admin_token(headers)
        creds = host.admin_credentials(token) if token is not None else None
        if creds is not None:
            outcome = await host.upgrade_logon(listener.name, creds[0], creds[1], peer)
            if outcome is not None and outcome.session is not None:
                return Verdict(True, creds[0], outcome.session)
    if listener.www_authenticate is None:
        return Verdict(True)
    try:
        creds = basic_credentials(headers)
    except ValueError as exc:
        return Verdict(False, detail=str(exc))
    if creds is None:
        return Verdict(False, detail="no Basic credentials")
    outcome = await host.upgrade_logon(listener.name, creds[0], creds[1], peer)
    if outcome is None:  # no security configured: anyone
        return Verdict(True)
    if outcome.session is None:
        return Verdict(False, detail=f"{outcome.reason}: {outcome.detail}")
    return Verdict(True, creds[0], outcome.session)
