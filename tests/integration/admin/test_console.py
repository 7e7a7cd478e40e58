"""The web console in headless Chromium (:mod:`tests.support.browser`): load it, act from it
(every action, through buttons and forms), and see the result in its panels and in the
server; live panels and charts; a read-only user's refusals; the screenshot in the docs.

**The screenshot** (``docs/console.png``) is made by :func:`test_the_screenshot_in_the_docs`
from a fixed scene (a replicated pair with a queue, named clients, a few seconds of traffic).
Its pixels differ from run to run (ports, addresses, times, rates), so the test does not
rewrite it on every run: the PNG carries the digest of the sources that draw the console
(``console.py``, ``console.js``, ``console.css``) in a ``tEXt`` chunk, and the test writes a
new one only when those sources changed since the picture was made, or when
``AMPS_EMULATOR_SCREENSHOT=1`` asks for one. In CI (``CI=true``) a picture older than the
sources is a failure, so the docs never show a console that no longer exists.
"""

from __future__ import annotations

import hashlib
import json
import os
import time

import pytest

from tests.integration.admin.test_admin import make_server
from tests.integration.security.test_admin_attacks import secured_xml
from tests.support.browser import WebDriver, png_text, require_browser, with_png_text
from tests.support.clients import clients_for, store_client
from tests.support.entitlements import serve, with_user
from tests.support.paths import ROOT
from tests.support.servers import until

require_browser()

OPS = ROOT / "amps_emulator" / "server" / "ops"
SOURCES = [OPS / "console.py", OPS / "console.js", OPS / "console.css"]
PICTURE = ROOT / "docs" / "console.png"
DIGEST_KEY = "amps-emulator-console-sources"


def sources_digest() -> str:
    h = hashlib.sha256()
    for path in SOURCES:
        h.update(path.name.encode() + b"\0" + path.read_bytes().replace(b"\r\n", b"\n"))
    return h.hexdigest()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    b = WebDriver(tmp_path_factory.mktemp("browser"), size=(1280, 1000))
    yield b
    b.quit()


@pytest.fixture
def srv(tmp_path):
    s = make_server(tmp_path / "srv")
    yield s
    s.stop()


def press(browser: WebDriver, css: str) -> None:
    """Click the button ``css`` selects, found and clicked in one script (a live panel is
    swapped every second, so a reference kept between two driver calls could go stale)."""
    assert browser.js("const b = document.querySelector(arguments[0]); "
                      "if (b === null) return false; b.click(); return true", css), css


def act(browser: WebDriver, css: str, clicks: int = 1) -> str:
    """Press ``css`` (twice for an action that asks to be confirmed), wait until the action
    is done and the panels show its outcome; the status line it left."""
    before = int(browser.js("return document.body.dataset.actions || '0'"))
    for _ in range(clicks):
        press(browser, css)
    assert browser.wait_js(f"return Number(document.body.dataset.actions || 0) > {before}",
                           timeout=30), css
    return browser.text("#action-status")


def load(browser: WebDriver, url: str) -> None:
    browser.open(url)
    assert browser.wait_js("return Number(document.body.dataset.refreshes || 0) > 0 && "
                           "Number(document.body.dataset.charts || 0) > 0")


def clients(srv) -> set[str]:
    return srv.call(lambda: {c.client_name for c in srv.server.connections})


# -- the SOW query box --------------------------------------------------------------------
def test_console_query_grid(srv, browser):
    make = clients_for(srv.uri)
    connect = next(make)
    pub = connect("order-entry")
    try:
        for i in range(8):
            pub.publish("orders", json.dumps({"id": i, "sym": "ABCD"[i % 4], "qty": i * 10}))
        pub.flush(5000)
        load(browser, srv.admin_uri + "/")
        topics = browser.js("return [...document.querySelectorAll('#topics tr')]"
                            ".map(r => r.innerText)")
        assert any(t.split()[:3] == ["orders", "json", "8"] for t in topics), topics
        browser.type("#q-filter", "/qty >= 40")
        browser.type("#q-orderby", "/qty DESC")
        browser.click("#q-run")
        assert browser.wait_js("return document.body.dataset.queryDone === '1'")
        grid = browser.js("return [...document.querySelectorAll('#grid tr')]"
                          ".map(r => [...r.children].map(c => c.innerText))")
        assert grid[0] == ["SowKey", "id", "sym", "qty"]
        assert [row[3] for row in grid[1:]] == ["70", "60", "50", "40"]
        assert browser.text("#q-status") == "4 of 8 records"
    finally:
        make.close()


