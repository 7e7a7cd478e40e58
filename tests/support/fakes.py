"""A :class:`~amps_emulator.server.net.connection.Connection` with no socket and no loop: the
fake transport it writes to, the fake server (``ConnectionHost``) and turn it talks to, and
a fake loop whose passes the test runs. ``connection()`` gives ``(server, conn, transport)``."""

from __future__ import annotations

from types import SimpleNamespace

from amps_emulator.server.net.connection import Connection


class FakeLoop:
    """``call_soon`` callbacks queue up; :meth:`run_pass` runs those queued before it began."""

    def __init__(self) -> None:
        self.ready: list = []

    def call_soon(self, callback, *args):
        self.ready.append((callback, args))

    def run_pass(self) -> int:
        ready, self.ready = self.ready, []
        for callback, args in ready:
            callback(*args)
        return len(ready)


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.paused = False

    def get_extra_info(self, name):
        return ("127.0.0.1", 1) if name == "peername" else None

    def set_write_buffer_limits(self, high):
        pass

    def get_write_buffer_size(self):
        return 0

    def write(self, data):
        self.written.append(data)

    def pause_reading(self):
        self.paused = True

    def resume_reading(self):
        self.paused = False

    def close(self):
        pass

    def abort(self):
        pass


class FakeTurn:
    def __init__(self, server: FakeServer) -> None:
        self.server = server
        self.dirty_clients: list = []

    def dirty(self, conn):
        self.dirty_clients.append(conn)

    def request(self):
        pass

    def after(self, callback):
        self.server.loop.call_soon(callback)  # (a fake turn has ended at once)

    def settle(self):
        pass


class FakeServer:
    """The ConnectionHost a Connection talks to; its own timebase (timers through ``loop``)."""

    def __init__(self) -> None:
        self.dispatched: list[str] = []
        self.turn = FakeTurn(self)
        self.timebase = self
        self.on_dispatch = None
        self.loop = None
        self.logon_timeout = 0  # no timer: there is no loop

    def monotonic(self):
        return 0.0

    def time(self):
        return 0.0

    def filter_pool(self, length):
        raise AssertionError("no long filters here")

    def writable(self, conn):
        pass

    def check_memory(self):
        return True

    def call_later(self, delay, callback):  # Server's timers go through its clock
        return self.loop.call_later(delay, callback)

    def opened(self, conn):
        pass

    def closed(self, conn):
        pass

    def publish_runs(self, conn, payloads, start):  # no runs: every frame is dispatched
        return start

    def dispatch(self, conn, cmd):
        self.dispatched.append(cmd.cid)
        if self.on_dispatch is not None:
            self.on_dispatch(conn, cmd)

    def flush(self):
        for c in self.turn.dirty_clients:
            c.flush_output()
        self.turn.dirty_clients.clear()


def connection():
    srv = FakeServer()
    conn = Connection(srv, SimpleNamespace(max_frame=1 << 24, out_limit=1 << 30,
                                           logon_frame_limit=1 << 20, throttled=0))
    t = FakeTransport()
    conn.connection_made(t)
    return srv, conn, t
