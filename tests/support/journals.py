"""Journal helpers shared by unit and integration tests: :class:`SlowGunzip`, a decompressor
of compressed journal segments that a test holds back, to see what goes on meanwhile."""

from __future__ import annotations

import threading

from amps_emulator.journal import stored


class SlowGunzip:
    """Put in place of ``journal.stored.decompress`` (``install``): each call says it began
    (``entered``) and waits for ``release`` before it decompresses; ``calls`` counts them,
    ``threads`` says which thread made each (a running server's: its worker, never its loop)."""

    def __init__(self) -> None:
        self.real = stored.decompress
        self.calls = 0
        self.threads: list[threading.Thread] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def install(self, monkeypatch) -> SlowGunzip:
        monkeypatch.setattr(stored, "decompress", self)
        return self

    def __call__(self, path: str) -> bytes:
        self.calls += 1
        self.threads.append(threading.current_thread())
        self.entered.set()
        if not self.release.wait(60):
            raise AssertionError("SlowGunzip was never released")
        return self.real(path)
