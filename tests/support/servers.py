"""A real emulator server on port 0, in this process, for tests and benches.

``ServerThread`` is :class:`amps_emulator.embedded.EmbeddedServer` (what the pytest plugin
runs too): ``ServerThread(config, clock=None).start()`` returns once the server accepts
connections; ``call(fn)`` runs ``fn`` on the server's loop; ``stop()``.

``start_server(xml)`` is the usual way in: a config as XML text (``config_xml`` writes the
small one most tests extend), started. For a server in a child process (SIGKILL, restart on
the same data) see :mod:`tests.support.procserver`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from amps_emulator.embedded import EmbeddedServer

T = TypeVar("T")


class ServerThread(EmbeddedServer):
    """The embedded server, owning its ports (so a disabled transport stops listening), plus
    requests to its admin interface."""

    def __init__(self, config: Any, **kwargs: Any) -> None:
        kwargs.setdefault("hold_ports", False)
        super().__init__(config, **kwargs)

    @property
    def admin_uri(self) -> str:
        return self.server.admin.uri  # type: ignore[union-attr]

    def http(self, path: str, method: str = "GET", expect: int = 200) -> Any:
        """One request to the admin interface: the decoded JSON body (text for other types)."""
        import json
        import urllib.error
        import urllib.request

        req = urllib.request.Request(self.admin_uri + path, method=method,
                                     data=b"" if method == "POST" else None)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                status, ctype, body = r.status, r.headers.get("content-type", ""), r.read()
        except urllib.error.HTTPError as exc:
            status, ctype, body = exc.code, exc.headers.get("content-type", ""), exc.read()
        assert status == expect, (path, status, body[:500])
        return json.loads(body) if ctype.startswith("application/json") else body.decode()


def start_server(xml: str, name: str = "test.xml", **kwargs: Any) -> ServerThread:
    """A server thread running the config ``xml`` (``name``: its file name in messages;
    ``kwargs``: more :class:`ServerThread` arguments, e.g. ``clock``)."""
    from amps_emulator.config import loads_config

    return ServerThread(loads_config(xml, name), **kwargs).start()


def config_xml(data_dir, txlog_topics=(".*",), extra: str = "", durability: str = "group") -> str:
    """A small AMPS config with a transaction log recording ``txlog_topics`` (regexes)."""
    topics = "".join(f"<Topic><Name>{t}</Name><MessageType>json</MessageType></Topic>"
                     for t in txlog_topics)
    return f"""<AMPSConfig>
  <Name>test</Name>
  <Transports><Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <MessageType>json</MessageType><Protocol>amps</Protocol></Transport></Transports>
  <TransactionLog><JournalDirectory>{data_dir}/journal</JournalDirectory>
    <Durability>{durability}</Durability>{topics}</TransactionLog>
  {extra}
</AMPSConfig>"""


def until(pred: Callable[[], T], timeout: float = 10.0) -> T:
    """``pred()`` polled until it is truthy or ``timeout`` seconds passed; its last value.
    For state only visible by asking (an admin resource, a file): a message a client
    receives is waited for with :class:`tests.support.clients.Collector` instead."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.02)  # polling an HTTP resource with a deadline, not waiting blindly


@contextmanager
def turn_held(srv: Any) -> Iterator[None]:
    """Inside, the end of ``srv``'s turn is never scheduled (as when it is a long pass of
    another connection's frames away): only what the server writes between turns goes out.
    ``srv``: a server thread or an embedded server (``call`` runs on its loop).

    :class:`~amps_emulator.server.core.turn.Turn` has no public way to hold its end, so
    this sets its private ``_scheduled`` flag (the flag ``request`` checks)."""
    turn = srv.server.turn

    def hold() -> None:
        assert not turn._scheduled
        turn._scheduled = True

    srv.call(hold)
    try:
        yield
    finally:
        srv.call(lambda: (setattr(turn, "_scheduled", False), turn.request()))


def replicated_pair(data_dir: Any, extra_sow: str = "") -> list[ServerThread]:
    """Started instances A and B replicating to each other (sync), each with the SOW topic
    ``orders`` (key ``/id``), ``extra_sow`` in its ``SOW`` block and an Admin interface,
    once A's link to B is up. The caller stops them."""
    from pathlib import Path

    from amps_emulator.config import loads_config
    from amps_emulator.pair import pair_config
    from tests.support.procserver import free_port

    ports = free_port(), free_port()
    names = ("A", "B")
    servers: list[ServerThread] = []
    try:
        for i, name in enumerate(names):
            xml = pair_config(name, names[1 - i], repl_port=ports[i], peer_repl_port=ports[1 - i],
                              data_dir=Path(data_dir) / name.lower(), sow_topics=[("orders", "/id")])
            servers.append(ServerThread(loads_config(xml.replace("</SOW>", extra_sow + "</SOW>"),
                                                     f"{name}.xml")).start())
        a = servers[0]
        repl = a.server.replication  # type: ignore[union-attr]
        assert until(lambda: a.call(lambda: repl.state("B").connected)), "A's link to B is down"
    except BaseException:
        for s in servers:
            s.stop()
        raise
    return servers


__all__ = ["ServerThread", "config_xml", "replicated_pair", "start_server", "turn_held", "until"]
