"""What a protocol that wraps a client's socket (the WebSocket framing, the legacy fix/nvfix/xml
headers) passes straight through to it, as the transport of the :class:`Connection` behind it.

Both wrappers sit between the socket's transport (asyncio's or uvloop's, which are not
``asyncio.Transport`` subclasses: hence :class:`StreamSocket`) and a Connection, and translate
only what is written and read; flow control, buffer sizes, peer information and closing go to
the socket as they are.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol, runtime_checkable

__all__ = ["StreamSocket", "WrappedSocket"]


@runtime_checkable
class StreamSocket(Protocol):
    """What a wrapper uses of the socket's transport."""

    def write(self, data: bytes) -> None: ...
    def is_closing(self) -> bool: ...
    def close(self) -> None: ...
    def abort(self) -> None: ...
    def get_write_buffer_size(self) -> int: ...
    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None: ...
    def get_extra_info(self, name: str, default: Any = None) -> Any: ...
    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...


class WrappedSocket:
    """The pass-through half of a wrapper's transport (``sock``: None until connected)."""

    sock: StreamSocket | None

    def attach(self, transport: asyncio.BaseTransport) -> None:
        """Take the socket's transport (``connection_made``)."""
        if not isinstance(transport, StreamSocket):
            raise TypeError("a wrapped connection needs a stream transport")
        self.sock = transport

    def get_write_buffer_size(self) -> int:
        return self.sock.get_write_buffer_size() if self.sock is not None else 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if self.sock is not None:
            self.sock.set_write_buffer_limits(high=high, low=low)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.sock.get_extra_info(name, default) if self.sock is not None else default

    def pause_reading(self) -> None:
        if self.sock is not None:
            self.sock.pause_reading()

    def resume_reading(self) -> None:
        if self.sock is not None:
            self.sock.resume_reading()

    def is_closing(self) -> bool:
        return self.sock is None or self.sock.is_closing()

    def abort(self) -> None:
        if self.sock is not None:
            self.sock.abort()
