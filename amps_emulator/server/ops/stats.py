"""Statistics for the Admin interface: the ``/amps`` tree of the AMPS Monitoring Reference.

The message path only bumps integer counters (per connection: bytes and messages in and
out; per SOW topic: inserts, updates, deletes, queries; per message processor:
:mod:`server.core.processors`). A :class:`Sampler` on a loop timer takes a sample every
``Admin/Interval`` and turns the counter differences into the reference's ``*_per_sec``
rates (interval averages), the way AMPS's statistics database does, and records the whole
tree in its history (:mod:`server.ops.stats_history`: the ``t0``/``t1`` queries);
cumulative counters and snapshots are read live.

The processors (``/amps/instance/processors``): ``external`` (publish and subscribe:
publishes received, messages delivered to subscriptions), ``sow`` (queries received, records
they returned), ``queue`` (messages entering a queue, messages delivered from one),
``bookmark`` (records replays read from the transaction log, messages they sent) and ``all``,
their sum. ``*_bytes`` count the publishes' bodies received, and the frames sent.
``last_active`` is the time since the sample at which the processor's counters last moved;
``throttle_count`` the times a connection stopped being read because the server had more of
its frames than one pass takes (the publishes wait for the next pass).

:func:`tree` builds the whole tree as plain dicts and lists (collections are lists of
objects with an ``id``, as AMPS's JSON output has them), with values as strings, the way AMPS
writes them. Host statistics come from ``/proc`` (Linux); where a file is missing the resource
is an empty list or object rather than invented numbers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from amps_emulator.config import ConfigError, ConfigIssue
from amps_emulator.protocol.topics import display_name
from amps_emulator.server.core.amps_names import connection_name
from amps_emulator.server.ops import statsdb
from amps_emulator.server.ops.stats_history import StatsHistory, format_time

if TYPE_CHECKING:
    from amps_emulator.server.app import Server

log = logging.getLogger("amps_emulator.admin")


def _n(v: float | int) -> str:
    """A statistic as AMPS writes it: integers plain, rates with fixed decimals."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return f"{v:.6f}"


def _iso(t: float) -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


# -- host ------------------------------------------------------------------------------------
def _cpu_times() -> dict[str, list[int]]:
    text = _read("/proc/stat") or ""
    out = {}
    for line in text.splitlines():
        if line.startswith("cpu"):
            parts = line.split()
            name = "all" if parts[0] == "cpu" else parts[0]
            out[name] = [int(x) for x in parts[1:9]]
    return out


def _cpu_percents(prev: dict[str, list[int]], cur: dict[str, list[int]]) -> list[dict]:
    out = []
    for name, c in cur.items():
        p = prev.get(name, [0] * len(c))
        d = [a - b for a, b in zip(c, p, strict=False)]
        total = sum(d) or 1
        user, nice, system, idle, iowait = (d + [0] * 5)[:5]
        out.append({"id": name, "idle_percent": _n(100.0 * idle / total),
                    "iowait_percent": _n(100.0 * iowait / total),
                    "system_percent": _n(100.0 * system / total),
                    "user_percent": _n(100.0 * (user + nice) / total)})
    return out


def _memory() -> dict:
    text = _read("/proc/meminfo")
    if text is None:
        return {}
    kb = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        fields = rest.split()
        if fields:
            kb[name] = int(fields[0]) * 1024
    total, free = kb.get("MemTotal", 0), kb.get("MemFree", 0)
    buffers, cached = kb.get("Buffers", 0), kb.get("Cached", 0)
    available = kb.get("MemAvailable", free + buffers + cached)
    return {"anonymous": _n(kb.get("AnonPages", 0)), "available": _n(available),
            "buffers": _n(buffers), "cached": _n(cached), "free": _n(free),
            "in_use": _n(total - available), "swap_free": _n(kb.get("SwapFree", 0)),
            "swap_total": _n(kb.get("SwapTotal", 0)), "total": _n(total)}


def _net_counters() -> dict[str, tuple[int, int, int, int, int]]:
    text = _read("/proc/net/dev") or ""
    out = {}
    for line in text.splitlines()[2:]:
        name, _, rest = line.partition(":")
        f = rest.split()
        if len(f) >= 16:
            out[name.strip()] = (int(f[0]), int(f[8]), int(f[1]), int(f[9]),
                                 int(f[2]) + int(f[3]) + int(f[10]) + int(f[11]))
    return out


