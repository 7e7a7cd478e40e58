"""Two emulators replicating to each other as an AMPS HA pair, for tests of HA applications.

:func:`pair_config` writes the configuration of one instance of a pair (a client transport, an
``amps-replication`` transport, a transaction log recording every JSON topic, one
``Replication/Destination`` naming the other instance, ``PassThrough .*``); :class:`EmbeddedPair`
runs two such instances in this process (each on its own thread and event loop, as
:class:`~amps_emulator.embedded.EmbeddedServer`) and gives what an ``AMPS.HAClient`` needs:
both URIs. It also drives the links the way a test of failover wants: cut one and restore it,
hold a destination's acks (the peer looks as if it lagged), downgrade and upgrade.

The pytest plugin's ``amps_pair`` fixture is an :class:`EmbeddedPair`; the same controls are on
each instance's Admin interface under ``/emulator/replication/<destination>``.
"""

from __future__ import annotations

import socket
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from amps_emulator.config import loads_config
from amps_emulator.config.model import Config
from amps_emulator.embedded import EmbeddedServer
from amps_emulator.server.core.clock import TestClock

if TYPE_CHECKING:
    from amps_emulator.server.services.replication import ReplicationService

T = TypeVar("T")


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (for a replication transport, bound by the server)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def pair_config(name: str, peer: str | None, *, repl_port: int, peer_repl_port: int, data_dir: str | Path,
                group: str = "pair", sync_type: str = "sync", client_addr: str = "127.0.0.1:0",
                admin_addr: str | None = "127.0.0.1:0", peer_host: str = "127.0.0.1",
                listen_host: str = "127.0.0.1", reconnect_timeout: float = 0.2,
                sow_topics: Sequence[tuple[str, str]] = (), actions: str = "") -> str:
    """The XML config of instance ``name`` of a pair whose other instance is ``peer``.

    ``repl_port``: this instance's ``amps-replication`` port; ``peer_repl_port`` (on
    ``peer_host``): the peer's. ``sync_type``: this instance's Destination (``sync``/``async``).
    ``sow_topics``: (topic, key path) of JSON SOW topics to define on both. ``peer`` None: the
    same instance without replication (what a benchmark compares the pair with). ``actions``:
    the content of an ``<Actions>`` element (``<Action>`` elements), none when empty."""
    if sync_type not in ("sync", "async"):
        raise ValueError(f"sync_type is sync or async, not {sync_type!r}")
    data = Path(data_dir)
    admin = "" if admin_addr is None else f"<Admin><InetAddr>{admin_addr}</InetAddr></Admin>"
    sow = "".join(
        f"<Topic><Name>{t}</Name><MessageType>json</MessageType><Key>{k}</Key>"
        f"<FileName>{data}/sow/%n.sow</FileName></Topic>" for t, k in sow_topics)
    listener = replication = ""
    if peer is not None:
        listener = f"""<Transport><Name>amps-replication</Name><Type>amps-replication</Type>
      <InetAddr>{listen_host}:{repl_port}</InetAddr></Transport>"""
        replication = f"""<Replication>
    <Destination>
      <Name>{peer}</Name><Group>{group}</Group><SyncType>{sync_type}</SyncType>
      <PassThrough>.*</PassThrough>
      <Topic><Name>.*</Name><MessageType>json</MessageType></Topic>
      <Transport><Type>amps-replication</Type><InetAddr>{peer_host}:{peer_repl_port}</InetAddr>
        <ReconnectTimeout>{reconnect_timeout:g}</ReconnectTimeout></Transport>
    </Destination>
  </Replication>"""
    return f"""<AMPSConfig>
  <Name>{name}</Name>
  <Group>{group}</Group>
  {admin}
  <Transports>
    <Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>{client_addr}</InetAddr>
      <MessageType>json</MessageType><Protocol>amps</Protocol></Transport>
    {listener}
  </Transports>
  <TransactionLog><JournalDirectory>{data}/journal</JournalDirectory>
    <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
  {f"<SOW>{sow}</SOW>" if sow else ""}
  {replication}
  {f"<Actions>{actions}</Actions>" if actions else ""}
</AMPSConfig>
"""


