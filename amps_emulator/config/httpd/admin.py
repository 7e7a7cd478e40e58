"""``Admin``: the HTTP monitoring interface (Configuration Reference, "Configuring Monitoring").

Besides its address, statistics and security blocks: ``Header`` (repeatable, each added to
every response; checked by :func:`~config.httpd.headers.parse_header`),
``AccessControlAllowOrigin`` and ``AnonymousPaths`` (regular expressions, checked to compile),
``SessionOptions`` (the attributes of the session cookie: printable ASCII, no ``CR``/``LF``, an
integer ``max-age`` when it has one), ``Certificate``/``PrivateKey``/``Ciphers`` (HTTPS; the
emulator also takes a transport's ``SecureSocketProtocols``), loaded now so that a missing file
or a bad cipher list is an error at its element's line, and Galvanometer's ``Galvanometer``
(``disabled`` turns the emulator's console, its stand-in, off) and ``SQLTransportInetAddr``
(read, without effect: the console sends no queries).
"""

from __future__ import annotations

import re

from ..instance_sections import as_node, inet_addr_of, warn_unavailable_protocols
from ..model import Admin
from ..schema import Ctx, Elem, Spec, at_least, read, text
from ..tls import TLSSetupError, parse_protocols, server_context
from ..units import parse_bool, parse_duration
from ..values import parse_regex
from ..xmlload import Node
from .headers import MAX_HEADERS, header_value, parse_header

__all__ = ["read_admin", "parse_session_options", "DEFAULT_SESSION_OPTIONS"]

#: the session cookie's attributes when SessionOptions is not given (AMPS's default)
DEFAULT_SESSION_OPTIONS = "max-age=86400; path=/; HttpOnly"
_MAX_AGE = re.compile(r"(?:^|;)\s*max-age\s*=\s*([^;]*)", re.IGNORECASE)
_OPTIONS = re.compile(r"[\x20-\x7e]*")

#: paths that change the server's state or hand out its data, which an AnonymousPaths that
#: matches one of them opens to anyone (warned about)
_SENSITIVE = ("/amps/administrator/clients/1/disconnect", "/amps/administrator/transports/t/disable",
              "/amps/administrator/replication/d/downgrade", "/amps/administrator/actions/a",
              "/amps/administrator/authorization/authentication/reset", "/emulator/snapshot",
              "/emulator/journal", "/emulator/sow/t", "/emulator/queues/q")


def parse_session_options(value: str) -> str:
    """``SessionOptions``: cookie attributes, appended to the cookie as written."""
    if len(value) > 1024 or not _OPTIONS.fullmatch(value):
        raise ValueError("cookie attributes are at most 1024 printable ASCII characters, "
                         "without CR or LF")
    m = _MAX_AGE.search(value)
    if m is not None and not m.group(1).strip().isdigit():
        raise ValueError(f"max-age {m.group(1).strip()!r} is not a number of seconds")
    return value


def session_max_age(options: str | None) -> float:
    """Seconds a session cookie lives: its ``max-age``, else a day (AMPS's default's)."""
    m = _MAX_AGE.search(options if options is not None else DEFAULT_SESSION_OPTIONS)
    return float(m.group(1).strip()) if m is not None else 86400.0


def _parse_origin(text: str) -> str | None:
    """``AccessControlAllowOrigin``: a regular expression; a lone ``*`` (not one, but what a
    config that means "any origin" says) keeps the default answer, ``*``."""
    return None if text.strip() == "*" else parse_regex(text)


_ADMIN_SPEC = Spec(
    elems={
        "InetAddr": Elem("inet_addr", text),
        "FileName": Elem("file_name", text),
        "Interval": Elem("interval", at_least(parse_duration, 1.0, "1s")),
        "SQLTransport": Elem("sql_transport", text),
        "ExternalInetAddr": Elem("external_inet_addr", text),
        "WWWAuthenticate": Elem("www_authenticate", header_value),
        "Header": Elem("headers", parse_header, multiple=True),
        "AccessControlAllowOrigin": Elem("allow_origin", _parse_origin),
        "AnonymousPaths": Elem("anonymous_paths", parse_regex),
        "SessionOptions": Elem("session_options", parse_session_options),
        "Certificate": Elem("certificate", text),
        "PrivateKey": Elem("private_key", text),
        "Ciphers": Elem("ciphers", text),
        "SecureSocketProtocols": Elem("secure_socket_protocols", parse_protocols),
        "Galvanometer": Elem("galvanometer", parse_bool),
        "SQLTransportInetAddr": Elem("sql_transport_inet_addr", text),
        # read by config.security.read_security (the loader's _read_security)
        "Authentication": Elem("authentication", node=as_node),
        "Entitlement": Elem("entitlement", node=as_node),
    },
)