def _disks() -> list[dict]:
    """One entry per mounted block device (and the working directory's file system)."""
    seen: dict[str, str] = {}
    for line in (_read("/proc/mounts") or "").splitlines():
        f = line.split()
        if len(f) >= 2 and f[0].startswith("/dev/") and f[0] not in seen:
            seen[f[0]] = f[1].replace("\\040", " ")
    if not seen:
        seen["cwd"] = os.getcwd()
    out = []
    for dev, mount in seen.items():
        try:
            st = os.statvfs(mount)
        except OSError:
            continue
        free = 100.0 * st.f_bavail / st.f_blocks if st.f_blocks else 0.0
        out.append({"id": dev.rsplit("/", 1)[-1], "mount_point": mount,
                    "file_system_free_percent": _n(free)})
    return out


#: the processors of ``/amps/instance/processors``, and their descriptions
PROCESSORS = {"all": "AMPS Aggregate Processor Stats",
              "bookmark": "transaction log replay (bookmark subscriptions)",
              "external": "publish and subscribe", "queue": "message queues",
              "sow": "queries of SOW topics"}
_FIGURES = ("received", "received_bytes", "found", "found_bytes")


def processor_counters(server: Server) -> dict[str, dict[str, int]]:
    """Each processor's messages received and matches found (and their bytes), now."""
    broker = server.broker
    meters = broker.processors
    ext = meters.external
    out = {"external": {"received": broker.stats["published"], "received_bytes": ext.received_bytes,
                        "found": broker.stats["delivered"], "found_bytes": ext.found_bytes}}
    for pid, m in (("bookmark", meters.bookmark), ("queue", meters.queue), ("sow", meters.sow)):
        out[pid] = {"received": m.received, "received_bytes": m.received_bytes,
                    "found": m.found, "found_bytes": m.found_bytes}
    out["all"] = {f: sum(figures[f] for figures in out.values()) for f in _FIGURES}
    return out


