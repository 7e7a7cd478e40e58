"""WebSocket compression: the permessage-deflate extension (RFC 7692) of a ``websocket``
transport, as its ``PerMessageDeflate`` says (AMPS's default: enabled).

A client that offers the extension in its upgrade request (browsers do) gets it in the
response, negotiated by the ``websockets`` package: with the parameters the client asked for
where RFC 7692 lets the server agree, and a 4 KiB compression window for what the server
sends (the package's advice for a server holding many connections). A client that offers
nothing, or a transport with ``<PerMessageDeflate>disabled</PerMessageDeflate>``, exchanges
plain frames.

The inflated size of what a client sends counts against the frame size limit in force, the
transport's ``MaxFrameSize``, or its ``MaxFrameSizeBeforeLogon`` until the client has logged
on: a frame is inflated no further than that limit (``websockets`` closes the connection
with 1009, message too big, past it), so a small compressed frame cannot make the server
hold a large message ("zip bomb"), before the logon least of all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from websockets.extensions.base import Extension, ServerExtensionFactory
from websockets.extensions.permessage_deflate import PerMessageDeflate, ServerPerMessageDeflateFactory
from websockets.frames import Frame
from websockets.typing import ExtensionParameter

#: the server's LZ77 window (2**12 bytes) and zlib memory level for what it sends
SERVER_WINDOW_BITS = 12
MEM_LEVEL = 5


class _BoundedDeflate(PerMessageDeflate):
    """permessage-deflate whose inflation of a frame stops at ``limit()`` bytes."""

    limit: Callable[[], int]

    def decode(self, frame: Frame, *, max_size: int | None = None) -> Frame:
        bound = self.limit()
        return super().decode(frame, max_size=bound if max_size is None else min(max_size, bound))


class _BoundedDeflateFactory(ServerPerMessageDeflateFactory):
    def __init__(self, limit: Callable[[], int]) -> None:
        super().__init__(server_max_window_bits=SERVER_WINDOW_BITS, compress_settings={"memLevel": MEM_LEVEL})
        self._limit = limit

    def process_request_params(self, params: Sequence[ExtensionParameter],
                               accepted_extensions: Sequence[Extension]) -> tuple[list[ExtensionParameter],
                                                                                  PerMessageDeflate]:
        response, agreed = super().process_request_params(params, accepted_extensions)
        bounded = _BoundedDeflate(agreed.remote_no_context_takeover, agreed.local_no_context_takeover,
                                  agreed.remote_max_window_bits, agreed.local_max_window_bits,
                                  self.compress_settings)
        bounded.limit = self._limit
        return response, bounded


def deflate_extensions(enabled: bool, limit: Callable[[], int]) -> list[ServerExtensionFactory] | None:
    """The extensions a transport's WebSocket handshake may negotiate (None: none);
    ``limit()``: the frame size limit in force for the connection."""
    if not enabled:
        return None
    return [_BoundedDeflateFactory(limit)]


__all__ = ["deflate_extensions"]
