"""The official JavaScript client (npm ``amps``, pinned in ``tests/js``; ``npm ci`` there)
under Node: ``run_js(scenario, srv)`` runs one scenario of ``tests/js/scenarios.js`` against a
server and returns what the client observed. Call ``require_js_client()`` first: it skips the
test where Node or the client is missing (and fails it in CI)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading

import pytest

from tests.support.paths import JS_DIR

NODE = shutil.which("node")


def require_js_client() -> None:
    missing = None
    if NODE is None:
        missing = "node is not on PATH"
    elif not (JS_DIR / "node_modules" / "amps").is_dir():
        missing = f"the npm amps client is not installed: run `npm ci` in {JS_DIR}"
    if missing is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"JavaScript client tests cannot run in CI: {missing}")
    pytest.skip(missing)


def _drop_all(srv) -> None:
    srv.call(lambda: [c.close("dropped by the test") for c in list(srv.server.connections)])


def run_js(scenario: str, srv, *, env: dict[str, str] | None = None,
           timeout_ms: int = 20000, uri: str | None = None) -> dict:
    """Run one scenario against ``srv`` (at ``uri``, if given); answer its ``ACTION``
    requests; return its result."""
    proc = subprocess.Popen(
        [NODE, str(JS_DIR / "scenarios.js"), scenario, uri or srv.uri], cwd=JS_DIR,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "SCENARIO_TIMEOUT_MS": str(timeout_ms), **(env or {})})
    killer = threading.Timer(timeout_ms / 1000 + 15, proc.kill)
    killer.start()
    try:
        result = None
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.startswith("ACTION "):
                what = line.split()[1]
                assert what == "drop", what
                _drop_all(srv)
                proc.stdin.write("done\n")  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]
            elif line.strip():
                result = json.loads(line)
        proc.wait()
        stderr = proc.stderr.read()  # type: ignore[union-attr]
    finally:
        killer.cancel()
        proc.kill()
        for f in (proc.stdin, proc.stdout, proc.stderr):
            f.close()  # type: ignore[union-attr]
    assert result is not None, f"{scenario}: no result (exit {proc.returncode}): {stderr[-2000:]}"
    assert "error" not in result, f"{scenario}: {result['error']}\n{stderr[-2000:]}"
    assert result.pop("errors") == [], result
    return result