class Sampler:
    """Samples counters every ``interval`` seconds (real time) and keeps the rates."""

    def __init__(self, server: Server, interval: float) -> None:
        self.server = server
        self.interval = interval
        #: when each processor's counters last moved (monotonic), for ``last_active``
        self._active_at = dict.fromkeys(PROCESSORS, time.monotonic())
        #: every sample of the tree, for the ``t0``/``t1`` queries (the statistics database)
        self.store = StatsHistory()
        #: the thread writing the statistics database, when ``Admin/FileName`` names a file
        self.writer: statsdb.StatsWriter | None = None
        #: the file's samples being read back (:meth:`_read_back`), and this run's samples
        #: taken meanwhile; the time the next sample must follow (the file's last)
        self.reading: asyncio.Future[None] | None = None
        self._pending: list[tuple[int, dict]] | None = None
        self._stop_reading = threading.Event()
        self._floor = 0
        self._cut = 0  # samples before this were truncated
        self.total_time = 0.0  # seconds spent sampling and recording
        self.last_time = 0.0  # of the last sample
        self.timer: Any = None
        self.at = time.monotonic()
        self.sampled_at = server.wallclock()
        self.samples = 0
        self.rates: dict[tuple, float] = {}
        self._prev: dict[tuple, int] = {}
        self._cpu_prev: dict[str, list[int]] = _cpu_times()
        self.cpus: list[dict] = _cpu_percents({}, self._cpu_prev)
        self._net_prev = _net_counters()
        self.net_rates: dict[str, tuple[float, float]] = {}
        self._processed_at = time.monotonic()
        self._processed = 0
        self._counters()

    def start(self) -> None:
        self.timer = self.server.loop.call_later(self.interval, self._tick)

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()

    # -- the statistics database -----------------------------------------------------------
    async def open_database(self) -> None:
        """With ``Admin/FileName`` naming a file: open it (off the loop) and start the thread
        that writes the samples; its samples are read back into :attr:`store` in the
        background (:meth:`_read_back`). A file that cannot be the statistics database stops
        the start-up, as a config error at ``<Admin>``."""
        cfg = self.server.config.admin
        path = getattr(cfg, "file_name", ":memory:") or ":memory:"
        if cfg is None or path == ":memory:":
            return
        try:
            file = await asyncio.to_thread(statsdb.StatsFile, path,
                                           self.server.config.statistics_indexing)
            last = await asyncio.to_thread(lambda: file.last)
        except statsdb.StatsFileError as exc:
            raise ConfigError([ConfigIssue(cfg.file, cfg.line,
                                           f"<Admin> <FileName>: {exc}")]) from None
        self.writer = statsdb.StatsWriter(file).start()
        if last is not None:
            self._floor = statsdb.from_amps_time(last)
            self._pending = []
            self.reading = asyncio.ensure_future(self._read_back(path, last))

    async def _read_back(self, path: str, upto: int) -> None:
        """Read the file's samples (up to ``upto``) into a history in a worker thread, add
        this run's samples taken meanwhile, and answer from it from then on."""
        try:
            past = await asyncio.to_thread(statsdb.read_history, path, upto,
                                           stop=self._stop_reading)
        except statsdb.StatsFileError as exc:
            log.error("statistics database: %s; the history starts afresh", exc)
            self._pending = None
            return
        pending, self._pending = self._pending or [], None
        n = len(past.times)
        for at_us, recorded in pending:
            past.record(at_us, recorded)
        past.forget_before(self._cut)
        past.queries = self.store.queries
        self.store = past
        log.info("statistics database %s: %d earlier sample(s) read back", path, n)

    async def close_database(self) -> None:
        """Write what is queued and close the file (a slow disk is not waited for long)."""
        self._stop_reading.set()
        if self.reading is not None:
            await asyncio.wait([self.reading], timeout=5.0)
        if self.writer is not None:
            await asyncio.to_thread(self.writer.close)

    def truncate(self, age: float) -> str:
        """Remove the samples older than ``age`` seconds (by the server's clock) from the
        history and, in the writer thread, from the statistics database; what was done."""
        cut_us = int((self.server.wallclock() - age) * 1_000_000)
        self._cut = max(self._cut, cut_us)  # (for the samples still being read back)
        n = self.store.forget_before(cut_us)
        if self.writer is None:
            return f"removed {n} sample(s) before {format_time(cut_us)} from the history in memory"
        self.writer.truncate(statsdb.to_amps_time(cut_us))
        return (f"removing the samples before {format_time(cut_us)} from {self.writer.file.path}"
                f" ({n} in the history)")

    def _counters(self) -> dict[tuple, int]:
        s = self.server
        c: dict[tuple, int] = {
            ("p", "received"): s.broker.stats["published"], ("p", "matches"): s.broker.stats["delivered"]}
        for pid, figures in processor_counters(s).items():
            for name, v in figures.items():
                c[("p", pid, name)] = v
        for conn in s.connections:
            k = conn.conn_id
            n = conn.counters()
            c[("c", k, "bytes_in")] = n.bytes_in
            c[("c", k, "bytes_out")] = n.bytes_out
            c[("c", k, "messages_in")] = n.messages_in
            c[("c", k, "messages_out")] = n.messages_out
        if s.sow_service is not None:
            for name, t in s.sow_service.sow.topics.items():
                c[("s", name, "inserts")] = t.insert_count
                c[("s", name, "updates")] = t.update_count
                c[("s", name, "deletes")] = t.delete_count
                c[("s", name, "queries")] = t.query_count
        return c

    def sample(self) -> None:
        now = time.monotonic()
        dt = max(now - self.at, 1e-6)
        cur = self._counters()
        prev = self._prev
        self.rates = {k: max(0, v - prev.get(k, 0)) / dt for k, v in cur.items()}
        for pid in PROCESSORS:
            if any(cur[("p", pid, f)] != prev.get(("p", pid, f)) for f in ("received", "found")):
                self._active_at[pid] = now
        self._prev = cur
        cpu = _cpu_times()
        self.cpus = _cpu_percents(self._cpu_prev, cpu)
        self._cpu_prev = cpu
        net = _net_counters()
        self.net_rates = {n: ((v[0] - self._net_prev.get(n, v)[0]) / dt,
                              (v[1] - self._net_prev.get(n, v)[1]) / dt) for n, v in net.items()}
        self._net_prev = net
        self.at = now
        self.sampled_at = self.server.wallclock()  # (an injected clock's, in tests)
        self.samples += 1

    def record(self) -> None:
        """Add the tree as it is now to :attr:`store` (and the statistics database, when
        there is one), stamped with the sample's time."""
        started = time.perf_counter()
        at_us = int(self.sampled_at * 1_000_000)
        times = self.store.times
        if self.writer is not None:  # the database's times are whole milliseconds, increasing
            at_us -= at_us % 1000
            last = max(times[-1] if times else 0, self._floor)
            if at_us <= last:
                at_us = last + 1000
        recorded = tree(self.server, self)
        recorded["amps"]["instance"]["timestamp"] = format_time(at_us)  # (the sample's own)
        self.store.record(at_us, recorded)
        if self.writer is not None:
            self.writer.submit(statsdb.to_amps_time(at_us), recorded)
        if self._pending is not None:
            self._pending.append((at_us, recorded))
        self.last_time = time.perf_counter() - started
        self.total_time += self.last_time

    def _tick(self) -> None:
        try:
            self.sample()
            self.record()
        finally:
            self.timer = self.server.loop.call_later(self.interval, self._tick)

    def rate(self, *key: Any) -> str:
        return _n(float(self.rates.get(key, 0.0)))

    def last_active_ms(self, pid: str) -> int:
        return int((time.monotonic() - self._active_at[pid]) * 1000)


