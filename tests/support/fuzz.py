"""A seeded frame fuzzer for a running server, and the steady official-client flow it must
not disturb. Used by ``tests/integration/robustness/test_fuzz.py`` (a short run) and
``bench/bench_fuzz.py`` (as long as you like).

Each fuzz worker opens connection after connection and sends one kind of abuse: random
bytes, hostile length prefixes, truncated frames, broken headers, and sessions of commands
of every kind whose header values are drawn from edge cases (numbers beyond 2^64, negative,
quoted, floats, nested arrays; pathological and oversized filters, regex topics; bodies
nested 100,000 deep), connections that never log on and subscribers that never read. The
generator is a ``random.Random(seed)`` per worker, so a failing run is replayed by its seed.

Every wait has a deadline: a run of ``seconds`` ends within ``seconds + GRACE``. No socket
call blocks past it, a drain reads for at most ``DRAIN_LIMIT`` however busy the connection is
(a session subscribed to ``.*`` next to the steady flow never sees 10 ms of silence), and a
kind that can no longer send stops sending.
"""

from __future__ import annotations

import collections
import json
import random
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

STEADY_TOPIC = "steady-flow"
STEADY_NAMES = ("steady-pub", "steady-sub")

_EDGE_INTS = [0, 1, -1, 2 ** 31, 2 ** 32, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1, 2 ** 64, 2 ** 70,
              -(2 ** 70), 10 ** 40]
_COMMANDS = ["logon", "p", "publish", "delta_publish", "subscribe", "delta_subscribe", "sow",
             "sow_and_subscribe", "sow_and_delta_subscribe", "sow_delete", "unsubscribe",
             "flush", "heartbeat", "frobnicate", ""]
_KEYS = ["c", "cid", "t", "a", "s", "e", "o", "filter", "bm", "sub_id", "sids", "query_id",
         "batch_size", "top_n", "skip_n", "k", "x", "client_name", "user_id", "pw", "version",
         "mt", "l", "gseq", "orderby", "sow_keys", "ts", "lp", "status", "reason", "data_only"]
_TOPICS = ["fz", "fz.sow", "fzq", "fz.other", "^(a+)+$", "fz.*", ".*", "(", "a" * 34 + "!",
           "^(?=a)(a|aa)+$", "[[:alpha:]]+", "\\", "x" * 5000]
_FILTERS = [
    "/a = 1", "/s LIKE '^(a+)+$'", "/s LIKE '(a|aa)+$'", "/s LIKE '^(?=a)(a|aa)+$'",
    "/s LIKE '(x+x+)+y'", "REGEXP_REPLACE(/s, '(a+)+b', 'x') = 'y'", "/a = ", "(((",
    "(" * 300 + "/a = 1" + ")" * 300, "NOT " * 2000 + "/a = 1", "/a IN (" + ",".join(
        str(i) for i in range(3000)) + ")", "/s LIKE '(unclosed'", "/a/b/c/d = 'x' AND /e > 2",
    "/a BETWEEN 1 AND", "LENGTH(/s) > 10 OR UPPER(/t) = 'X'",
]
_OPTIONS = ["replace", "oof", "live", "pause", "resume", "timestamp", "top_n=-1",
            "conflation=1ms", "conflation=abc", "select=[-/,+/a]", "select=[", "max_backlog=0",
            "rate=1", "rate=-5", "no_empties", "projection=[COUNT(/a) AS /n]", "grouping=[/a]",
            "start,0.000001", "start,1e308", "start,nan", "skip_n=1e9", "cancel", "expire",
            ",,,", "=", "[" * 100]
_NUMERIC = {"s", "e", "batch_size", "top_n", "skip_n", "l", "gseq"}
_DEEP = b'{"x":' * 100_000 + b"1" + b"}" * 100_000
_ACKS = ["processed", "completed", "persisted", "received", "parsed", "stats",
         "processed,completed", "bogus", "processed,stats,completed,persisted"]


#: how long after its ``seconds`` a run may take to finish the connections it is in
GRACE = 3.0
#: the longest one drain reads (it stops earlier at 10 ms of silence)
DRAIN_LIMIT = 0.25
#: the longest one socket operation may block
SOCKET_TIMEOUT = 2.0


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


class FuzzStats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.frames = 0
        self.bytes = 0
        self.connections = 0
        self.kinds: collections.Counter[str] = collections.Counter()

    def add(self, kind: str, frames: int, nbytes: int) -> None:
        with self.lock:
            self.frames += frames
            self.bytes += nbytes
            self.connections += 1
            self.kinds[kind] += 1


