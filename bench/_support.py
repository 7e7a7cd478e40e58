"""Shared bench helpers: the machine line, a server subprocess, and a raw AMPS peer.

The server always runs in its own process (``python -m amps_emulator.server``), so a bench never shares
a GIL between the server and the clients that load it.
"""

from __future__ import annotations

import collections
import json
import os
import platform
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as a bench prints them beside its figures."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def percentiles(values: list[float]) -> dict[str, float]:
    """``p50``, ``p99`` and ``max`` of ``values`` (at least one)."""
    s = sorted(values)
    return {"p50": s[len(s) // 2], "p99": s[int(len(s) * 0.99)], "max": s[-1]}


def side_by_side(baseline: Path | None) -> list[str]:
    """The targets a side-by-side bench measures (see :func:`launch`)."""
    return ["sink", "emulator"] + (["baseline"] if baseline else [])


def interleaved(targets: list[str], rounds: int) -> Iterator[tuple[int, str]]:
    """``(round, target)`` for each round, the targets in turn, every other round reversed
    (so neither side always runs on a machine the other has just warmed or loaded)."""
    for r in range(rounds):
        for t in targets if r % 2 == 0 else targets[::-1]:
            yield r, t


def target_labels(baseline: Path | None, sink: str = "do-nothing fan-out sink") -> dict[str, str]:
    """How a side-by-side bench's table names each target."""
    return {"sink": sink, "emulator": "emulator (built-in config)",
            "baseline": f"emulator [baseline {baseline}]"}


class ServerProcess:
    """``amps-emulator`` in a subprocess on a free port; waits for its ready line."""

    def __init__(self, config_path: str | None = None, extra: list[str] | None = None, *,
                 root: Path | None = None, env: dict[str, str] | None = None) -> None:
        # root: the checkout whose amps_emulator runs (its directory is the server's sys.path[0]);
        # env: added to the environment (e.g. AMPS_EMULATOR_PURE=1)
        self.root = root or ROOT
        self.env = {**os.environ, **env} if env else None
        self.tmp = tempfile.TemporaryDirectory(prefix="amps-bench-")
        args = [sys.executable, "-m", "amps_emulator.server", "--log-level", "WARNING"]
        if config_path:
            args.append(config_path)
        else:
            args += ["--data-dir", os.path.join(self.tmp.name, "amps-data")]
        self.args = args + ["--listen", "127.0.0.1:0", *(extra or [])]
        self._launch()

    def _launch(self) -> None:
        self.proc = subprocess.Popen(self.args, cwd=self.root, env=self.env, stdout=subprocess.PIPE,
                                     text=True)
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line.startswith("ready: "):
            self.proc.kill()
            raise RuntimeError(f"server did not start: {line!r}")
        self.uri = line.split()[1]
        self.ready_uris = line.split()[1:]  # one per transport
        self.port = int(self.uri.split(":")[2].split("/")[0])

    def kill_and_restart(self) -> float:
        """SIGKILL the server, start it again on the same data; seconds to its ready line
        (interpreter start-up included). The new process may listen on another port."""
        self.proc.kill()
        self.proc.wait()
        t0 = time.perf_counter()
        self._launch()
        return time.perf_counter() - t0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.tmp.cleanup()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


#: the 200-byte order the publish benches send (``BODY % i``). Valid JSON: ``id`` is padded
#: with spaces (``%08d`` zero-padding is not a JSON number, so a keyed SOW topic refused
#: every message and the "keyed SOW" figures measured failure acks)
BODY = '{"id":%8d,"sym":"IBM","qty":100,"px":123.45,"note":"' + "x" * 141 + '"}'


def warm_publisher(uri: str, name: str = "bench-publisher", warmup: int = 2000):
    """An official client logged on to ``uri`` that has published ``warmup`` messages."""
    import AMPS

    c = AMPS.Client(name)
    c.connect(uri)
    c.logon(5000)
    for i in range(warmup):
        c.publish("warmup", BODY % i)
    c.flush(10000)
    return c


def timed_publish(client, n: int, topic: str = "ingest") -> float:
    """Seconds ``client`` takes to publish ``n`` messages of :data:`BODY` and flush."""
    t0 = time.perf_counter()
    for i in range(n):
        client.publish(topic, BODY % i)
    client.flush(120_000)
    return time.perf_counter() - t0


def frame(header: dict, body: bytes = b"") -> bytes:
    h = json.dumps(header, separators=(",", ":")).encode()
    return (len(h) + len(body)).to_bytes(4, "big") + h + body


def raw_subscriber(port: int, name: str, topic: str, filt: str | None) -> socket.socket:
    """A raw socket logged on and subscribed (acks consumed)."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(frame({"c": "logon", "cid": "l", "client_name": name, "a": "processed"}))
    sub = {"c": "subscribe", "cid": "s", "t": topic, "sub_id": "s", "a": "processed"}
    if filt:
        sub["filter"] = filt
    s.sendall(frame(sub))
    buf = b""
    acks = 0
    while acks < 2:
        buf += s.recv(65536)
        while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
            n = int.from_bytes(buf[:4], "big")
            buf = buf[4 + n:]
            acks += 1
    return s


def count_frames(sock: socket.socket, expected: int, deadline: float) -> int:
    """Read frames until ``expected`` have arrived or ``deadline`` passes."""
    got = 0
    buf = bytearray()
    pos = 0
    sock.settimeout(0.5)
    while got < expected and time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 20)
        except TimeoutError:
            continue
        if not chunk:
            break
        buf += chunk
        n = len(buf)
        while n - pos >= 4:
            size = int.from_bytes(buf[pos:pos + 4], "big")
            if n - pos - 4 < size:
                break
            pos += 4 + size
            got += 1
        if pos:
            del buf[:pos]
            pos = 0
    return got


class RawPeer:
    """A raw AMPS connection for benches: logged on; frames read with the codec's decoder."""

    def __init__(self, port: int, name: str) -> None:
        from amps_emulator.protocol.codec import FrameDecoder

        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = FrameDecoder(1 << 30)
        self._ready: collections.deque[bytes] = collections.deque()
        self.s.sendall(frame({"c": "logon", "cid": "l", "client_name": name, "a": "processed"}))
        self.wait_ack("l", "processed")

    def frames(self, data: bytes) -> list[bytes]:
        """Feed received bytes; return every complete frame not handed out yet."""
        out = list(self._ready)
        self._ready.clear()
        if data:
            out.extend(self.decoder.feed(data))
        return out

    def next_frame(self) -> bytes:
        while not self._ready:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self._ready.extend(self.decoder.feed(chunk))
        return self._ready.popleft()

    def wait_ack(self, cid: str, ack_type: str, on_other=None) -> dict:
        """Skip frames (handing them to ``on_other``) until the ``ack_type`` ack for ``cid``."""
        from amps_emulator.protocol.codec import split_frame

        while True:
            payload = self.next_frame()
            if payload.startswith(b'{"c":"ack"'):
                h, _ = split_frame(payload)
                if h.get("cid") == cid and h.get("a") == ack_type:
                    if h.get("status") != "success":
                        raise RuntimeError(f"{cid}: {h}")
                    return h
            elif on_other is not None:
                on_other(payload)

    def close(self) -> None:
        self.s.close()


#: Linux's SO_TIMESTAMPNS (the kernel stamps each received packet; ``socket`` does not name it)
_SO_TIMESTAMPNS = 35 if sys.platform == "linux" else None


class PersistedPublisher:
    """A raw publisher (``a=persisted`` with sequence numbers) whose reader thread follows
    the server's cumulative persisted acks: ``acked``, ``ack_times``, ``progress`` (a
    Condition notified on each ack), ``error`` (a failure ack). Subclasses build the batches
    and pass the payloads to :meth:`send_payloads`.

    ``ack_times`` holds when the reader thread read each ack (``time.perf_counter``); on Linux
    ``ack_arrivals`` also holds when the kernel received it (``time.time``; None elsewhere).
    On a loaded machine the reader thread may wait for a CPU a while: the first is what a
    Python client sees, the second what reached the client's socket."""

    def __init__(self, port: int, name: str) -> None:
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.ack_arrivals: list[tuple[int, float]] | None = None
        if _SO_TIMESTAMPNS is not None:
            try:
                self.s.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                self.ack_arrivals = []
            except OSError:
                pass
        self.s.sendall(frame({"c": "logon", "cid": "l", "client_name": name, "a": "processed"}))
        self.seq = 0
        self.acked = 0
        self.ack_times: list[tuple[int, float]] = []
        self.progress = threading.Condition()
        self.error: str | None = None
        # ready once the reader has read the logon ack: what the reader imports and sets up
        # is done before the caller times anything (a probe at real-time priority importing
        # the codec at the start of a round held a CPU for ~60 ms and starved the server)
        self._logged_on = threading.Event()
        threading.Thread(target=self._reader, daemon=True).start()
        if not self._logged_on.wait(60):
            raise RuntimeError(f"{name}: no logon ack")

    def _reader(self) -> None:
        from amps_emulator.protocol.codec import FrameDecoder, split_frame

        decoder = FrameDecoder(1 << 30)
        arrivals = self.ack_arrivals
        while True:
            arrived = None
            try:
                if arrivals is None:
                    chunk = self.s.recv(1 << 16)
                else:  # a frame at a time: a read reports the arrival of the last segment it
                    # took, so a read of several acks would date them all by the last one
                    chunk, arrived = self._frame_with_arrival()
            except OSError:
                return
            if not chunk:
                return
            for payload in decoder.feed(chunk):
                h, _ = split_frame(payload)
                if h.get("a") != "persisted":
                    if h.get("cid") == "l" and h.get("a") == "processed":
                        self._logged_on.set()
                    continue
                with self.progress:
                    if h.get("status", "success") != "success":
                        self.error = f"persisted failure: {h}"
                        self.progress.notify_all()
                        return
                    self.acked = int(h["s"])
                    self.ack_times.append((self.acked, time.perf_counter()))
                    if arrivals is not None:
                        arrivals.append((self.acked, time.time() if arrived is None else arrived))
                    self.progress.notify_all()

    def _frame_with_arrival(self) -> tuple[bytes, float | None]:
        """The next whole frame (b"": the connection closed) and when the kernel received
        its first byte (the segment the server's write of it made)."""
        arrived = None
        head = b""
        while len(head) < 4:
            part, ancillary, _flags, _addr = self.s.recvmsg(4 - len(head), socket.CMSG_SPACE(16))
            if not part:
                return b"", None
            if not head:
                for level, kind, data in ancillary:
                    if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                        sec, nsec = struct.unpack("qq", data[:16])
                        arrived = sec + nsec / 1e9
            head += part
        size = int.from_bytes(head, "big")
        body = self.s.recv(size, socket.MSG_WAITALL) if size else b""
        if len(body) < size:
            return b"", None
        return head + body, arrived

    def send_payloads(self, payloads: list[bytes]) -> None:
        self.s.sendall(b"".join(len(p).to_bytes(4, "big") + p for p in payloads))

    def wait_window(self, window: int) -> None:
        """Block while more than ``window`` publishes are unacknowledged."""
        with self.progress:
            while self.seq - self.acked > window and self.error is None:
                self.progress.wait(1)
            if self.error is not None:
                raise RuntimeError(self.error)

    def wait_acked(self, seq: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        with self.progress:
            while self.acked < seq:
                if self.error is not None:
                    raise RuntimeError(self.error)
                if not self.progress.wait(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"acked {self.acked} of {seq}")


def cpu_seconds(pid: int) -> float:
    """CPU time the process ``pid`` has used so far, all its threads (Linux: ns resolution
    from ``/proc/PID/task/*/schedstat``; elsewhere 0): on a machine shared with other work, the
    cost of a run is steadier than its wall time."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
    except OSError:
        return 0.0
    return total / 1e9


class SinkProcess:
    """``bench/sink.py`` in a subprocess (``fanout``: with ``--fanout``): the do-nothing
    baseline. ``uri`` and ``port`` as :class:`ServerProcess`."""

    def __init__(self, fanout: bool = False) -> None:
        args = [sys.executable, str(ROOT / "bench" / "sink.py")] + (["--fanout"] if fanout else [])
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line.startswith("ready: "):
            self.proc.kill()
            raise RuntimeError(f"sink did not start: {line!r}")
        self.uri = line.split()[1]
        self.port = int(self.uri.split(":")[2].split("/")[0])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)

    def __enter__(self) -> SinkProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def launch(target: str, baseline: Path | None = None, extra: list[str] | None = None,
           config: str | None = None) -> ServerProcess | SinkProcess:
    """The process a side-by-side bench measures: ``sink`` (the fan-out sink), ``emulator``
    (this checkout) or ``baseline`` (the checkout at ``baseline``)."""
    if target == "sink":
        return SinkProcess(fanout=True)
    return ServerProcess(config, extra, root=baseline if target == "baseline" else None)


class FrameCounter:
    """Counts the frames arriving on many sockets, in as little Python per frame as it can
    (the compiled frame scanner when built): what a reader that only counts costs, so that a
    bench measures the server's delivery rate, not a client library's."""

    def __init__(self) -> None:
        try:
            from amps_emulator._speedups import scan_frames
        except ImportError:
            from amps_emulator.protocol.codec import scan_frames_py as scan_frames
        self._scan = scan_frames

    def run(self, socks: list[socket.socket], expected: int, deadline: float,
            done: Callable[[bytes], bool] | None = None) -> tuple[list[int], float, float]:
        """Read every socket until ``expected`` frames arrived on each (or ``done(frame)`` is
        true of a frame on every socket; or ``deadline``). Returns the counts per socket and
        the monotonic times of the first and the last byte read."""
        import selectors

        sel = selectors.DefaultSelector()
        scan = self._scan
        state = []
        for i, s in enumerate(socks):
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ, i)
            state.append([b"", -1, 0, False])  # leftover, pending length, count, done
        open_ = len(socks)
        first = last = 0.0
        while open_ and time.monotonic() < deadline:
            for key, _ in sel.select(0.5):
                i = key.data
                st = state[i]
                try:
                    chunk = key.fileobj.recv(1 << 20)  # type: ignore[union-attr]
                except BlockingIOError:
                    continue
                last = time.perf_counter()
                if not first:
                    first = last
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_ -= 1
                    continue
                data = st[0] + chunk if st[0] else chunk
                frames, pos, st[1] = scan(data, st[1], 1 << 30)
                st[0] = data[pos:]
                st[2] += len(frames)
                if done is not None and frames and not st[3] and any(map(done, frames)):
                    st[3] = True
                if st[2] >= expected or st[3]:
                    sel.unregister(key.fileobj)
                    open_ -= 1
        sel.close()
        return [st[2] for st in state], first, last
