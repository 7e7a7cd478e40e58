"""The emulator as a child process, for tests that SIGKILL and restart the server.

``ProcServer.start()`` returns once the child printed its ready line; ``kill()`` sends
SIGKILL; ``start()`` again restarts it on the same port and data directory, the way an
operator restarts AMPS after a crash.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


_GIVEN: set[int] = set()


def free_port() -> int:
    """A port nothing listens on now, for a server started later on it.

    It is picked below the kernel's ephemeral range: a port the kernel gave us for a moment
    (``bind`` to port 0) can be handed to any outgoing connection before the server binds it,
    and a replication link retrying to connect makes such connections all the time, so a
    server then failed to start with "address already in use". Ports are never handed twice
    in one test process.
    """
    low, high = _ephemeral_range()
    top = low - 1 if low > 11000 else 65535
    bottom = top - 10000 if low > 11000 else high + 1
    rng = random.Random()
    for _ in range(1000):
        port = rng.randint(bottom, top)
        if port in _GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _GIVEN.add(port)
        return port
    raise RuntimeError(f"no free port in {bottom}..{top}")


class ProcServer:
    def __init__(self, data_dir: Path, config: Path | None = None, *extra: str) -> None:
        self.data_dir = Path(data_dir)
        self.config = config
        self.extra = list(extra)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.stderr_path = self.data_dir.parent / f"server-{self.port}.log"

    @classmethod
    def with_config(cls, tmp_path: Path, make_xml) -> ProcServer:
        """A started server whose config file ``make_xml(data_dir)`` is written under ``tmp_path``."""
        data = Path(tmp_path) / "data"
        cfg = Path(tmp_path) / "amps.xml"
        cfg.write_text(make_xml(data))
        return cls(data, cfg).start()

    @property
    def uri(self) -> str:
        return f"tcp://127.0.0.1:{self.port}/amps/json"

    def command(self) -> list[str]:
        args = [sys.executable, "-m", "amps_emulator.server", "--listen", f"127.0.0.1:{self.port}",
                "--log-level", "WARNING"]
        if self.config is not None:
            args.append(str(self.config))
        else:
            args += ["--data-dir", str(self.data_dir)]
        return args + self.extra

    def start(self, timeout: float = 30.0) -> ProcServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        err = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen(
            self.command(), cwd=self.data_dir.parent, stdout=subprocess.PIPE, stderr=err,
            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        err.close()
        line = self.proc.stdout.readline()  # the ready line, or EOF if it failed
        if not line.startswith("ready: "):
            self.proc.wait(timeout)
            raise RuntimeError(f"server did not start (rc={self.proc.returncode}): "
                               f"{self.stderr_path.read_text()[-2000:]}")
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait(30)

    def run_to_exit(self, timeout: float = 30.0) -> subprocess.CompletedProcess:
        """Start and expect the child to exit by itself (e.g. refusing a damaged journal)."""
        return subprocess.run(self.command(), cwd=self.data_dir.parent, capture_output=True,
                              text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})
