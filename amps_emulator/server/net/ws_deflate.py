"""WebSocket compression: the permessage-deflate extension (RFC 7692) of a ``websocket``
transport, as its ``PerMessageDeflate`` says (AMPS's default: enabled).

A client that offers the extension in its upgrade request (browsers do) gets it in the
response, negotiated by the ``websockets`` package: with the parameters the client asked for
where RFC 7692 lets the server agree, and a 4 KiB compression window for what the server
sends (the package's advice for a server holding many connections). A client that offers
nothing, or a transport with ``<PerMessageDeflate>disabled</PerMessageDeflate>``, exchanges
plain frames.

The inflated size of what a client sends counts against the transport's ``MaxFrameSize``:
``websockets`` decompresses a message no further than its limit and closes the connection
(1009, message too big) past it, so a small compressed frame cannot make the server hold a
large message ("zip bomb").
"""

from __future__ import annotations

from websockets.extensions.base import ServerExtensionFactory
from websockets.extensions.permessage_deflate import ServerPerMessageDeflateFactory

#: the server's LZ77 window (2**12 bytes) and zlib memory level for what it sends
SERVER_WINDOW_BITS = 12
MEM_LEVEL = 5


def deflate_extensions(enabled: bool) -> list[ServerExtensionFactory] | None:
    """The extensions a transport's WebSocket handshake may negotiate (None: none)."""
    if not enabled:
        return None
    return [ServerPerMessageDeflateFactory(server_max_window_bits=SERVER_WINDOW_BITS,
                                           compress_settings={"memLevel": MEM_LEVEL})]


__all__ = ["deflate_extensions"]