# -- live panels and charts ---------------------------------------------------------------
CHARTS = ("#chart-rates", "#chart-queues", "#chart-acks", "#chart-lag")


def test_panels_refresh_live_and_the_charts_have_axes_from_the_first_second(srv, browser):
    load(browser, srv.admin_uri + "/")
    for chart in CHARTS:  # axes, ticks and the unit before any traffic
        labels = browser.js("return [...document.querySelectorAll(arguments[0] + ' text')]"
                            ".map(t => t.textContent)", chart)
        assert "now" in labels and "0" in labels, (chart, labels)
    units = [browser.js("return document.querySelector(arguments[0] + ' text[transform]')"
                        ".textContent", c) for c in CHARTS]
    assert units == ["messages/s", "messages", "ms", "seconds"]
    # the history has a sample from when the Admin interface started: a line at once
    assert int(browser.js("return document.querySelector('#chart-rates').dataset.points")) >= 1
    assert "no clients" in browser.text("#clients")

    make = clients_for(srv.uri)
    connect = next(make)
    try:
        pub = store_client(srv.uri, "live-pub")
        worker = connect("live-worker")
        worker.subscribe(lambda m: None, "orders")
        for i in range(30):
            pub.publish("orders", json.dumps({"id": i, "qty": i}))
        for i in range(4):
            pub.publish("work", json.dumps({"job": i}))
        pub.publish_flush(5000)
        # no reload: the panels follow the server
        assert browser.wait_js("return document.querySelector('#clients').innerText"
                               ".includes('live-worker')")
        assert browser.wait_js("return [...document.querySelectorAll('#topics tr')]"
                               ".some(r => r.innerText.split(/\\s+/).slice(0, 3).join(' ')"
                               " === 'orders json 30')")
        assert browser.wait_js("return [...document.querySelectorAll('#queues tr')]"
                               ".some(r => r.innerText.split(/\\s+/).slice(0, 2).join(' ')"
                               " === 'work 4')")
        # and the charts: the topic's rate, the queue's depth, the acks' latency
        assert browser.wait_js("return [...document.querySelectorAll('#chart-rates path')]"
                               ".some(p => p.dataset.series === 'orders')")
        assert browser.wait_js("return [...document.querySelectorAll('#chart-queues path')]"
                               ".some(p => p.dataset.series === 'work')")
        assert browser.wait_js("return [...document.querySelectorAll('#chart-acks path')]"
                               ".some(p => p.dataset.series === 'mean')", timeout=15)
        pub.close()
        assert browser.wait_js("return !document.querySelector('#clients').innerText"
                               ".includes('live-pub')")
    finally:
        make.close()


# -- actions ------------------------------------------------------------------------------
def test_faults_are_injected_and_cleared_from_the_console(srv, browser):
    make = clients_for(srv.uri)
    connect = next(make)
    connect("slow-app")
    try:
        load(browser, srv.admin_uri + "/")
        browser.js("const k = document.getElementById('f-kind'); k.value = 'delay';"
                   "k.dispatchEvent(new Event('change'))")
        assert browser.js("return document.getElementById('f-seconds').closest('label').hidden")
        browser.type("#f-client", "slow-app")
        browser.type("#f-ms", "200")
        status = act(browser, "#f-add")
        assert status.startswith("inject delay: "), status
        assert srv.http("/emulator/faults")["faults"] == [
            {"id": 1, "kind": "delay", "client": "slow-app", "ms": 200, "connections": 1}]
        assert "client=slow-app, ms=200" in browser.text("#faults")

        browser.js("const k = document.getElementById('f-kind'); k.value = 'hold_acks';"
                   "k.dispatchEvent(new Event('change'))")
        browser.type("#f-seconds", "30")
        act(browser, "#f-add")
        assert "seconds=30" in browser.text("#faults")
        assert len(srv.http("/emulator/faults")["faults"]) == 2

        status = act(browser, "button.act[data-path='/emulator/faults/1']")
        assert status.startswith("clear 1: "), status
        assert [f["id"] for f in srv.http("/emulator/faults")["faults"]] == [2]
        assert "slow-app" not in browser.text("#faults")

        status = act(browser, "button.act[data-path='/emulator/faults']")  # clear all
        assert srv.http("/emulator/faults")["faults"] == []
        assert "no faults injected" in browser.text("#faults")

        browser.type("#f-seconds", "")
        browser.js("const k = document.getElementById('f-kind'); k.value = 'refuse';"
                   "k.dispatchEvent(new Event('change'))")
        browser.js("document.getElementById('f-transport').value = 'nope'")
        status = act(browser, "#f-add")  # a bad fault: the server's reason is shown
        assert "failed (" in status and browser.js(
            "return document.getElementById('action-status').className") == "err"
    finally:
        make.close()


