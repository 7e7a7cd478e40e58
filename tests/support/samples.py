"""60East's own sample programs (``samples/`` of the amps-python-client source package), run
from where they lie with their hard-coded port pointed at a test's server. ``SAMPLES`` is None
where that package is not unpacked (``AMPS_CLIENT_SAMPLES`` names it; .ci/run unpacks it)."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import threading

from tests.support.clients import Collector

#: where .ci/run unpacks the official client's source package (60East's samples ship in it)
CANDIDATES = [os.environ.get("AMPS_CLIENT_SAMPLES", ""),
              os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                           "amps-emulator", "amps-python-client-5.3.4.0", "samples")]
SAMPLES = next((pathlib.Path(p) for p in CANDIDATES
                if p and (pathlib.Path(p) / "AMPSQueueConsumer.py").exists()), None)


class Program:
    """One sample program (from ``source_dir``, by default ``SAMPLES``), its port pointed at
    ``srv``; its output lines are collected."""

    def __init__(self, srv, name: str, cwd: pathlib.Path,
                 source_dir: pathlib.Path | None = None) -> None:
        source = ((source_dir or SAMPLES) / name).read_text()
        script = cwd / name
        script.write_text(re.sub(r"127\.0\.0\.1:9027", f"127.0.0.1:{srv.port}", source))
        self.out = Collector(lambda line: line)
        self.proc = subprocess.Popen([sys.executable, "-u", str(script)], cwd=cwd, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.out(line.rstrip("\n"))

    def lines(self, n: int = 0, until: str | None = None, timeout: float = 15.0) -> list[str]:
        if until is not None:
            self.out.wait_until(lambda items: any(until in i for i in items), timeout)
        return self.out.wait_for(n, timeout)

    def finish(self, timeout: float = 15.0) -> list[str]:
        self.proc.wait(timeout)
        return self.lines()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
