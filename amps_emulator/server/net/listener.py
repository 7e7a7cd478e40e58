"""The listening side of a configured ``Transport``: its address, protocol and TLS context, its
limits (frame sizes, ``MaxConnections``), and the asyncio protocol factory that puts a
:class:`Connection` (behind the WebSocket or legacy framing the transport names) on every
socket it accepts. A TLS transport accepts through :class:`~.tls_listen.TLSServer`, so a
socket counts against ``MaxConnections`` from its accept, its handshake included.

An ``amps-unix`` transport listens on a Unix-domain socket at its ``FileName``
(:meth:`Listener.listen`): a socket file left there by an earlier server that nobody listens
on any more is replaced; any other file, or a socket another process listens on, is a
configuration error (nothing is removed). The socket is bound, given ``FileMask``'s mode,
then listens, so no client connects before the mode is in place; the file is removed when
the transport stops listening (if it is still the one bound)."""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amps_emulator.config.model import DEFAULT_MAX_FRAME_SIZE_BEFORE_LOGON
from amps_emulator.protocol.legacy_headers import LEGACY_PROTOCOLS
from amps_emulator.server.net.admission import Admits, ConnectionCap, descriptor_share
from amps_emulator.server.net.connection import Connection
from amps_emulator.server.net.legacy_transport import LegacyProtocol
from amps_emulator.server.net.offlining import OfflinePool
from amps_emulator.server.net.tls_listen import TLSServer, bind_tcp
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
                 max_connections: int | None = None, path: str | None = None,
                 file_mask: int | None = None, where: tuple[str, int] = ("", 0)) -> None:
        self.name = name
        #: amps-unix: the socket's path (FileName) and the mode it is given (FileMask)
        self.path = path
        self.file_mask = file_mask
        self.where = where  # the Transport's file and line (errors found when it binds)
        self._bound: tuple[int, int] | None = None  # the socket file made: (device, inode)
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
        """What a client connects to: tcp/tcps for amps, ws/wss for websocket; for amps-unix
        ``unix://localhost:0/...?path=<FileName>`` (the AMPS clients want a host and port
        there, and read the socket's path from ``path``)."""
        # (a legacy protocol's client names the protocol, not the type)
        tail = self.protocol if self.protocol in LEGACY_PROTOCOLS else \
            f"amps/{self.message_type or 'json'}"
        if self.path is not None:
            return f"unix://localhost:0/{tail}?path={self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "ws" if self.protocol == "websocket" else "tcp"
        if self.tls is not None:
            scheme += "s"
        return f"{scheme}://{host}:{self.port}/{tail}"

    async def listen(self, server: ConnectionHost, logon_timeout: float,
                     sock: socket.socket | None = None) -> asyncio.AbstractServer:
        """Start listening (on ``sock``, a TCP socket bound already, if given): sets and
        returns :attr:`server`. A TLS transport's sockets count against ``MaxConnections``
        from their accept (:class:`~.tls_listen.TLSServer`), and a handshake must end within
        the logon timeout (a handshake is the first part of a logon; 0: the loop's default)."""
        loop = server.loop
        if self.path is not None:
            self.server = await loop.create_unix_server(self.protocol_factory(server),
                                                        sock=self._bind_unix())
            return self.server
        srv: asyncio.Server | TLSServer
        if self.tls is not None:
            socks = [sock] if sock is not None else await bind_tcp(self.host, self.port, self.reuse_addr)
            srv = TLSServer(loop, socks, lambda ticket: self.protocol_factory(server, ticket)(),
                            self.tls, logon_timeout or None, self.cap)
            srv.start()
        elif sock is not None:
            srv = await loop.create_server(self.protocol_factory(server), sock=sock)
        else:
            srv = await loop.create_server(self.protocol_factory(server), self.host, self.port,
                                           reuse_address=self.reuse_addr)
        self.server = srv
        self.host, self.port = srv.sockets[0].getsockname()[:2]
        return srv

    def _bind_unix(self) -> socket.socket:
        path = self.path
        assert path is not None
        _replace_stale(path, self.where, self.name)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
            st = os.stat(path)
            self._bound = (st.st_dev, st.st_ino)
            if self.file_mask is not None:  # before listen(): no client connects until then
                os.chmod(path, self.file_mask)
            sock.listen(128)
        except OSError as exc:
            sock.close()
            self.remove_socket_file()
            raise _transport_error(self.where, self.name,
                                   f"cannot listen at {path!r}: {exc.strerror}") from None
        sock.setblocking(False)
        return sock

    def remove_socket_file(self) -> None:
        """amps-unix: remove the socket file this listener made, if it is still that one."""
        bound, self._bound = self._bound, None
        if bound is None or self.path is None:
            return
        try:
            st = os.lstat(self.path)
            if (st.st_dev, st.st_ino) == bound:
                os.unlink(self.path)
        except OSError:
            pass

    def protocol_factory(self, server: ConnectionHost, cap: Admits | None = None
                         ) -> Callable[[], asyncio.Protocol]:
        """What faces an accepted socket, counted by ``cap`` (the transport's cap, unless the
        socket was counted at its accept: its :class:`~.admission.Ticket`)."""
        def make_connection() -> Connection:
            return Connection(server, self)

        if cap is None:
            cap = self.cap
        if self.protocol == "websocket":
            return lambda: WebSocketProtocol(make_connection, self, server, cap)
        if self.protocol in LEGACY_PROTOCOLS:
            protocol = self.protocol
            return lambda: LegacyProtocol(make_connection, self, protocol, cap)
        return lambda: Connection(server, self, cap)


def _replace_stale(path: str, where: tuple[str, int], name: str) -> None:
    """Make room for the socket at ``path``: remove a socket file nobody listens on; refuse
    (a configuration error) anything else there."""
    from amps_emulator.config.instance_sections import unix_path_problem

    problem = unix_path_problem(path)
    if problem is not None:
        raise _transport_error(where, name, f"<FileName> {path!r} {problem}")
    if not os.path.lexists(path):
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)
    try:
        code = probe.connect_ex(path)
    finally:
        probe.close()
    if code in (errno.ECONNREFUSED, errno.ENOENT):  # left by a server gone: replaced
        os.unlink(path)
        return
    raise _transport_error(where, name, f"<FileName> {path!r}: another process listens "
                                        "on that socket")


def _transport_error(where: tuple[str, int], name: str, reason: str) -> Exception:
    from amps_emulator.config import ConfigError, ConfigIssue

    return ConfigError([ConfigIssue(where[0], where[1], f"<Transport> {name!r}: {reason}")])


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
            path=getattr(t, "file_name", None), file_mask=getattr(t, "file_mask", None),
            where=(getattr(t, "file", ""), getattr(t, "line", 0)),
        ))
        out[-1].per_message_deflate = getattr(t, "per_message_deflate", True)
        custom = next((p for p in getattr(config, "protocols", ())
                       if p.name == getattr(t, "protocol_name", None)), None)
        out[-1].http_headers = (*getattr(custom, "http_headers", ()), *getattr(t, "http_headers", ()))
        out[-1].www_authenticate = getattr(custom, "www_authenticate", None)
        out[-1].trusted_admin = getattr(custom, "trusted_admin", False)
    return out
