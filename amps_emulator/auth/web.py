"""The web-entitlements module's document source: HTTP(S) GET, or an emulator-only ``file:`` read.

:class:`DocumentSource` fetches the permission document for a user:

* ``http://`` / ``https://`` ResourceURI: a GET with the logon's user and password as HTTP Basic
  credentials (answering a ``Digest`` challenge when the server sends one), the configured
  ``HTTPHeader`` lines, ``ConnectionTimeout`` for the connection and ``RequestTimeout`` for each
  read, and up to ``RetryCount`` more attempts after a connection failure, a timeout or a 5xx.
  401/403 (wrong credentials) and 404 (no such user) are answers, not retried.
* ``file:`` ResourceURI (emulator extension, not AMPS): the file, a path relative to the
  configuration's directory unless absolute (``file:perms/{{USER_NAME}}.json``,
  ``file:///abs/perms/{{USER_NAME}}.json``). A missing file is "no document".

``{{USER_NAME}}`` and ``{{AMPS_USER_NAME}}`` in the ResourceURI (URL-quoted; path-quoted and
without ``/`` for ``file:``) are replaced by the user name. Each ``HTTPHeader`` takes the
tokens of the logon it is sent for (:func:`expand_header`): the user name, the password, the
logon's client name, correlation id and message type, the connection's name and remote
address (a request made for the identity alone, as ``EntitlementOnly`` makes, knows only the
user name; a token it has no value for is sent empty).

The blocking work runs in a worker thread: :meth:`DocumentSource.fetch` is ``async`` and awaits it,
so the event loop never waits on the network or the disk.

Documents are cached per user while the user has a connection (:meth:`acquire` / :meth:`release`);
:meth:`recheck` re-fetches those older than ``EntitlementTimeout`` and names the users whose
document changed or vanished (the server disconnects them); :meth:`reload` forgets every document
(``POST /emulator/reset``, the reset actions).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import http.client
import os
import re
import secrets
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import NamedTuple

from .config import WebOptions
from .documents import PermissionDocument, PermissionDocumentError, parse_document

__all__ = ["DocumentSource", "FetchError", "LogonContext", "expand_header", "substitute"]

_TOKEN = re.compile(r"\{\{\s*(USER_NAME|AMPS_USER_NAME)\s*\}\}")
_HEADER_TOKEN = re.compile(r"\{\{\s*([A-Z_]+)\s*\}\}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: the largest response body read (a permission document is small)
MAX_BODY = 4 * 1024 * 1024


class FetchError(Exception):
    """No document for the user: HTTP status, network failure or unreadable file."""

    def __init__(self, user: str, reason: str, status: int | None = None) -> None:
        super().__init__(f"permission document for user {user!r}: {reason}")
        self.user = user
        self.reason = reason
        self.status = status


class LogonContext(NamedTuple):
    """What a logon says of itself and its connection, for the ``HTTPHeader`` tokens."""

    client_name: str = ""
    connection_name: str = ""
    correlation_id: str = ""
    message_type: str = ""
    remote_address: str = ""


def expand_header(value: str, user: str, password: str | None,
                  context: LogonContext | None) -> str:
    """An ``HTTPHeader`` value with the Configuration Reference's tokens replaced:
    ``AMPS_USER_NAME`` (and the legacy ``USER_NAME``), ``AMPS_PASSWORD``, ``AMPS_CLIENT_NAME``,
    ``AMPS_CONNECTION_NAME``, ``AMPS_CORRELATION_ID`` (and the legacy ``CORRELATION_ID``),
    ``AMPS_MESSAGE_TYPE``, ``AMPS_REMOTE_ADDRESS``. Without a ``context`` only the user name
    is known, the other tokens are empty; an unknown token is left as written. Control
    characters in a value are dropped: a correlation id cannot add a header line."""
    ctx = context if context is not None else LogonContext()
    values = {"AMPS_USER_NAME": user, "USER_NAME": user,
              "AMPS_PASSWORD": password or "",
              "AMPS_CLIENT_NAME": ctx.client_name, "AMPS_CONNECTION_NAME": ctx.connection_name,
              "AMPS_CORRELATION_ID": ctx.correlation_id, "CORRELATION_ID": ctx.correlation_id,
              "AMPS_MESSAGE_TYPE": ctx.message_type, "AMPS_REMOTE_ADDRESS": ctx.remote_address}

    def one(m: re.Match[str]) -> str:
        got = values.get(m.group(1))
        return m.group(0) if got is None else _CONTROL.sub("", got)

    return _HEADER_TOKEN.sub(one, value)


def substitute(template: str, user: str, quote: Callable[[str], str] | None = None) -> str:
    """Replace ``{{USER_NAME}}`` / ``{{AMPS_USER_NAME}}`` by ``user`` (passed through ``quote``)."""
    value = quote(user) if quote is not None else user
    return _TOKEN.sub(lambda m: value, template)


def _digest_header(challenge: str, method: str, uri: str, user: str, password: str) -> str | None:
    """An ``Authorization: Digest`` value answering ``challenge`` (RFC 7616, qop=auth), or None."""
    if not challenge.lower().startswith("digest "):
        return None
    params = dict((k.lower(), v1 or v2) for k, v1, v2 in
                  re.findall(r'(\w+)\s*=\s*(?:"([^"]*)"|([^\s,]+))', challenge[7:]))
    realm, nonce = params.get("realm"), params.get("nonce")
    if realm is None or nonce is None:
        return None
    algorithm = params.get("algorithm", "MD5").upper()
    hashes: dict[str, Callable[[bytes], str]] = {
        "MD5": lambda b: hashlib.md5(b, usedforsecurity=False).hexdigest(),
        "SHA-256": lambda b: hashlib.sha256(b).hexdigest(),
    }
    h = hashes.get(algorithm)
    if h is None:
        return None
    ha1 = h(f"{user}:{realm}:{password}".encode())
    ha2 = h(f"{method}:{uri}".encode())
    qops = [q.strip() for q in params.get("qop", "").split(",") if q.strip()]
    fields = [f'username="{user}"', f'realm="{realm}"', f'nonce="{nonce}"', f'uri="{uri}"',
              f"algorithm={algorithm}"]
    if "auth" in qops:
        cnonce = secrets.token_hex(8)
        response = h(f"{ha1}:{nonce}:00000001:{cnonce}:auth:{ha2}".encode())
        fields += ["qop=auth", "nc=00000001", f'cnonce="{cnonce}"']
    else:
        response = h(f"{ha1}:{nonce}:{ha2}".encode())
    fields.append(f'response="{response}"')
    if "opaque" in params:
        fields.append(f'opaque="{params["opaque"]}"')
    return "Digest " + ", ".join(fields)


def _secret(password: str | None) -> bytes:
    return (password or "").encode("utf-8", "surrogatepass")


class _Cached:
    """A user's document, the password it was fetched with (a re-check asks with the same
    credentials), when, and how many connections use it."""

    __slots__ = ("document", "password", "context", "fetched", "refs")

    def __init__(self, document: PermissionDocument, password: str | None, fetched: float,
                 context: LogonContext | None = None) -> None:
        self.document = document
        self.password = password
        self.context = context  # the logon it was fetched for (a re-check sends its headers)
        self.fetched = fetched
        self.refs = 0


class DocumentSource:
    """Fetches, parses and caches permission documents for one web-entitlements configuration."""

    def __init__(self, options: WebOptions, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        self._clock = clock
        self._cache: dict[str, _Cached] = {}
        self._lock = threading.Lock()
        self._ssl: ssl.SSLContext | None = None
        #: requests made (HTTP attempts and file reads), for tests and the Admin tree
        self.requests = 0

    # -- fetching (blocking; run in a thread by fetch())
    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            o = self.options
            ctx = ssl.create_default_context(cafile=self._path(o.ca_file) if o.ca_file else None)
            if o.certificate:
                ctx.load_cert_chain(self._path(o.certificate), self._path(o.key) if o.key else None)
            if o.allow_unverified_peer or o.allow_self_signed:
                # Python's ssl cannot accept "self-signed only": both switches turn verification off
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            self._ssl = ctx
        return self._ssl

    def _path(self, path: str) -> str:
        return path if os.path.isabs(path) else os.path.join(self.options.config_dir, path)

    def url_for(self, user: str) -> str:
        # quoted without "/" so a user name cannot step out of the path (file:) or change it
        return substitute(self.options.resource_uri, user, lambda u: urllib.parse.quote(u, safe=""))

    def fetch_sync(self, user: str, password: str | None,
                   context: LogonContext | None = None) -> bytes:
        """The document's bytes; :class:`FetchError` when there is none. Blocking.
        ``context``: the logon the request is made for (its ``HTTPHeader`` tokens)."""
        if self.options.resource_uri.startswith("file:"):
            return self._read_file(user)
        url = self.url_for(user)
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise FetchError(user, f"unsupported ResourceURI {url!r} (expected http://, https:// or file:)")
        attempts = self.options.retry_count + 1
        last: FetchError | None = None
        for _ in range(attempts):
            try:
                return self._http_get(user, password, parts, context)
            except FetchError as e:
                if e.status is not None and e.status < 500:
                    raise
                last = e
        assert last is not None
        raise last

    def _read_file(self, user: str) -> bytes:
        self.requests += 1
        if user in ("", ".", "..") or any(c in user for c in "/\\\0"):
            # the name is a file name here: it must not be able to name another file
            raise FetchError(user, "user name not usable in a file: ResourceURI", 404)
        template = self.options.resource_uri
        rest = template[len("file:"):]
        if rest.startswith("//"):
            rest = urllib.parse.urlsplit(template).path
        path = substitute(urllib.parse.unquote(rest), user)
        if not template.startswith("file://"):
            path = self._path(path)
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_BODY + 1)
        except OSError as e:
            raise FetchError(user, f"cannot read {path}: {e.strerror or e}",
                             404 if isinstance(e, FileNotFoundError) else None) from None
        if len(data) > MAX_BODY:
            raise FetchError(user, f"{path} is larger than {MAX_BODY} bytes")
        return data

    def _http_get(self, user: str, password: str | None, parts: urllib.parse.SplitResult,
                  context: LogonContext | None = None) -> bytes:
        o = self.options
        self.requests += 1
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        headers: dict[str, str] = {"Accept": "application/json", "Connection": "close"}
        for line in o.headers:
            name, _, value = line.partition(":")
            headers[name.strip()] = expand_header(value.strip(), user, password, context)
        send_credentials = not o.entitlement_only and password is not None
        if send_credentials:
            token = base64.b64encode(f"{user}:{password}".encode("utf-8", "surrogatepass")).decode()
            headers["Authorization"] = f"Basic {token}"
        status, challenge, body = self._request(user, parts, target, headers)
        if status == 401 and send_credentials and challenge and password is not None:
            digest = _digest_header(challenge, "GET", target, user, password)
            if digest is not None:
                headers["Authorization"] = digest
                status, challenge, body = self._request(user, parts, target, headers)
        if status != 200:
            raise FetchError(user, f"HTTP {status} from {parts.scheme}://{parts.netloc}{parts.path}", status)
        return body

    def _request(self, user: str, parts: urllib.parse.SplitResult, target: str, headers: dict[str, str]
                 ) -> tuple[int, str | None, bytes]:
        o = self.options
        host = parts.hostname or ""
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(host, parts.port, timeout=o.connection_timeout,
                                               context=self._ssl_context())
        else:
            conn = http.client.HTTPConnection(host, parts.port, timeout=o.connection_timeout)
        try:
            conn.connect()
            if conn.sock is not None:
                conn.sock.settimeout(o.request_timeout)
            conn.request("GET", target, headers=headers)
            resp = conn.getresponse()
            body = resp.read(MAX_BODY + 1)
            if len(body) > MAX_BODY:
                raise FetchError(user, f"response larger than {MAX_BODY} bytes")
            return resp.status, resp.getheader("WWW-Authenticate"), body
        except TimeoutError:
            raise FetchError(user, f"timed out ({parts.scheme}://{parts.netloc})") from None
        except (OSError, http.client.HTTPException) as e:
            raise FetchError(user, f"{type(e).__name__}: {e}") from None
        finally:
            conn.close()

    # -- the cache and the async interface
    async def fetch(self, user: str, password: str | None,
                    context: LogonContext | None = None) -> PermissionDocument:
        """Fetch and parse off the event loop; :class:`FetchError` or
        :class:`PermissionDocumentError` when there is no usable document."""
        data = await asyncio.to_thread(self.fetch_sync, user, password, context)
        return parse_document(data, user)

    async def document(self, user: str, password: str | None,
                       context: LogonContext | None = None) -> PermissionDocument:
        """The user's document: cached (fetched with the same password) or fetched now for
        the logon ``context``."""
        with self._lock:
            cached = self._cache.get(user)
            if cached is not None and hmac.compare_digest(_secret(cached.password), _secret(password)):
                return cached.document
        doc = await self.fetch(user, password, context)
        with self._lock:
            old = self._cache.get(user)
            entry = _Cached(doc, password, self._clock(), context)
            entry.refs = old.refs if old is not None else 0
            self._cache[user] = entry
        return doc

    def acquire(self, user: str) -> None:
        """A connection of ``user`` logged on: keep the cached document while it lives."""
        with self._lock:
            cached = self._cache.get(user)
            if cached is not None:
                cached.refs += 1

    def release(self, user: str) -> None:
        """A connection of ``user`` closed: the last one drops the cached document."""
        with self._lock:
            cached = self._cache.get(user)
            if cached is not None:
                cached.refs -= 1
                if cached.refs <= 0:
                    del self._cache[user]

    def cached_users(self) -> list[str]:
        with self._lock:
            return list(self._cache)

    def reload(self) -> None:
        """Forget every document: the next logon of each user fetches it again."""
        with self._lock:
            self._cache.clear()

    async def recheck(self, *, force: bool = False) -> list[str]:
        """Re-fetch documents older than ``EntitlementTimeout`` (all with ``force``); return the
        users whose document changed or can no longer be fetched, forgetting theirs."""
        timeout = self.options.entitlement_timeout
        if timeout is None and not force:
            return []
        now = self._clock()
        with self._lock:
            due = [(u, c) for u, c in self._cache.items() if force or (timeout is not None
                                                                       and now - c.fetched >= timeout)]
        changed: list[str] = []
        for user, cached in due:
            try:
                data = await asyncio.to_thread(self.fetch_sync, user, cached.password,
                                               cached.context)
                same = data == cached.document.raw
            except (FetchError, PermissionDocumentError):
                same = False
            with self._lock:
                if self._cache.get(user) is cached:
                    if same:
                        cached.fetched = now
                    else:
                        del self._cache[user]
            if not same:
                changed.append(user)
        return changed
