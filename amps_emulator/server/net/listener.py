"""The listening side of a configured ``Transport``: its address, protocol and TLS context, its
limits (frame sizes, ``MaxConnections``), and the asyncio protocol factory that puts a
:class:`Connection` (behind the WebSocket or legacy framing the transport names) on every
socket it accepts."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amps_emulator.config.model import DEFAULT_MAX_FRAME_SIZE_BEFORE_LOGON
from amps_emulator.protocol.legacy_headers import LEGACY_PROTOCOLS
from amps_emulator.server.net.admission import ConnectionCap, descriptor_share
from amps_emulator.server.net.connection import Connection
from amps_emulator.server.net.legacy_transport import LegacyProtocol
from amps_emulator.server.net.offlining import OfflinePool
from amps_emulator.server.net.websocket import WebSocketProtocol

if TYPE_CHECKING:
    from amps_emulator.server.core.ports import ConnectionHost

__all__ = ["Listener", "listeners_from_config", "tls_context"]


class Listener:
    """One configured transport, bound."""

    #: PerMessageDeflate (websocket): negotiated with a client that offers it (AMPS's default)
    per_message_deflate = True
    #: websocket: the transport's and its protocol's HTTPHeader, the protocol's WWWAuthenticate
    #: and TrustedAdmin (:class:`~server.core.ports.ListenerInfo`)
    http_headers: tuple[tuple[str, str], ...] = ()
    www_authenticate: str | None = None
    trusted_admin = False

    def __init__(self, name: str, host: str, port: int, message_type: str | None, protocol: str,
                 max_frame: int, out_limit: int, reuse_addr: bool = True,
                 tls: ssl.SSLContext | None = None, offline_pool: OfflinePool | None = None,
                 offline_capacity: float = 0.5, *,
                 logon_frame_limit: int = DEFAULT_MAX_FRAME_SIZE_BEFORE_LOGON,
                 max_connections: int | None = None) -> None:
        self.name = name
        self.host = host
        self.port = port
        #: the transport's MessageType; None: any type the instance knows
        self.message_type = message_type
        self.protocol = protocol  # "amps", "websocket", or a legacy "fix", "nvfix", "xml"
        self.max_frame = max_frame
        self.out_limit = out_limit
        #: MaxFrameSizeBeforeLogon: the largest frame (and output) before a logon
        self.logon_frame_limit = min(logon_frame_limit, max_frame)
        #: MaxConnections: the sockets this transport keeps open at once
        self.cap = ConnectionCap(name, max_connections)
        self.reuse_addr = reuse_addr  # SO_REUSEADDR (Transport/ReuseAddr)
        self.tls = tls
        #: slow client offlining of its connections (None: none configured)
        self.offline_pool = offline_pool
        #: ClientMaxCapacity: the share of the pool's limits one of its clients may use
        self.offline_capacity = offline_capacity
        self.server: asyncio.AbstractServer | None = None
        #: connections paused for capacity (:attr:`server.core.ports.ListenerInfo.throttled`)
        self.throttled = 0

    @property
    def uri(self) -> str:
        """What a client connects to: tcp/tcps for amps, ws/wss for websocket."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "ws" if self.protocol == "websocket" else "tcp"
        if self.tls is not None:
            scheme += "s"
        if self.protocol in LEGACY_PROTOCOLS:  # the client names the protocol, not the type
            return f"{scheme}://{host}:{self.port}/{self.protocol}"
        return f"{scheme}://{host}:{self.port}/amps/{self.message_type or 'json'}"

    def tls_options(self, logon_timeout: float) -> dict[str, Any]:
        """``create_server``'s TLS arguments: the context, and a handshake that must end
        within the logon timeout (a handshake is the first part of a logon)."""
        if self.tls is None:
            return {}
        if not logon_timeout:
            return {"ssl": self.tls}
        return {"ssl": self.tls, "ssl_handshake_timeout": logon_timeout}

    def protocol_factory(self, server: ConnectionHost) -> Callable[[], asyncio.Protocol]:
        def make_connection() -> Connection:
            return Connection(server, self)

        cap = self.cap
        if self.protocol == "websocket":
            return lambda: WebSocketProtocol(make_connection, self, server, cap)
        if self.protocol in LEGACY_PROTOCOLS:
            protocol = self.protocol
            return lambda: LegacyProtocol(make_connection, self, protocol, cap)
        return lambda: Connection(server, self, cap)


def tls_context(t: Any) -> ssl.SSLContext | None:
    if not getattr(t, "tls", False):
        return None
    from amps_emulator.config import ConfigError, ConfigIssue
    from amps_emulator.config.tls import TLSSetupError, server_context

    try:
        return server_context(t.certificate, t.private_key, t.ciphers,
                              verify_client=getattr(t, "verify_client", False),
                              ca_file=getattr(t, "ca_file", None), ca_path=getattr(t, "ca_path", None),
                              protocols=getattr(t, "secure_socket_protocols", None))
    except TLSSetupError as exc:  # the files changed since the config was loaded
        raise ConfigError([ConfigIssue(t.file, t.line, f"<Transport> {t.name!r}: {exc}")]) from None


def listeners_from_config(config: Any) -> list[Listener]:
    enabled = [t for t in config.transports if getattr(t, "enabled", True)]
    share = descriptor_share(len(enabled))  # a transport without MaxConnections
    out = []
    shared: OfflinePool | None = None  # the instance's pool, for the transports without one
    for t in enabled:
        cap = getattr(t, "max_connections", None)
        policy = getattr(t, "slow_clients", None)
        pool = None
        if policy is not None and policy.memory_limit is not None:
            if policy.own_pool:
                pool = OfflinePool(t.name, policy)
            else:
                pool = shared = shared or OfflinePool("(instance)", policy)
        out.append(Listener(
            name=t.name, host=t.host or "0.0.0.0", port=t.port,
            message_type=t.message_type, protocol=t.protocol or "amps",
            max_frame=t.max_frame_size, out_limit=t.client_outbound_limit,
            reuse_addr=getattr(t, "reuse_addr", True),
            tls=tls_context(t), offline_pool=pool,
            offline_capacity=policy.capacity if policy is not None else 0.5,
            logon_frame_limit=getattr(t, "max_frame_size_before_logon",
                                      DEFAULT_MAX_FRAME_SIZE_BEFORE_LOGON),
            max_connections=cap if cap is not None else share,
        ))
        out[-1].per_message_deflate = getattr(t, "per_message_deflate", True)
        custom = next((p for p in getattr(config, "protocols", ())
                       if p.name == getattr(t, "protocol_name", None)), None)
        out[-1].http_headers = (*getattr(custom, "http_headers", ()), *getattr(t, "http_headers", ()))
        out[-1].www_authenticate = getattr(custom, "www_authenticate", None)
        out[-1].trusted_admin = getattr(custom, "trusted_admin", False)
    return out