# -- the tree --------------------------------------------------------------------------------
def client_id(client: Any) -> str:
    """A client's id in ``/amps/instance/clients``: its name once logged on."""
    return client.client_name or f"connection-{client.conn_id}"


def _socket_queues(client: Any) -> tuple[int, int]:
    """Bytes in the socket's kernel receive and send queues (Linux ioctls); what the server
    still holds for sending is the client's ``queued_bytes_out``."""
    tr = client.transport
    if tr is None or client.closed:
        return 0, 0
    rx = tx = 0
    sock = tr.get_extra_info("socket")
    if sock is not None:
        import array

        buf = array.array("i", [0])
        try:
            import fcntl
            import termios

            fcntl.ioctl(sock.fileno(), termios.FIONREAD, buf)
            rx = buf[0]
            fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, buf)
            tx = buf[0]
        except (ImportError, OSError, ValueError, AttributeError):  # not Linux, or closed
            pass
    return rx, tx


def _clients(server: Server, sm: Sampler) -> list[dict]:
    out = []
    for conn in sorted(server.connections, key=lambda c: c.conn_id):
        k = conn.conn_id
        n = conn.counters()
        rx, tx = _socket_queues(conn)
        out.append({
            "id": client_id(conn), "authenticated_id": conn.user_id or "",
            "bytes_in": _n(n.bytes_in), "bytes_in_per_sec": sm.rate("c", k, "bytes_in"),
            "bytes_out": _n(n.bytes_out), "bytes_out_per_sec": sm.rate("c", k, "bytes_out"),
            "client_name": conn.client_name or "", "client_version": conn.client_version or "",
            "connect_time": _iso(conn.connect_time),
            "connection_name": connection_name(server.instance_name, conn),
            "correlation_id": conn.correlation_id or "",
            "denied_reads": _n(conn.denied_reads), "denied_writes": _n(conn.denied_writes),
            "messages_in": _n(n.messages_in),
            "messages_in_per_sec": sm.rate("c", k, "messages_in"),
            "messages_out": _n(n.messages_out),
            "messages_out_per_sec": sm.rate("c", k, "messages_out"),
            "queue_depth_out": _n(n.queue_depth_out),
            "queued_bytes_out": _n(n.queued_bytes_out),
            "queue_max_latency": _n(n.queue_max_latency), "remote_address": conn.peer,
            "subscription_count": _n(len(conn.subs)), "transport_rx_queue": _n(rx),
            "transport_tx_queue": _n(tx),
        })
    return out


def _processors(server: Server, sm: Sampler) -> list[dict]:
    counters = processor_counters(server)
    throttled = _n(sum(lst.throttled for lst in server.listeners))
    denied = server.broker.denied
    out = []
    for pid, desc in PROCESSORS.items():
        figures = counters[pid]
        # refusals and throttling are of commands and publishes: the external processor's
        whole = pid in ("all", "external")
        out.append({
            "id": pid, "description": desc,
            "denied_reads": _n(denied["reads"] if whole else 0),
            "denied_writes": _n(denied["writes"] if whole else 0),
            "last_active": _n(sm.last_active_ms(pid)),
            "matches_found": _n(figures["found"]),
            "matches_found_per_sec": sm.rate("p", pid, "found"),
            "matches_found_bytes": _n(figures["found_bytes"]),
            "matches_found_bytes_per_sec": sm.rate("p", pid, "found_bytes"),
            "messages_received": _n(figures["received"]),
            "messages_received_per_sec": sm.rate("p", pid, "received"),
            "messages_received_bytes": _n(figures["received_bytes"]),
            "messages_received_bytes_per_sec": sm.rate("p", pid, "received_bytes"),
            "throttle_count": throttled if whole else "0",
        })
    return out


