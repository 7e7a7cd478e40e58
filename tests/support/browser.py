"""Headless Chromium for the web console's tests, driven through chromedriver's W3C WebDriver
HTTP API with the standard library (no browser-automation package).

``CHROMIUM``/``DRIVER`` are the binaries found (None when missing); a test module skips
without them except in CI (``CI=true``), where they are installed and a missing browser is a
failure (``require_browser``). ``png_text``/``with_png_text`` read and write a PNG ``tEXt``
chunk (the console's screenshot carries the digest of the sources that drew it).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path
from typing import Any

import pytest

from tests.support.procserver import free_port

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             shutil.which("google-chrome")) if p), None)
DRIVER = shutil.which("chromedriver")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--force-device-scale-factor=1",
         "--font-render-hinting=none", "--window-size=1280,900"]


def require_browser() -> None:
    """Skip the calling module without Chromium and chromedriver (fail in CI)."""
    if not (CHROMIUM and DRIVER) and os.environ.get("CI") != "true":
        pytest.skip("chromium and chromedriver are not installed", allow_module_level=True)


class WebDriver:
    """The few W3C WebDriver calls the tests need."""

    def __init__(self, tmp_path: Path, size: tuple[int, int] = (1280, 900)) -> None:
        assert CHROMIUM and DRIVER, "chromium and chromedriver must be installed in CI"
        port = free_port()
        self.proc = subprocess.Popen([DRIVER, f"--port={port}"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                if self._call("GET", "/status")["value"]["ready"]:
                    break
            except (OSError, urllib.error.URLError):
                pass
            assert time.monotonic() < deadline, "chromedriver did not start"
            time.sleep(0.05)  # polling the driver's status with a deadline
        flags = [f for f in FLAGS if not f.startswith("--window-size")]
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": CHROMIUM,
            "args": [*flags, f"--window-size={size[0]},{size[1]}",
                     f"--user-data-dir={tmp_path / 'chromium-profile'}"]}}}}
        self.session = self._call("POST", "/session", caps)["value"]["sessionId"]

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    def cmd(self, method: str, path: str, body: dict | None = None) -> Any:
        return self._call(method, f"/session/{self.session}{path}", body)["value"]

    def open(self, url: str) -> None:
        self.cmd("POST", "/url", {"url": url})

    def js(self, script: str, *args: object) -> Any:
        return self.cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def wait_js(self, script: str, timeout: float = 10.0) -> Any:
        """``script``'s value once it is truthy (its last value after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.js(script)
            if got or time.monotonic() > deadline:
                return got
            time.sleep(0.05)  # polling the page with a deadline

    def element(self, css: str) -> str:
        found = self.cmd("POST", "/element", {"using": "css selector", "value": css})
        return next(iter(found.values()))

    def click(self, css: str) -> None:
        """A real click (the driver's pointer) on the first element ``css`` selects."""
        self.cmd("POST", f"/element/{self.element(css)}/click", {})

    def type(self, css: str, text: str) -> None:
        el = self.element(css)
        self.cmd("POST", f"/element/{el}/clear", {})
        self.cmd("POST", f"/element/{el}/value", {"text": text})

    def text(self, css: str) -> str:
        return self.js("const e = document.querySelector(arguments[0]); "
                       "return e === null ? null : e.innerText", css)

    def screenshot(self) -> bytes:
        import base64

        return base64.b64decode(self.cmd("GET", "/screenshot"))

    def full_page_screenshot(self) -> bytes:
        """The whole page, however tall, at the window's width (Chromium's DevTools call
        through chromedriver)."""
        import base64

        width, height = self.js("const e = document.documentElement; "
                                "return [e.clientWidth, e.scrollHeight]")
        shot = self.cmd("POST", "/goog/cdp/execute", {"cmd": "Page.captureScreenshot", "params": {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}}})
        return base64.b64decode(shot["data"])

    def quit(self) -> None:
        try:
            self.cmd("DELETE", "")
        finally:
            self.proc.terminate()
            self.proc.wait(10)


def _chunks(png: bytes) -> list[tuple[bytes, bytes]]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    out, i = [], 8
    while i < len(png):
        (n,) = struct.unpack(">I", png[i:i + 4])
        out.append((png[i + 4:i + 8], png[i + 8:i + 8 + n]))
        i += 12 + n
    return out


def png_text(png: bytes, key: str) -> str | None:
    """The value of ``png``'s ``tEXt`` chunk ``key`` (None: it has none)."""
    for kind, data in _chunks(png):
        if kind == b"tEXt" and data.partition(b"\0")[0] == key.encode("latin-1"):
            return data.partition(b"\0")[2].decode("latin-1")
    return None


def with_png_text(png: bytes, key: str, value: str) -> bytes:
    """``png`` with a ``tEXt`` chunk ``key`` = ``value`` after its header chunk."""
    data = key.encode("latin-1") + b"\0" + value.encode("latin-1")
    chunk = (struct.pack(">I", len(data)) + b"tEXt" + data
             + struct.pack(">I", zlib.crc32(b"tEXt" + data) & 0xFFFFFFFF))
    end_of_header = 8 + 12 + struct.unpack(">I", png[8:12])[0]
    return png[:end_of_header] + chunk + png[end_of_header:]


__all__ = ["CHROMIUM", "DRIVER", "WebDriver", "png_text", "require_browser", "with_png_text"]