class Fuzzer:
    """``Fuzzer(port, seed).run(seconds, workers)``: abuse the server at ``port``."""

    def __init__(self, port: int, seed: int = 1) -> None:
        self.port = port
        self.seed = seed
        self.stats = FuzzStats()
        #: monotonic time after which no socket call may start or block (set by ``run``)
        self.hard_deadline = float("inf")
        self._kinds: list[Callable[[socket.socket, random.Random], tuple[int, int]]] = [
            self._garbage, self._huge_prefix, self._truncated, self._bad_header,
            self._session, self._session, self._session, self._session, self._slow_reader,
            self._partial_never_logon,
        ]

    def run(self, seconds: float, workers: int = 3) -> FuzzStats:
        deadline = time.monotonic() + seconds
        self.hard_deadline = deadline + GRACE
        threads = [threading.Thread(target=self._worker, args=(self.seed * 1000 + i, deadline),
                                    daemon=True) for i in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return self.stats

    def _worker(self, seed: int, deadline: float) -> None:
        rnd = random.Random(seed)
        while time.monotonic() < deadline:
            kind = rnd.choice(self._kinds)
            try:
                with socket.create_connection(("127.0.0.1", self.port),
                                              timeout=self._timeout()) as s:
                    frames, nbytes = kind(s, rnd)
            except OSError:
                frames, nbytes = 1, 0
            self.stats.add(kind.__name__.lstrip("_"), frames, nbytes)

    def _timeout(self, limit: float = SOCKET_TIMEOUT) -> float:
        """How long the next socket operation may block: ``limit``, cut at the hard deadline
        (a minimum of 1 ms, so that a call past it fails at once rather than blocking)."""
        return max(0.001, min(limit, self.hard_deadline - time.monotonic()))

    # -- kinds of abuse ---------------------------------------------------------------------
    def _send(self, s: socket.socket, data: bytes) -> int:
        """Send ``data``; 0 when it could not all go (refused, timed out, or past the hard
        deadline): the caller stops sending on that connection."""
        if time.monotonic() >= self.hard_deadline:
            return 0
        try:
            s.settimeout(self._timeout())
            s.sendall(data)
        except OSError:
            return 0
        return len(data)

    def _garbage(self, s: socket.socket, rnd: random.Random) -> tuple[int, int]:
        return 1, self._send(s, rnd.randbytes(rnd.randint(1, 4000)))

    def _huge_prefix(self, s: socket.socket, rnd: random.Random) -> tuple[int, int]:
        n = rnd.choice([2 ** 32 - 1, 2 ** 31, 65 << 20, 2 ** 30])
        return 1, self._send(s, n.to_bytes(4, "big") + b'{"c":"logon"' + b"x" * 100)

    def _truncated(self, s: socket.socket, rnd: random.Random) -> tuple[int, int]:
        body = self._header(rnd)
        return 1, self._send(s, frame(body)[:rnd.randint(1, len(body) + 3)])

    def _bad_header(self, s: socket.socket, rnd: random.Random) -> tuple[int, int]:
        payload = rnd.choice([
            b"{not json}", b'{"c":"p","t":"fz"', b"[1,2,3]", b'{"c":{"nested":1}}',
            b'{"c":"p","cid":"x","a":"processed","t":' + b"[" * 5000 + b"]" * 5000 + b"}",
            b'{"c":"p","zz":' + b"[" * 5000 + b"]" * 5000 + b"}", b"", b"{}",
            b'{"c":"p","t":"fz","cid":"\\ud800"}', b'{"c":"p","t":"fz\x00","s":1}',
            rnd.randbytes(rnd.randint(1, 300)), b'{"c":"logon","client_name":"' + b"n" * 70000
            + b'"}',
        ])
        return 1, self._send(s, frame(payload))

    def _partial_never_logon(self, s: socket.socket, rnd: random.Random) -> tuple[int, int]:
        size = rnd.choice([1 << 20, 8 << 20, 60 << 20])
        return 1, self._send(s, size.to_bytes(4, "big") + b'{"c":"p"}' + b"x" * (256 << 10))

    def _slow_reader(self, s: socket.socket, rnd: random.Random) -> tuple[int, int]:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sent = self._send(s, frame(self._logon(rnd)))
        sent += self._send(s, frame(json.dumps({
            "c": "subscribe", "t": rnd.choice([".*", "fz", "fz.*"]), "sub_id": "slow",
            "cid": "slow"}).encode()))
        n = 2
        for _ in range(rnd.randint(1, 200)):
            more = self._send(s, frame(b'{"c":"p","t":"fz"}' + b'{"pad":"' + b"y" * 4000
                                       + b'"}'))
            if not more:  # the server stopped reading us (or time is up): that is the point
                break
            sent += more
            n += 1
        return n, sent

    def _session(self, s: socket.socket, rnd: random.Random) -> tuple[int, int]:
        frames = []
        if rnd.random() < 0.85:
            frames.append(self._logon(rnd))
        for _ in range(rnd.randint(1, 30)):
            frames.append(self._header(rnd) + self._body(rnd))
        sent = 0
        for f in frames:
            more = self._send(s, frame(f))
            if not more:
                break
            sent += more
            if rnd.random() < 0.2:
                self._drain(s)
        self._drain(s)
        return len(frames), sent

    # -- values ------------------------------------------------------------------------------
    def _logon(self, rnd: random.Random) -> bytes:
        name = rnd.choice(["fuzz-a", "fuzz-b", f"fuzz-{rnd.randint(0, 50)}", "", "x" * 3000])
        return json.dumps({"c": "logon", "cid": "l", "client_name": name, "a": "processed",
                           "mt": rnd.choice(["json", "fix", "json"])}).encode()

    def _value(self, rnd: random.Random, key: str, depth: int = 0) -> Any:
        """Mostly a value of the key's own type (so the command reaches its handler), drawn
        from edge cases; sometimes anything at all."""
        r = rnd.random()
        if key == "c" and r < 0.9:
            return rnd.choice(_COMMANDS)
        if key == "t" and r < 0.8:
            return rnd.choice(_TOPICS)
        if key == "filter" and r < 0.8:
            return rnd.choice(_FILTERS)
        if key == "o" and r < 0.8:
            return ",".join(rnd.sample(_OPTIONS, rnd.randint(1, 3)))
        if key == "a" and r < 0.8:
            return rnd.choice(_ACKS)
        if key in ("bm", "bookmark") and r < 0.7:
            return rnd.choice(["0", "recent", "now", "|1|", "1|2|,3|4|", "x|y|",
                               "18446744073709551616|1|", "20260101T000000", "epoch", ""])
        if key in _NUMERIC and r < 0.95:
            return rnd.choice(_EDGE_INTS + ["12", "-5", "1e400", " 7 ", "abc", 1.5, 3.0])
        if key not in _NUMERIC and r < 0.95:
            return rnd.choice(["", "abc", "x", "99999999999999999999999", "\u00e9\u4e2d",
                               "a" * rnd.randint(1, 5000), "null", "s1,s2", "all"])
        r = rnd.random()
        if r < 0.3:
            return rnd.choice(_EDGE_INTS)
        if r < 0.4:
            return rnd.choice([1.5, 1e308, -0.0, 3.0, 1e-300])
        if r < 0.65:
            return rnd.choice(["", "abc", "1e400", "-5", " 7 ", "a" * rnd.randint(1, 5000)])
        if r < 0.75:
            return rnd.choice([True, False, None])
        if r < 0.85 and depth < 3:
            return [self._value(rnd, key, depth + 1) for _ in range(rnd.randint(0, 3))]
        if r < 0.9 and depth < 3:
            return {"k": self._value(rnd, key, depth + 1)}
        return str(rnd.randint(0, 100))

    def _header(self, rnd: random.Random) -> bytes:
        h: dict[str, Any] = {"c": rnd.choice(_COMMANDS)}
        h["cid"] = str(rnd.randint(0, 1000))
        for key in rnd.sample(_KEYS, rnd.randint(1, 8)):
            h[key] = self._value(rnd, key)
        if h.get("client_name") in STEADY_NAMES or h.get("t") == STEADY_TOPIC:
            h.pop("client_name", None)
            h["t"] = "fz"
        return json.dumps(h).encode()

    def _body(self, rnd: random.Random) -> bytes:
        r = rnd.random()
        if r < 0.01:  # (the large bodies are rare: the point is bad input, not load)
            return _DEEP
        if r < 0.03:
            return b'{"s":"' + b"a" * rnd.randint(30, 20000) + b'!"}'
        if r < 0.05:
            return rnd.randbytes(rnd.randint(0, 2000))
        if r < 0.053:
            return b'{"s":"' + b"b" * (1 << 20) + b'"}'
        if r < 0.06:
            return b"[" * 2000 + b"]" * 2000
        return json.dumps({"a": self._value(rnd, "a"), "s": rnd.choice(["aaaa", "a" * 34 + "!",
                                                                        "x", ""]),
                           "id": rnd.randint(0, 20)}).encode()

    def _drain(self, s: socket.socket) -> None:
        """Read what the server sent until 10 ms of silence, ``DRAIN_LIMIT`` or the hard
        deadline, whichever comes first."""
        until = min(time.monotonic() + DRAIN_LIMIT, self.hard_deadline)
        try:
            while True:
                left = until - time.monotonic()
                if left <= 0:
                    return
                s.settimeout(min(0.01, left))
                if not s.recv(1 << 16):
                    return
        except OSError:
            pass


def _fuzz_child(port: int, seed: int, seconds: float, workers: int, out: Any) -> None:
    stats = Fuzzer(port, seed).run(seconds, workers)
    out.put((stats.frames, stats.bytes, stats.connections, dict(stats.kinds)))


def fuzz_in_process(port: int, seed: int, seconds: float, workers: int = 3) -> FuzzStats:
    """Run the fuzzer in a process of its own, so that its threads take no interpreter time
    from the steady flow's client threads (whose latency is the figure)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_fuzz_child, args=(port, seed, seconds, workers, out),
                        daemon=True)
    child.start()
    import queue

    # the workers end within GRACE of ``seconds``; the rest is the spawned interpreter's start
    deadline = time.monotonic() + seconds + GRACE + 60
    while True:
        try:
            frames, nbytes, conns, kinds = out.get(timeout=1)
            break
        except queue.Empty:
            if not child.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the fuzz process ended without figures "
                                   f"(exit code {child.exitcode})") from None
    child.join(30)
    stats = FuzzStats()
    stats.frames, stats.bytes, stats.connections = frames, nbytes, conns
    stats.kinds.update(kinds)
    return stats


class SteadyFlow:
    """An official-client publisher and subscriber pair on :data:`STEADY_TOPIC`: a message
    every ``interval`` seconds, each stamped; ``latencies`` of every delivery."""

    def __init__(self, uri: str, interval: float = 0.005) -> None:
        import AMPS

        self.interval = interval
        self.sub = AMPS.Client(STEADY_NAMES[1])
        self.sub.connect(uri)
        self.sub.logon(5000)
        self.pub = AMPS.Client(STEADY_NAMES[0])
        self.pub.connect(uri)
        self.pub.logon(5000)
        self.sent = 0
        self.received: list[int] = []
        self.latencies: list[float] = []
        self.gaps: list[float] = []
        self._last = None
        self._stop = threading.Event()
        self._done = threading.Condition()
        self.sub.subscribe(self._on, STEADY_TOPIC, timeout=5000)
        self._thread = threading.Thread(target=self._publish, daemon=True)

    def _on(self, m: Any) -> None:
        now = time.monotonic()
        d = json.loads(m.get_data())
        with self._done:
            self.received.append(d["i"])
            self.latencies.append(now - d["t"])
            if self._last is not None:
                self.gaps.append(now - self._last)
            self._last = now
            self._done.notify_all()

    def _publish(self) -> None:
        while not self._stop.is_set():
            self.pub.publish(STEADY_TOPIC, json.dumps({"i": self.sent, "t": time.monotonic()}))
            self.sent += 1
            self._stop.wait(self.interval)

    def start(self) -> SteadyFlow:
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join()
        self.pub.flush(int(timeout * 1000))
        deadline = time.monotonic() + timeout
        with self._done:
            while len(self.received) < self.sent and time.monotonic() < deadline:
                self._done.wait(deadline - time.monotonic())
        self.pub.close()
        self.sub.close()

    def figures(self) -> dict[str, Any]:
        lat = sorted(self.latencies) or [0.0]
        return {"sent": self.sent, "received": len(self.received),
                "max_latency_s": round(lat[-1], 4),
                "p99_latency_s": round(lat[int(len(lat) * 0.99) - 1 if len(lat) > 1 else 0], 4),
                "max_gap_s": round(max(self.gaps or [0.0]), 4)}


def config_extra(data_dir: Any) -> str:
    """A SOW topic and a queue for the fuzz to reach (added to a test config)."""
    return CONFIG_EXTRA.format(d=data_dir)


CONFIG_EXTRA = """<SOW>
  <Topic><Name>fz.sow</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{d}/sow/%n.sow</FileName></Topic>
  <Queue><Name>fzq</Name><MessageType>json</MessageType><UnderlyingTopic>fz</UnderlyingTopic>
    <LeasePeriod>1s</LeasePeriod></Queue>
</SOW>"""
