"""``pip install .`` as a user does it: a wheel (not editable) into a fresh virtual environment.

Only ``amps_emulator`` (with its dist-info and console script) lands at top level, and the
installed emulator runs next to an application that has its own ``config.py``, ``server/``
and ``protocol.py`` (the names the parts had before they became subpackages).

The wheel is built without build isolation from a copy of the source tree (no network, no
``build/`` left in the checkout); the fresh environment gets no dependencies of its own but
sees this interpreter's site-packages through a ``.pth`` line (its ``.pth`` files, e.g. an
editable install of this checkout, are not processed there). Run alone: ``pytest -m install``.
"""

from __future__ import annotations

import csv
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.support.paths import ROOT

PARTS = ("server", "protocol", "journal", "sow", "queues", "config", "pipeline")

pytestmark = pytest.mark.install


def _run(*args: str, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run(args, capture_output=True, text=True, timeout=180, **kw)
    assert res.returncode == 0, f"{args}: {res.stdout[-2000:]}{res.stderr[-2000:]}"
    return res


def _install(base: Path, build_env: dict[str, str] | None = None) -> Path:
    """A fresh venv under ``base`` with this checkout's wheel (built with ``build_env`` added to
    the environment) installed; returns the venv directory."""
    src = base / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "hatch_build.py"):
        shutil.copy2(ROOT / name, src / name)
    # (and not an extension built in place: the wheel's build compiles its own)
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.so")
    # the package only: the top-level part names are symlinks into it, and no part of the wheel
    shutil.copytree(ROOT / "amps_emulator", src / "amps_emulator", ignore=skip)
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "-w", str(base / "dist"), str(src), env={**os.environ, **(build_env or {})})
    wheel = next((base / "dist").glob("amps_emulator-*.whl"))
    env_dir = base / "venv"
    venv.create(env_dir, with_pip=False)
    py = env_dir / "bin" / "python"
    _run(sys.executable, "-m", "pip", "--python", str(py), "install", "--quiet", "--no-deps",
         str(wheel))
    purelib = Path(_run(str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
                   .stdout.strip())
    ours = [p for p in site.getsitepackages() + [site.getusersitepackages()] if os.path.isdir(p)]
    (purelib / "zz_test_dependencies.pth").write_text("\n".join(ours) + "\n")
    return env_dir


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with this checkout's wheel installed; returns the venv directory."""
    return _install(tmp_path_factory.mktemp("install"))


def _site_packages(env_dir: Path) -> Path:
    return next(env_dir.glob("lib/python*/site-packages"))


def test_only_amps_emulator_is_installed_at_top_level(installed):
    sp = _site_packages(installed)
    tops = {p.name for p in sp.iterdir()} - {"zz_test_dependencies.pth"}
    dist_info = {n for n in tops if n.endswith(".dist-info")}
    assert dist_info == {"amps_emulator-0.1.0.dist-info"}
    assert tops == {"amps_emulator"} | dist_info
    with open(sp / "amps_emulator-0.1.0.dist-info" / "RECORD", newline="") as f:
        paths = [row[0] for row in csv.reader(f)]
    outside = {p.split("/")[0] for p in paths} - tops
    assert outside == {".."}, outside  # the console scripts, ../../../bin/amps-*
    assert {p for p in paths if p.startswith("..")} == {
        "../../../bin/amps-emulator", "../../../bin/amps-emulator-client", "../../../bin/amps-pipeline",
        "../../../bin/amps-spark"}
    for part in PARTS:
        assert (sp / "amps_emulator" / part / "__init__.py").is_file()
    assert (sp / "amps_emulator" / "protocol" / "filter" / "grammar.lark").is_file()
    assert (sp / "amps_emulator" / "config" / "sample.xml").is_file()
    entry_points = (sp / "amps_emulator-0.1.0.dist-info" / "entry_points.txt").read_text()
    assert "[pytest11]\namps_emulator = amps_emulator.pytest_plugin" in entry_points


def _user_project(tmp_path: Path) -> Path:
    """An application directory whose own modules have the names our parts have."""
    app = tmp_path / "app"
    (app / "server").mkdir(parents=True)
    boom = "raise SystemExit('the application module {} was imported by amps-emulator')\n"
    (app / "config.py").write_text(boom.format("config.py"))
    (app / "server" / "__init__.py").write_text(boom.format("server/"))
    (app / "protocol.py").write_text(boom.format("protocol.py"))
    return app


def test_installed_cli_runs_next_to_a_users_config_py(installed, tmp_path):
    app = _user_project(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("AMPS_EMULATOR_")}
    out = _run(str(installed / "bin" / "amps-emulator"), "--sample-config", cwd=app, env=env).stdout
    assert "<AMPSConfig>" in out
    (app / "amps.xml").write_text(out)
    # ``python -m`` puts the current directory first on sys.path: the case that used to break
    _run(str(installed / "bin" / "python"), "-m", "amps_emulator.server", "--verify-config",
         "amps.xml", cwd=app, env=env)
    where = _run(str(installed / "bin" / "python"), "-c",
                 "import amps_emulator.server as s; print(s.__file__)", cwd=app, env=env).stdout
    assert Path(where.strip()).is_relative_to(installed)


def test_installed_server_serves_a_filtered_subscription(installed, tmp_path):
    import AMPS

    app = _user_project(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("AMPS_EMULATOR_")}
    proc = subprocess.Popen(
        [str(installed / "bin" / "amps-emulator"), "--listen", "127.0.0.1:0",
         "--data-dir", str(tmp_path / "data"), "--log-level", "WARNING"],
        cwd=app, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("ready: "), proc.stderr.read()
        c = AMPS.Client("install-probe")
        c.connect(line.split()[1])
        c.logon(5000)
        got = []
        c.subscribe(lambda m: got.append(m.get_data()), "orders", "/qty > 10")
        c.publish("orders", '{"qty": 5}')
        c.publish("orders", '{"qty": 50}')
        c.flush(5000)  # the server answers the flush after delivering what came before it
        c.close()
        assert got == ['{"qty": 50}']
        # spark's command line works from the plain install (our own client, no AMPS package)
        hostport = line.split()[1].split("//", 1)[1].split("/", 1)[0]
        ping = _run(str(installed / "bin" / "amps-spark"), "ping", "-server", hostport,
                    "-type", "json", cwd=app, env=env).stdout
        assert ping.startswith("Successfully connected to tcp://") and ping.rstrip().endswith(
            f"@{hostport}/amps/json")
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


def _hot_path(env_dir: Path, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("AMPS_EMULATOR_")}
    return _run(str(env_dir / "bin" / "python"), "-c",
                "from amps_emulator import accel; print(accel.DESCRIPTION)",
                cwd=env_dir, env={**clean, **env}).stdout.strip()


def _has_compiler() -> bool:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc) is not None and \
        os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h"))


def test_the_wheel_carries_the_compiled_hot_path_when_a_compiler_is_there(installed):
    if not _has_compiler():
        pytest.skip("no C compiler or Python headers: the wheel is the pure one")
    assert list((_site_packages(installed) / "amps_emulator").glob("_speedups*.so"))
    assert _hot_path(installed) == "compiled (amps_emulator._speedups)"
    assert _hot_path(installed, AMPS_EMULATOR_PURE="1").startswith("pure Python (AMPS_EMULATOR_PURE")


def test_without_a_compiler_the_wheel_is_pure_python_and_serves(tmp_path):
    """``pip install .`` on a machine with only Python (CC=false: no compiler that works)."""
    env_dir = _install(tmp_path, {"CC": "false"})
    wheel = next((tmp_path / "dist").glob("amps_emulator-*.whl"))
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    assert not list((_site_packages(env_dir) / "amps_emulator").glob("_speedups*.so"))
    assert _hot_path(env_dir).startswith("pure Python (the compiled extension is not available")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("AMPS_EMULATOR_")}
    proc = subprocess.Popen(
        [str(env_dir / "bin" / "amps-emulator"), "--listen", "127.0.0.1:0",
         "--data-dir", str(tmp_path / "data")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("ready: "), proc.stderr.read()
        import AMPS

        c = AMPS.Client("pure-install-probe")
        c.connect(line.split()[1])
        c.logon(5000)
        got = []
        c.subscribe(lambda m: got.append(m.get_data()), "orders")
        c.publish("orders", '{"qty": 5}')
        c.flush(5000)
        c.close()
        assert got == ['{"qty": 5}']
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
    assert "publish hot path: pure Python" in proc.stderr.read()