def test_a_client_is_disconnected_from_the_console(srv, browser):
    make = clients_for(srv.uri)
    connect = next(make)
    connect("victim")
    connect("bystander")
    try:
        load(browser, srv.admin_uri + "/")
        assert "victim" in browser.text("#clients")
        status = act(browser, "tr[data-client='victim'] button.act")
        assert status.startswith("disconnect victim: "), status
        assert until(lambda: clients(srv) == {"bystander"})
        assert browser.wait_js("return !document.querySelector('#clients').innerText"
                               ".includes('victim')")
    finally:
        make.close()


def test_snapshot_and_restore_from_the_console(srv, browser):
    pub = store_client(srv.uri, "snap-pub")
    try:
        for i in range(5):
            pub.publish("orders", json.dumps({"id": i, "qty": i}))
        pub.publish_flush(5000)
        load(browser, srv.admin_uri + "/")
        status = act(browser, "#snap-take")
        assert status.startswith("snapshot taken: "), status
        assert browser.js("return !document.getElementById('snap-link').hidden && "
                          "document.getElementById('snap-link').href.startsWith('blob:')")
        for i in range(5, 12):
            pub.publish("orders", json.dumps({"id": i, "qty": i}))
        pub.publish_flush(5000)
        assert srv.http("/emulator/sow/orders")["count"] == 12
        status = act(browser, "#snap-restore")
        assert status.startswith("restore: "), status
        assert srv.http("/emulator/sow/orders")["count"] == 5
        assert browser.wait_js("return [...document.querySelectorAll('#topics tr')]"
                               ".some(r => r.innerText.split(/\\s+/).slice(0, 3).join(' ')"
                               " === 'orders json 5')")
    finally:
        pub.close()


def test_reset_asks_for_a_second_click_then_empties_the_server(srv, browser):
    make = clients_for(srv.uri)
    connect = next(make)
    pub = connect("reset-pub")
    try:
        for i in range(3):
            pub.publish("orders", json.dumps({"id": i}))
        pub.publish("work", json.dumps({"job": 1}))
        pub.flush(5000)
        load(browser, srv.admin_uri + "/")
        reset = "#toolbar button.act[data-path='/emulator/reset']"
        press(browser, reset)  # armed: nothing is done yet
        assert browser.text(reset) == "click again to Reset everything"
        assert srv.http("/emulator/sow/orders")["count"] == 3
        status = act(browser, reset)
        assert status.startswith('Reset everything: {"reset":"all"'), status
        assert srv.http("/emulator/sow/orders")["count"] == 0
        assert clients(srv) == set()
        assert "no clients" in browser.text("#clients")
        assert browser.text(reset) == "Reset everything"

        # a topic's records alone
        pub = connect("reset-pub-2")
        pub.publish("orders", json.dumps({"id": 7}))
        pub.flush(5000)
        assert browser.wait_js("return [...document.querySelectorAll('#topics tr')]"
                               ".some(r => r.innerText.startsWith('orders\\tjson\\t1'))")
        status = act(browser, "button.act[data-path='/emulator/reset?topic=orders']", clicks=2)
        assert '"records_deleted":1' in status, status
        assert srv.http("/emulator/sow/orders")["count"] == 0
        assert clients(srv) == {"reset-pub-2"}
    finally:
        make.close()


# -- replication --------------------------------------------------------------------------
def destination(srv, name: str) -> dict:
    return srv.http(f"/emulator/replication/{name}")


def test_a_destination_is_downgraded_and_upgraded_from_the_console(pair, browser):
    a, _b = pair
    load(browser, a.admin_uri + "/")
    row = "tr[data-destination='B']"
    assert browser.text(row).split("\t")[:2] == ["B", "sync"]
    status = act(browser, row + " button.act[data-path$='/downgrade']")
    assert status.startswith("downgrade B: ") and '"done":true' in status, status
    assert destination(a, "B")["replication_type"] == "async"
    assert browser.text(row).split("\t")[:3] == ["B", "async", "sync"]
    assert browser.js("return document.querySelector('#replication line.link')"
                      ".dataset.state") == "async"
    status = act(browser, row + " button.act[data-path$='/upgrade']")
    assert '"done":true' in status, status
    assert until(lambda: destination(a, "B")["replication_type"] == "sync")
    assert browser.wait_js(f"return document.querySelector(\"{row}\").innerText"
                           ".split('\\t')[1] === 'sync'")
    assert browser.js("return [...document.querySelectorAll('#chart-lag path')]"
                      ".map(p => p.dataset.series)") == ["B"]


