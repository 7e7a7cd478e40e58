from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from amps_emulator.pytest_plugin import clients_for
from tests.harness import ServerThread


@pytest.fixture
def server(tmp_path):
    from amps_emulator.config import default_config

    srv = ServerThread(default_config(data_dir=str(tmp_path / "amps-data"))).start()
    yield srv
    srv.stop()


def start_server(xml: str, name: str = "test.xml") -> ServerThread:
    """A server thread running the config ``xml`` (``name``: its file name in messages)."""
    from amps_emulator.config import loads_config

    return ServerThread(loads_config(xml, name)).start()


def store_client(uri: str, name: str, on_failed: Callable[..., Any] | None = None):
    """A logged-on client with a memory publish store (``on_failed``: its failed-write
    handler), as an application publishing with persisted acks has."""
    import AMPS

    c = AMPS.Client(name)
    c.set_publish_store(AMPS.MemoryPublishStore())
    if on_failed is not None:
        c.set_failed_write_handler(on_failed)
    c.connect(uri)
    c.logon(5000)
    return c


@contextmanager
def turn_held(srv: Any) -> Iterator[None]:
    """Inside, the end of ``srv``'s turn is never scheduled (as when it is a long pass of
    another connection's frames away): only what the server writes between turns goes out.
    ``srv``: a server thread or an embedded server (``call`` runs on its loop)."""
    turn = srv.server.turn

    def hold() -> None:
        assert not turn._scheduled
        turn._scheduled = True

    srv.call(hold)
    try:
        yield
    finally:
        srv.call(lambda: (setattr(turn, "_scheduled", False), turn.request()))


class Inbox:
    """What one asynchronous command receives: ``Inbox.of(client, command)``, then
    ``take()``: a flush round trip (everything sent before it has arrived), then the
    messages so far as (kind, decoded body); kind ``p`` for publishes."""

    def __init__(self, client) -> None:
        import queue

        self.client = client
        self.q: queue.Queue = queue.Queue()

    @classmethod
    def of(cls, client, command) -> Inbox:
        inbox = cls(client)
        client.execute_async(command, lambda m: inbox.q.put((m.get_command(), m.get_data())))
        return inbox

    def take(self) -> list[tuple[str, Any]]:
        import json

        self.client.flush(5000)
        out = []
        while not self.q.empty():
            kind, data = self.q.get_nowait()
            if data:
                out.append(("p" if kind == "publish" else kind, json.loads(data)))
        return out


def ha_client(name: str, uri: str):
    """An HAClient that (re)connects to ``uri``."""
    import AMPS

    c = AMPS.HAClient(name)
    chooser = AMPS.DefaultServerChooser()
    chooser.add(uri)
    c.set_server_chooser(chooser)
    return c


def consume_and_discard(client, store, topic: str, sub_id: str, count: int,
                        timeout: float = 15.0) -> list[int]:
    """Bookmark-subscribe from the store's most recent point, process ``count`` messages
    (the ``i`` of each), discarding each one in the store as an application would."""
    import json

    import AMPS

    got: list[int] = []
    done = threading.Event()

    def on(m) -> None:
        if done.is_set():
            return
        got.append(json.loads(m.get_data())["i"])
        store.discard_message(m)
        if len(got) == count:
            done.set()

    client.bookmark_subscribe(on, topic, AMPS.Client.Bookmarks.MOST_RECENT, sub_id=sub_id,
                              timeout=5000)
    assert done.wait(timeout), got
    return got


@pytest.fixture
def client_factory(server):
    yield from clients_for(server.uri)


class Collector:
    """Thread-safe message sink with a deadline-based wait (no sleeps)."""

    def __init__(self, extract: Callable[[Any], Any] | None = None) -> None:
        self.items: list[Any] = []
        self._cv = threading.Condition()
        self._extract = extract  # what to keep of each message (default: the tuple below)

    def __call__(self, message: Any) -> None:
        if self._extract is not None:
            item = self._extract(message)
        else:
            item = (message.get_command(), message.get_topic(), message.get_data(),
                    message.get_sub_id(), message.get_correlation_id())
        with self._cv:
            self.items.append(item)
            self._cv.notify_all()

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Any]:
        deadline = time.monotonic() + timeout
        with self._cv:
            while len(self.items) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(left)
            return list(self.items)

    def wait_until(self, pred: Callable[[list[Any]], bool], timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cv:
            while not pred(self.items):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
            return True


@pytest.fixture
def collector():
    return Collector


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


@pytest.fixture
def clients_with(tmp_path):
    """``clients_with(extra_xml, **config_xml_kwargs)`` starts a server whose config adds
    ``extra_xml`` (``{d}`` in it: the data directory) and returns ``make`` as
    :func:`clients_for` does; servers and clients end with the test."""
    started = []

    def start(extra: str, **kwargs):
        srv = start_server(config_xml(tmp_path, extra=extra.format(d=tmp_path), **kwargs))
        clients = clients_for(srv.uri)
        started.append((srv, clients))
        return next(clients)

    yield start
    for srv, clients in reversed(started):
        clients.close()
        srv.stop()


@pytest.fixture
def server_factory(tmp_path):
    made = []

    def make(**kwargs) -> ServerThread:
        srv = start_server(config_xml(tmp_path / f"srv{len(made)}", **kwargs))
        made.append(srv)
        return srv

    yield make
    for srv in made:
        srv.stop()