class _Bound(Generic[T]):
    """``fn(service, dest)`` as a one-argument callable run on an instance's loop."""

    def __init__(self, fn: Callable[[ReplicationService, str], T], dest: str) -> None:
        self.fn = fn
        self.dest = dest

    def __call__(self, service: ReplicationService) -> T:
        return self.fn(service, self.dest)


def _instance(config: Config, memory: bool, clock: TestClock | None) -> EmbeddedServer:
    """One instance of the pair, on ``clock`` when there is one."""
    if clock is None:
        return EmbeddedServer(config, memory=memory, hold_ports=False)
    return EmbeddedServer(config, memory=memory, hold_ports=False, timebase=clock)


def _link_look(service: ReplicationService, dest: str) -> tuple[bool, float | None, float]:
    """Whether the link to ``dest`` is up, when its connector tries again (server monotonic
    time; None: it is not waiting) and the server's monotonic time now."""
    st = service.state(dest)
    return st.connected, st.retry_at, service.timebase.monotonic()


class _Advance:
    """Advance ``clock`` by ``seconds`` on ``srv``'s loop, then let the server's turn run."""

    def __init__(self, srv: EmbeddedServer, clock: TestClock, seconds: float) -> None:
        self.srv = srv
        self.clock = clock
        self.seconds = seconds

    def __call__(self) -> int:
        ran = self.clock.advance(self.seconds)
        if self.srv.server is not None:
            self.srv.server.turn.request()
        return ran