# -- permissions --------------------------------------------------------------------------
@pytest.fixture
def secured(tmp_path):
    srv = serve(tmp_path, secured_xml(tmp_path))
    yield srv
    srv.stop()


def test_a_read_only_user_sees_every_action_refused(secured, browser, tmp_path):
    """``viewer`` may read everything of the Admin interface and write nothing: the console
    shows each refusal as the server gave it, and nothing changes."""
    victim = store_client(with_user(secured.uri, "root", "pw"), "victim")
    try:
        victim.publish("test", json.dumps({"id": 1}))
        victim.publish_flush(5000)
        load(browser, with_user(secured.admin_uri, "viewer", "pw") + "/")
        assert "victim" in browser.text("#clients")
        for css, clicks, path in (
                ("#toolbar button.act[data-path='/emulator/reset']", 2, "/emulator/reset"),
                ("tr[data-client='victim'] button.act",
                 1, "/amps/administrator/clients/victim/disconnect"),
                ("button.act[data-path='/emulator/reset?topic=test']", 2, "/emulator/reset"),
                ("#f-add", 1, "/emulator/faults"),
                ("#snap-restore", 1, "/emulator/snapshot")):
            if css == "#snap-restore":  # an archive chosen in the file input
                archive = tmp_path / "state.tar.gz"
                archive.write_bytes(b"not looked at: refused on the request's head")
                browser.cmd("POST", f"/element/{browser.element('#snap-file')}/value",
                            {"text": str(archive)})
            status = act(browser, css, clicks)
            assert f"refused (403): user 'viewer' is not entitled to write {path}" in status, \
                (css, status)
            assert browser.js("return document.getElementById('action-status').className") \
                == "err"
        assert clients(secured) == {"victim"}
        assert secured.call(lambda: secured.server.sow_service.sow.topics[
            next(iter(secured.server.sow_service.sow.topics))].count()) == 1
    finally:
        victim.close()


def test_a_writer_acts_from_the_console_of_a_secured_server(secured, browser):
    victim = store_client(with_user(secured.uri, "root", "pw"), "victim")
    try:
        load(browser, with_user(secured.admin_uri, "root", "pw") + "/")
        status = act(browser, "tr[data-client='victim'] button.act")
        assert status.startswith("disconnect victim: "), status
        assert until(lambda: clients(secured) == set())
    finally:
        victim.close()


# -- the screenshot in the docs -----------------------------------------------------------
def test_the_screenshot_in_the_docs(pair, tmp_path, browser):
    """A fixed scene, a few seconds of traffic, then the picture (see the module docstring
    for when it is written)."""
    a, _b = pair
    make = clients_for(a.uri)
    connect = next(make)
    try:
        pub = store_client(a.uri, "order-entry")
        connect("risk-view").subscribe(lambda m: None, "orders", "/qty > 20")
        connect("worker-1").subscribe(lambda m: None, "work", options="max_backlog=2")
        connect("audit").subscribe(lambda m: None, "orders")
        load(browser, a.admin_uri + "/")
        browser.js("document.getElementById('window').value = '60'")
        start = time.monotonic()
        i = 0
        while time.monotonic() - start < 8:  # traffic paced over a few seconds: the charts
            for _ in range(20 + i % 7):
                pub.publish("orders", json.dumps({"id": i % 40, "sym": "ABCD"[i % 4],
                                                  "qty": i % 50}))
                i += 1
            pub.publish("work", json.dumps({"job": i}))
            pub.publish_flush(5000)
            time.sleep(0.25)  # the pace of the traffic, not a wait for readiness
        browser.type("#q-filter", "/qty > 40")
        browser.type("#q-orderby", "/qty DESC")
        browser.type("#q-top", "5")
        browser.click("#q-run")
        assert browser.wait_js("return document.body.dataset.queryDone === '1'")
        before = int(browser.js("return document.body.dataset.charts"))
        assert browser.wait_js(f"return Number(document.body.dataset.charts) > {before}")
        png = browser.full_page_screenshot()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        (tmp_path / "console.png").write_bytes(png)
        digest = sources_digest()
        current = png_text(PICTURE.read_bytes(), DIGEST_KEY) if PICTURE.exists() else None
        if current != digest or os.environ.get("AMPS_EMULATOR_SCREENSHOT") == "1":
            PICTURE.write_bytes(with_png_text(png, DIGEST_KEY, digest))
            assert os.environ.get("CI") != "true" or current == digest, (
                "docs/console.png was made from older console sources: run "
                "tests/integration/admin/test_console.py and commit the new picture")
    finally:
        make.close()