def _sow(server: Server, sm: Sampler) -> list[dict]:
    if server.sow_service is None:
        return []
    out = []
    now = server.wallclock()
    for name, t in sorted(server.sow_service.sow.topics.items()):
        spec = t.spec
        h = spec.history
        out.append({
            "id": f"{display_name(name)}!{spec.message_type}", "topic": display_name(name),
            "message_type": spec.message_type,
            "path": "" if not spec.persistent else (spec.file_name or ""),
            "insert_count": _n(t.insert_count), "inserts_per_sec": sm.rate("s", name, "inserts"),
            "update_count": _n(t.update_count), "updates_per_sec": sm.rate("s", name, "updates"),
            "delete_count": _n(t.delete_count), "deletes_per_sec": sm.rate("s", name, "deletes"),
            "query_count": _n(t.query_count), "queries_per_sec": sm.rate("s", name, "queries"),
            "valid_keys": _n(t.count(now)),
            "historical_granularity": "" if h is None else _n(float(h.granularity or 0)),
            "historical_window": "" if h is None or h.window is None else _n(float(h.window)),
        })
    return out


def _views(server: Server) -> list[dict]:
    out = []
    for v in server.config.views:
        out.append({"id": f"{v.name}!{v.message_type or 'json'}", "topic": v.name,
                    "message_type": v.message_type or "json",
                    "underlying_topic": v.underlying_topic or "",
                    "queue_depth": "0", "conflation": "none", "conflation_ratio": "0.0"})
    return out


def _queues(server: Server) -> list[dict]:
    svc = server.queue_service
    if svc is None:
        return []
    out = []
    now = server.wallclock()
    for _key, q in sorted(svc.queues.items()):
        name = q.name
        e = q.engine
        msgs = list(e.messages(include_leased=True))
        oldest = 0.0
        logged = svc.logged_at(q, msgs[0].position) if msgs else None
        if logged is not None:
            oldest = max(0.0, now - logged)
        spec = q.spec
        own = q.ownership  # a queue shared with replicated instances: some messages are theirs
        out.append({
            "id": f"{name}!{q.message_type}", "topic": name, "message_type": q.message_type,
            "queue_depth": _n(e.depth), "backlog": _n(e.leased_count),
            "owned": _n(e.depth - (own.owned_elsewhere if own is not None else 0)),
            "inactive_message_count": _n(e.inactive_count),
            "seconds_behind": _n(int(oldest)),
            "max_backlog": _n(spec.max_backlog) if spec.max_backlog is not None else "",
            "target_queue_depth": _n(spec.target_queue_depth)
            if spec.target_queue_depth is not None else "",
            "transferred_in": _n(own.transferred_in if own is not None else 0),
            "transferred_out": _n(own.transferred_out if own is not None else 0),
            "proxied_transfer": "enabled" if own is not None and own.proxied else "disabled",
        })
    return out


def _subscriptions(server: Server) -> list[dict]:
    out = []
    for conn in sorted(server.connections, key=lambda c: c.conn_id):
        for sid, sub in conn.subs.items():
            out.append({
                "id": f"{client_id(conn)}:{sid}", "client_id": client_id(conn),
                "sub_id": sid, "topic": display_name(sub.topic), "message_type": conn.message_type,
                "filter": _sub_text(sub, "filter"), "options": _sub_text(sub, "options"),
                "bookmark": str(getattr(sub.cursor.cmd, "bookmark", "") or "")
                if sub.cursor is not None else "",
                "backlog": _n(_leased(conn, sid, sub)),
            })
    return out


def _leased(conn: Any, sid: str, sub: Any) -> int:
    """The messages a queue subscription holds leased (0 for any other subscription)."""
    q = getattr(sub, "queue", None)
    if q is None:
        return 0
    try:
        return int(q.engine.subscriber_backlog((conn.conn_id, sid))[0])
    except KeyError:  # (it left the queue already)
        return 0


