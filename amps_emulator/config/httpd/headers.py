"""A response header as a config writes it (``<Header>``, ``<HTTPHeader>``): ``Name: value``.

The text is added to responses as it is, so it is checked once, here, at load time: the name
must be an HTTP token, the value printable ASCII (no CR, LF or other control character: a config
value never ends a header line or starts another), and the header must not be one that frames
the message or the connection (``Content-Length``, ``Transfer-Encoding``, ``Connection`` and
the other hop-by-hop headers), which the server alone writes. A WebSocket upgrade's own
headers (``Upgrade``, ``Sec-WebSocket-*``) are refused too. Each header is at most
:data:`MAX_HEADER_BYTES` long, and a section has at most :data:`MAX_HEADERS` of them.
"""

from __future__ import annotations

import re

__all__ = ["MAX_HEADERS", "MAX_HEADER_BYTES", "header_value", "parse_header"]

#: headers one section may add, and the length of one
MAX_HEADERS = 64
MAX_HEADER_BYTES = 4096

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VALUE = re.compile(r"[\t\x20-\x7e]*")
#: written by the server alone: the message's framing and the connection's own headers
_RESERVED = frozenset({
    "content-length", "transfer-encoding", "connection", "keep-alive", "proxy-connection",
    "te", "trailer", "upgrade", "host",
})


def header_value(text: str) -> str:
    """A value the config puts into a header the server writes (``WWWAuthenticate``):
    printable ASCII, so it cannot end the header line."""
    value = text.strip(" \t")
    if len(value) > MAX_HEADER_BYTES or not _VALUE.fullmatch(value):
        raise ValueError("a header value is at most 4096 printable ASCII characters (no CR, LF "
                         "or other control character)")
    return value


def parse_header(text: str) -> tuple[str, str]:
    """``(name, value)`` of a configured header; ``ValueError`` saying why it cannot be sent."""
    if len(text.encode("utf-8", "replace")) > MAX_HEADER_BYTES:
        raise ValueError(f"a header longer than {MAX_HEADER_BYTES} bytes")
    name, colon, value = text.partition(":")
    if not colon:
        raise ValueError(f"{text[:60]!r} is not a header: expected 'Name: value'")
    name, value = name.strip(), value.strip(" \t")
    if not _TOKEN.fullmatch(name):
        raise ValueError(f"{name[:60]!r} is not a header name (letters, digits and !#$%&'*+-.^_`|~)")
    if not _VALUE.fullmatch(value):
        raise ValueError(f"the value of header {name!r} holds a control character (CR, LF, ...) "
                         "or a character that is not ASCII")
    low = name.lower()
    if low in _RESERVED or low.startswith("sec-websocket-"):
        raise ValueError(f"header {name!r} frames the message or the connection: the server "
                         "writes it itself")
    return name, value
