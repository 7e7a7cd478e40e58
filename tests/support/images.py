"""The container image, for the tests that build and run it (opt-in: they take minutes on a
cold cache): which engine, the build, a container started from the image, and the wait for
its health check.

``AMPS_EMULATOR_IMAGE_TESTS=1`` turns them on (``.ci/image test`` sets it);
``AMPS_EMULATOR_IMAGE_BUILD_ARGS`` and ``AMPS_EMULATOR_IMAGE_RUN_ARGS`` add engine options
where the host needs them. The build is the docs' (docs/getting-started/containers.md):
``--format docker`` under podman, which keeps the ``HEALTHCHECK``, and the host's CA bundle as
the build secret ``ca-certificates``, which pip in the build trusts (behind a TLS-inspecting
proxy it holds the proxy's CA). With the layer cache warm (``.ci/image build`` ran) the build
takes seconds.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.servers import until

#: the tag the tests build and run (``.ci/image build`` builds the same)
TAG = "localhost/amps-emulator:test"
#: the host's CA bundle (Debian's), the build secret when it is there
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def engine() -> str | None:
    """podman (preferred) or docker, whichever is on the path."""
    for name in ("podman", "docker"):
        if shutil.which(name):
            return name
    return None


def enabled() -> bool:
    return os.environ.get("AMPS_EMULATOR_IMAGE_TESTS") == "1" and engine() is not None


#: skips a test that builds or runs the image unless asked to and an engine is there
needs_image = pytest.mark.skipif(
    not enabled(), reason="builds an image: set AMPS_EMULATOR_IMAGE_TESTS=1 (needs podman or docker)")


def build_command(eng: str, tag: str = TAG) -> list[str]:
    cmd = [eng, "build"]
    if eng == "podman":
        cmd += ["--format", "docker"]  # OCI images drop HEALTHCHECK
    if CA_BUNDLE.is_file():
        cmd += ["--secret", f"id=ca-certificates,src={CA_BUNDLE}"]
    return [*cmd, *shlex.split(os.environ.get("AMPS_EMULATOR_IMAGE_BUILD_ARGS", "")),
            "-t", tag, str(ROOT)]


def build(tag: str = TAG) -> str:
    """Build the image from this checkout (once per test process); its tag."""
    if tag not in _built:
        eng = engine()
        assert eng is not None
        done = subprocess.run(build_command(eng, tag), capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, f"the image build failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        _built.add(tag)
    return tag


_built: set[str] = set()


def run(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``ENGINE args...``: its output as text; a failure (with ``check``) fails the test with it."""
    eng = engine()
    assert eng is not None
    done = subprocess.run([eng, *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert done.returncode == 0, f"{eng} {shlex.join(args)}: exit {done.returncode}\n{done.stderr}"
    return done


def start(name: str, *args: str, image: str = TAG) -> None:
    """A detached container ``name`` of ``image``; ``args``: engine options, then ``--`` and
    the image's arguments."""
    opts, _, cmd = list(args), None, []
    if "--" in opts:
        i = opts.index("--")
        opts, cmd = opts[:i], opts[i + 1:]
    run("run", *shlex.split(os.environ.get("AMPS_EMULATOR_IMAGE_RUN_ARGS", "")), "-d", "--name", name,
        *opts, image, *cmd)


def health(name: str) -> str:
    """The container's health status as the engine keeps it (``starting``, ``healthy``, ...)."""
    return run("inspect", "-f", "{{.State.Health.Status}}", name).stdout.strip()


def wait_healthy(name: str, timeout: float = 90) -> None:
    """Until the container's health check passes. Under podman the check is run here
    (``podman healthcheck run``, as the docs tell a user to): podman schedules health checks
    with systemd timers, and without systemd (a CI runner, a container) it never runs one by
    itself, so the container would stay ``starting``. Docker runs its own."""
    if engine() == "podman":
        def passed() -> bool:
            return run("healthcheck", "run", name, check=False).returncode == 0
    else:
        def passed() -> bool:
            return health(name) == "healthy"
    assert until(passed, timeout=timeout), (f"{name}: not healthy after {timeout} s ({health(name)})\n"
                                            f"{run('logs', name, check=False).stdout}")


def first_line(name: str, timeout: float = 60) -> str:
    """The first line the container prints (its ready line), or "" when it exited first."""
    eng = engine()
    assert eng is not None
    follow = subprocess.Popen([eng, "logs", "-f", name], stdout=subprocess.PIPE, text=True)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(follow.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout)
    follow.kill()
    follow.wait(timeout=30)
    return got[0] if got else ""


def remove(*names: str) -> None:
    for name in names:
        run("rm", "-f", "-v", name, check=False)  # -v: with its anonymous volume (/data)