def _sub_text(sub: Any, what: str) -> str:
    if what == "filter":
        return getattr(sub.filter, "text", None) or getattr(sub, "filter_text", "") or ""
    return ",".join(k if v is True else f"{k}={v}" for k, v in sub.options.items()
                    if k != "bookmark")


def _txlog(server: Server) -> dict:
    tx = server.txlog
    if tx is None or not tx.is_open:
        return {}
    j = tx.journal
    out: dict[str, Any] = {"first_position": _n(j.first_position),
                           "last_position": _n(j.last_position)}
    files = []
    try:
        d = server.config.transaction_log.journal_directory
        files = sorted(f for f in os.listdir(d) if f.endswith(".journal"))
    except OSError:
        pass
    out["journals"] = [{"id": f, "file_name": f} for f in files]
    # (from what the journal keeps in memory: its oldest segment may be compressed)
    first, last = j.first_timestamp, j.last_timestamp
    out["min_timestamp"] = _iso(first / 1e6) if first else ""
    out["max_timestamp"] = _iso(last / 1e6) if last else ""
    return out


def _transports(server: Server) -> list[dict]:
    return [{"id": lst.name, "name": lst.name, "type": "tcp" if lst.path is None else "amps-unix",
             "message_type": lst.message_type,
             "is_enabled": "true" if lst.server is not None else "false",
             **({"inet_addr": f"{lst.host}:{lst.port}"} if lst.path is None
                else {"file_name": lst.path}), "uri": lst.uri}
            for lst in server.listeners]


def _replication(server: Server) -> list[dict]:
    """``/amps/instance/replication/<destination>``: one node per outgoing destination."""
    repl = server.replication
    if repl is None:
        return []
    out = []
    for name in repl.gate.states:
        fields = repl.describe(name)
        out.append({"id": name, **{k: _n(v) if isinstance(v, (int, float)) else v
                                   for k, v in fields.items()}})
    return out


def _uptime(seconds: float) -> str:
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{int(h):02d}:{int(m):02d}:{s:09.6f}"


def tree(server: Server, sm: Sampler) -> dict:
    net = []
    for name, v in sorted(_net_counters().items()):
        rin, rout = sm.net_rates.get(name, (0.0, 0.0))
        net.append({"id": name, "bytes_in": _n(v[0]), "bytes_out": _n(v[1]),
                    "bytes_in_per_second": _n(rin), "bytes_out_per_second": _n(rout),
                    "packets_in": _n(v[2]), "packets_out": _n(v[3]), "errors": _n(v[4])})
    now = server.wallclock()
    cfg = server.config
    return {"amps": {
        "host": {"name": socket.gethostname(), "timestamp": _iso(time.time()),
                 "cpus": sm.cpus, "memory": _memory(), "disks": _disks(), "network": net},
        "instance": {
            "name": server.instance_name, "version": server.broker.server_version, "pid": _n(os.getpid()),
            "cwd": os.getcwd(), "config_path": getattr(cfg, "source", "") or "",
            "timestamp": _iso(now), "uptime": _uptime(now - server.started_at),
            "clients": _clients(server, sm), "processors": _processors(server, sm),
            "sow": _sow(server, sm), "views": _views(server), "queues": _queues(server),
            "subscriptions": _subscriptions(server), "transaction_log": _txlog(server),
            "replication": _replication(server), "transports": _transports(server),
            "statistics": _statistics(server, sm),
        },
    }}


def _statistics(server: Server, sm: Sampler) -> dict:
    """``/amps/instance/statistics``; the file's figures when the database is a file (read
    from the writer thread's last write)."""
    cfg = server.config.admin
    out = {"file_name": getattr(cfg, "file_name", ":memory:") if cfg is not None else ":memory:",
           "interval": _n(int(sm.interval * 1000)),
           "total_samples": _n(sm.samples), "queries": _n(sm.store.queries),
           "time_per_sample": _n(sm.last_time), "total_time": _n(sm.total_time)}
    if sm.writer is not None:
        f = sm.writer.file
        out.update(file_size=_n(f.file_size), disk_per_sample=_n(f.disk_per_sample),
                   total_commit_time=_n(f.total_commit_time))
    return out
