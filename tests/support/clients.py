"""The official AMPS Python client, as the tests use it.

* ``logged_on(uri, name)`` / ``client_for(srv, name, mt=None, which=0)``: a connected,
  logged-on ``AMPS.Client`` (``client_for``: on ``srv``'s transport ``which``, as its own
  URI or, with ``mt``, as the URI for that message type on the transport's port);
* ``clients_for(uri)``: the pytest plugin's client factory (``make(name)``; closes them all);
* ``store_client`` (a memory publish store), ``ha_client`` (an ``HAClient`` on one URI);
* ``Collector``: a thread-safe message handler to wait on (deadlines, never sleeps);
* ``Inbox``: what one asynchronous command received, after a flush round trip;
* ``consume_and_discard``: a bookmark subscription discarding each message in its store.

A raw socket peer (no client library) is :mod:`tests.support.raw`; the JavaScript client
is :mod:`tests.support.js_client`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from amps_emulator.pytest_plugin import clients_for

LOGON_TIMEOUT_MS = 5000


def logged_on(uri: str, name: str = "c", timeout_ms: int = LOGON_TIMEOUT_MS):
    """An ``AMPS.Client`` named ``name`` connected to ``uri`` and logged on."""
    import AMPS

    c = AMPS.Client(name)
    c.connect(uri)
    c.logon(timeout_ms)
    return c


def uri_for(srv: Any, mt: str | None = None, which: int = 0) -> str:
    """The URI of ``srv``'s transport ``which``: the listener's own, or with ``mt`` the one
    naming that message type on its port (a transport without a fixed type serves any)."""
    listener = srv.server.listeners[which]
    return listener.uri if mt is None else f"tcp://127.0.0.1:{listener.port}/amps/{mt}"


def client_for(srv: Any, name: str, mt: str | None = None, which: int = 0):
    """A logged-on client of ``srv`` (a server thread) on transport ``which`` (see
    :func:`uri_for`)."""
    return logged_on(uri_for(srv, mt, which), name)


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


__all__ = ["Collector", "Inbox", "client_for", "clients_for", "consume_and_discard",
           "ha_client", "logged_on", "store_client", "uri_for"]