def read_admin(node: Node, ctx: Ctx) -> Admin | None:
    """``Admin``; ``None`` without an ``InetAddr`` (AMPS then runs no admin server)."""
    r = read(node, _ADMIN_SPEC, ctx)
    addr = inet_addr_of(r, "<Admin>", ctx)
    headers = r.get("headers", [])
    if len(headers) > MAX_HEADERS:
        ctx.err(node, f"<Admin> has {len(headers)} <Header> elements: at most {MAX_HEADERS}")
        return None
    if addr is None or not r.ok or "inet_addr" not in r.values or not _tls_usable(node, r, ctx):
        return None
    host, port = addr
    challenge = r.get("www_authenticate")
    if challenge is not None:  # (whether it has an effect: loader._warn_unsecured_admin)
        if challenge.split(" ", 1)[0].lower() != "basic":
            ctx.warn(r.nodes["www_authenticate"], f"<WWWAuthenticate> {challenge!r}: the "
                     "emulator sends this challenge but reads only Basic credentials")
    anonymous = r.get("anonymous_paths")
    if anonymous is not None:
        opened = next((p for p in _SENSITIVE if re.search(anonymous, p)), None)
        if opened is not None:
            ctx.warn(r.nodes["anonymous_paths"], f"<AnonymousPaths> {anonymous!r} matches paths "
                     f"such as {opened}: anyone may use them without credentials or entitlement")
    return Admin(
        file=node.file, line=node.line, host=host, port=port, inet_addr=r.values["inet_addr"],
        file_name=r.get("file_name", ":memory:"), interval=r.get("interval", 10.0),
        sql_transport=r.get("sql_transport"), external_inet_addr=r.get("external_inet_addr"),
        www_authenticate=challenge, headers=tuple(headers), allow_origin=r.get("allow_origin"),
        anonymous_paths=anonymous, session_options=r.get("session_options"),
        certificate=r.get("certificate"), private_key=r.get("private_key"),
        ciphers=r.get("ciphers"), secure_socket_protocols=r.get("secure_socket_protocols"),
        galvanometer=r.get("galvanometer", True),
        sql_transport_inet_addr=r.get("sql_transport_inet_addr"),
    )


_TLS_ATTRS = {"Certificate": "certificate", "PrivateKey": "private_key", "Ciphers": "ciphers",
              "SecureSocketProtocols": "secure_socket_protocols"}


def _tls_usable(node: Node, r, ctx: Ctx) -> bool:
    """HTTPS: the certificate, key, ciphers and protocols load now (an error at the line of
    the element at fault); ciphers or protocols without a certificate are warned about."""
    cert, key = r.get("certificate"), r.get("private_key")
    if cert is None and key is None:
        for tag, attr in (("Ciphers", "ciphers"), ("SecureSocketProtocols", "secure_socket_protocols")):
            if attr in r.nodes:
                ctx.warn(r.nodes[attr], f"<{tag}> in <Admin> has no effect: without <Certificate> "
                                        "and <PrivateKey> the Admin interface is plain HTTP")
        return True
    if cert is None or key is None:
        have, missing = ("Certificate", "PrivateKey") if key is None else ("PrivateKey", "Certificate")
        ctx.err(r.nodes[_TLS_ATTRS[have]], f"<Admin>: <{have}> without <{missing}>")
        return False
    protocols = r.get("secure_socket_protocols")
    try:
        server_context(cert, key, r.get("ciphers"), protocols=protocols)
    except TLSSetupError as exc:
        ctx.err(r.nodes.get(_TLS_ATTRS.get(exc.element, ""), node), f"<Admin>: {exc}")
        return False
    warn_unavailable_protocols(ctx, node, r.nodes.get("secure_socket_protocols"), protocols)
    return True