class EmbeddedPair:
    """Instances ``A`` and ``B`` replicating to each other (``sync`` both ways by default).

    ``pair.a``/``pair.b`` are :class:`EmbeddedServer` objects (``.uri``, ``.admin_uri``);
    ``pair.uris`` lists both for a server chooser (A first). ``memory=True`` (default): no
    files; otherwise journals and SOW files go under ``data_dir``. ``actions``: ``<Action>``
    elements both instances carry. ``test_clock=True``: each instance runs on its own
    :class:`~amps_emulator.server.core.clock.TestClock` (``pair.clocks``), which stands still until
    :meth:`advance` moves both (schedules, downgrade ages, reconnect delays); both start at
    ``clock_start`` (seconds since the epoch; default: now).
    """

    def __init__(self, data_dir: str | Path | None = None, *, sync_type: str = "sync",
                 memory: bool = True, names: tuple[str, str] = ("A", "B"),
                 sow_topics: Sequence[tuple[str, str]] = (), actions: str = "",
                 test_clock: bool = False, clock_start: float | None = None) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="amps-pair-") if data_dir is None else None
        base = Path(self._tmp.name if self._tmp is not None else str(data_dir))
        self.names = names
        ports = free_port(), free_port()
        self.configs = [
            pair_config(names[i], names[1 - i], repl_port=ports[i], peer_repl_port=ports[1 - i],
                        data_dir=base / names[i].lower(), sync_type=sync_type, sow_topics=sow_topics,
                        actions=actions)
            for i in (0, 1)]
        #: each instance's test clock (``test_clock=True``), else empty
        self.clocks: list[TestClock] = [TestClock(clock_start), TestClock(clock_start)] if test_clock else []
        self.servers = [_instance(loads_config(xml, f"{n}.xml"), memory,
                                  self.clocks[i] if self.clocks else None)
                        for i, (xml, n) in enumerate(zip(self.configs, names, strict=True))]

    @property
    def a(self) -> EmbeddedServer:
        return self.servers[0]

    @property
    def b(self) -> EmbeddedServer:
        return self.servers[1]

    @property
    def uris(self) -> list[str]:
        return [s.uri for s in self.servers]

    def start(self) -> EmbeddedPair:
        """Start both instances. On test clocks, also wait for both links (see
        :meth:`wait_connected`): the instance started first found its peer not listening yet,
        and tries again only when its clock has moved."""
        for s in self.servers:
            s.start()
        if self.clocks:
            try:
                self.wait_connected()
            except RuntimeError:
                self.stop()  # a with-statement whose start fails never reaches __exit__
                raise
        return self

    def stop(self) -> None:
        for s in self.servers:
            s.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> EmbeddedPair:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the test clock ---------------------------------------------------------------------
    def advance(self, seconds: float) -> int:
        """Move both instances' test clocks ``seconds`` forward (A's first), each on its own
        loop, running the timers that fall due (as ``POST /emulator/clock/advance``). Returns
        how many timers ran."""
        if not self.clocks:
            raise RuntimeError("the pair runs on real time: make it with test_clock=True")
        ran = 0
        for srv, clock in zip(self.servers, self.clocks, strict=True):
            ran += int(srv.call(_Advance(srv, clock, seconds)))
        return ran

    # -- the links ----------------------------------------------------------------------
    def _on(self, name: str, fn: Callable[[ReplicationService], T]) -> T:
        """Run ``fn(replication service)`` on instance ``name``'s loop."""
        srv = self.servers[self.names.index(name)]

        def call() -> T:
            server = srv.server
            if server is None or server.replication is None:
                raise RuntimeError(f"instance {name} is not running with replication")
            return fn(server.replication)

        result: T = srv.call(call)
        return result

    def _both(self, source: str | None, fn: Callable[[ReplicationService, str], object]) -> None:
        """``fn(service, its destination)`` on ``source`` (on both instances when None)."""
        for name, peer in (self.names, self.names[::-1]):
            if source is None or source == name:
                self._on(name, _Bound(fn, peer))

    def cut(self, source: str | None = None) -> None:
        """Take the link from ``source`` to its peer down (both links when None) until
        :meth:`restore`."""
        self._both(source, lambda r, dest: r.cut(dest))

    def restore(self, source: str | None = None) -> None:
        self._both(source, lambda r, dest: r.restore(dest))

    def hold_acks(self, source: str) -> None:
        """``source`` stops counting its peer's acks: its persisted acks wait (sync)."""
        self._both(source, lambda r, dest: r.hold(dest))

    def release_acks(self, source: str) -> None:
        self._both(source, lambda r, dest: r.release(dest))

    def downgrade(self, source: str) -> bool:
        """``source``'s destination becomes async (its held acks go out)."""
        dest = self.names[1 - self.names.index(source)]
        return bool(self._on(source, lambda r: r.downgrade_destination(dest)))

    def upgrade(self, source: str) -> bool:
        dest = self.names[1 - self.names.index(source)]
        return bool(self._on(source, lambda r: r.upgrade_destination(dest)))

    def state(self, source: str) -> dict[str, Any]:
        """``source``'s destination as ``/amps/instance/replication/<destination>`` shows it."""
        dest = self.names[1 - self.names.index(source)]
        out: dict[str, Any] = self._on(source, lambda r: r.describe(dest))
        return out

    def connected(self) -> bool:
        """Both links are up."""
        return all(self.state(n)["is_connected"] for n in self.names)

    def wait_connected(self, timeout: float = 10.0) -> None:
        """Return once both links are up (each look is a round trip to the instances' loops;
        RuntimeError after ``timeout`` real seconds). On test clocks, a link waiting out its
        ReconnectTimeout gets there when both clocks are advanced exactly to its next attempt,
        and only then: the clocks move no further than the links need."""
        deadline = time.monotonic() + timeout
        while True:
            looks = [self._on(name, _Bound(_link_look, peer))
                     for name, peer in (self.names, self.names[::-1])]
            if all(up for up, _, _ in looks):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the pair's links are not up after {timeout:g}s")
            waits = [retry_at - now for up, retry_at, now in looks if not up and retry_at is not None]
            if self.clocks and waits:
                self.advance(max(0.0, min(waits)))


__all__ = ["EmbeddedPair", "free_port", "pair_config"]
