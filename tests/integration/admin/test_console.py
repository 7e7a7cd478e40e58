"""The web console in headless Chromium: load the page, run a SOW query, read the grid.

Chromium is driven through chromedriver's W3C WebDriver HTTP API with the standard library
(no browser-automation package). Skipped when Chromium or chromedriver is missing, except in
CI (``CI=true``), where they are installed and a missing browser is a failure. With
``AMPS_EMULATOR_SCREENSHOT=1`` the screenshot also goes to ``docs/console.png``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.integration.admin.test_admin import make_server
from tests.support.clients import clients_for
from tests.support.paths import ROOT
from tests.support.procserver import free_port

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             shutil.which("google-chrome")) if p), None)
DRIVER = shutil.which("chromedriver")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,900"]

if not (CHROMIUM and DRIVER) and os.environ.get("CI") != "true":
    pytest.skip("chromium and chromedriver are not installed", allow_module_level=True)


class WebDriver:
    """The few W3C WebDriver calls the test needs."""

    def __init__(self, tmp_path: Path) -> None:
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
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": CHROMIUM,
            "args": [*FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"]}}}}
        self.session = self._call("POST", "/session", caps)["value"]["sessionId"]

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    def cmd(self, method: str, path: str, body: dict | None = None) -> object:
        return self._call(method, f"/session/{self.session}{path}", body)["value"]

    def js(self, script: str, *args: object) -> object:
        return self.cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def wait_js(self, script: str, timeout: float = 10.0) -> object:
        deadline = time.monotonic() + timeout
        while True:
            got = self.js(script)
            if got or time.monotonic() > deadline:
                return got
            time.sleep(0.05)

    def element(self, css: str) -> str:
        found = self.cmd("POST", "/element", {"using": "css selector", "value": css})
        return next(iter(found.values()))  # type: ignore[union-attr]

    def quit(self) -> None:
        try:
            self.cmd("DELETE", "")
        finally:
            self.proc.terminate()
            self.proc.wait(10)


def test_console_query_grid_and_screenshot(tmp_path):
    srv = make_server(tmp_path / "srv")
    make = clients_for(srv.uri)
    connect = next(make)
    pub, sub, worker = connect("order-entry"), connect("risk-view"), connect("worker-1")
    sub.subscribe(lambda m: None, "orders", "/qty > 2")
    worker.subscribe(lambda m: None, "work")
    for i in range(8):
        pub.publish("orders", json.dumps({"id": i, "sym": "ABCD"[i % 4], "qty": i * 10}))
    for i in range(3):
        pub.publish("work", json.dumps({"job": i}))
    pub.flush(5000)
    browser = WebDriver(tmp_path)
    try:
        browser.cmd("POST", "/url", {"url": srv.admin_uri + "/"})
        topics = browser.js("return [...document.querySelectorAll('#topics tr')]"
                            ".map(r => r.innerText)")
        assert any(t.split()[:3] == ["orders", "json", "8"] for t in topics), topics
        clients = browser.js("return document.querySelector('#clients').innerText")
        assert "risk-view" in clients and "orders" in clients
        queues = browser.js("return document.querySelector('#queues').innerText")
        assert "work" in queues

        flt = browser.element("#q-filter")
        browser.cmd("POST", f"/element/{flt}/value", {"text": "/qty >= 40"})
        order = browser.element("#q-orderby")
        browser.cmd("POST", f"/element/{order}/value", {"text": "/qty DESC"})
        browser.cmd("POST", f"/element/{browser.element('#q-run')}/click", {})
        assert browser.wait_js("return document.body.dataset.queryDone === '1'")
        grid = browser.js("return [...document.querySelectorAll('#grid tr')]"
                          ".map(r => [...r.children].map(c => c.innerText))")
        assert grid[0] == ["SowKey", "id", "sym", "qty"]
        assert [row[3] for row in grid[1:]] == ["70", "60", "50", "40"]
        assert browser.js("return document.querySelector('#q-status').innerText") \
            == "4 of 8 records"

        png = base64.b64decode(browser.cmd("GET", "/screenshot"))  # type: ignore[arg-type]
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        (tmp_path / "console.png").write_bytes(png)
        if os.environ.get("AMPS_EMULATOR_SCREENSHOT") == "1":
            (ROOT / "docs").mkdir(exist_ok=True)
            (ROOT / "docs" / "console.png").write_bytes(png)
    finally:
        browser.quit()
        make.close()
        srv.stop()
