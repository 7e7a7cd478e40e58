"""Every code block of the documentation (``docs/**/*.md`` and ``README.md``) is run, or marked
with the reason it is not.

The conventions (docs/contributing/testing.md says them for writers): an HTML comment on the
line before a fence, ``<!-- not-run: REASON -->`` or ``<!-- run: OPTIONS -->`` (``file=NAME``:
also write the block to NAME in the page's scratch directory; ``server=CONFIG``: an embedded
server with an Admin interface, CONFIG a repository path, a scratch file or ``default``;
``pytest``: run a python block with pytest). Per language: ``python`` runs, ``sh`` runs each
command line, ``console`` runs each ``$`` line and compares what it prints with the lines shown
(times, ports, keys and blanks aside), ``xml`` must load with :func:`amps_emulator.config.loads_config`,
``json``/``yaml``/``toml``/``ini`` must parse. The ports the docs show (9007, 8085, ...) stand
for free ports picked per page. The design notes in ``docs/design/`` are records of AMPS's
wire protocol and behaviour, whose blocks are frames rather than commands: they are not run.
"""

from __future__ import annotations

import configparser
import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest
import yaml

from amps_emulator.config import ConfigError, default_config, load_config, loads_config
from amps_emulator.embedded import EmbeddedServer
from tests.support.docblocks import Block, blocks_of, normalize
from tests.support.paths import ROOT

#: the ports the docs show, each standing for a free port of the page
PORTS = (9007, 9008, 9017, 8085, 8095, 10004, 10005)
PORT_RE = re.compile(r"(?<![\d.])(" + "|".join(map(str, PORTS)) + r")(?!\d)")
PARSED = {"json", "yaml", "toml", "ini"}
RUN = {"python", "sh", "console", "xml"}
#: commands of the docs, as shell functions on this checkout's code (not whatever is installed)
FUNCTIONS = (f'py() {{ "{sys.executable}" "$@"; }}; '
             'python3() { py "$@"; }; '
             'amps-emulator() { py -m amps_emulator.server "$@"; }; '
             'amps-emulator-client() { py -m amps_emulator.protocol.client_cli "$@"; }; '
             'amps-spark() { py -m amps_emulator.protocol.spark_cli "$@"; }; ')
#: options after which amps-emulator prints and exits (otherwise the line starts a server)
EXITS = {"--verify-config", "--sample-config", "--version", "--dump-config", "-h", "--help"}


def pages() -> list[Path]:
    docs = sorted(p for p in (ROOT / "docs").rglob("*.md") if "design" not in p.parts)
    return [ROOT / "README.md", *docs]


def free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in PORTS:
            return port


class Job:
    """A command running in the background of the page's shell."""

    def __init__(self, command: str, proc: subprocess.Popen[str], server: bool) -> None:
        self.command, self.proc, self.server = command, proc, server
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        if self.proc.stdout is None:
            self.ready.set()
            return
        for ln in self.proc.stdout:
            self.lines.append(ln.rstrip("\n"))
            if self.server and " 00-0015 " in ln:  # after the ready (and admin) lines
                self.ready.set()
        self.ready.set()

    def admin(self) -> str | None:
        return next((ln.split(" ", 1)[1] for ln in self.lines if ln.startswith("admin: ")), None)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)


class Page:
    """One page's scratch directory, ports, servers and background jobs."""

    def __init__(self, page: Path, scratch: Path) -> None:
        self.page, self.dir = page, scratch
        (scratch / "examples").symlink_to(ROOT / "examples")
        self.ports: dict[int, int] = {}
        self.embedded: EmbeddedServer | None = None
        self.embedded_config: str | None = None
        self.jobs: list[Job] = []
        self.foreground_server: Job | None = None

    # -- ports -------------------------------------------------------------------------
    def port(self, shown: int) -> int:
        if shown not in self.ports:
            self.ports[shown] = free_port()
        return self.ports[shown]

    def subst(self, text: str) -> str:
        return PORT_RE.sub(lambda m: str(self.port(int(m[1]))), text)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(ROOT),
                "AMPS_URI": f"tcp://127.0.0.1:{self.port(9007)}/amps/json"}

    # -- servers -----------------------------------------------------------------------
    def start_embedded(self, config: str) -> None:
        if self.embedded is not None and self.embedded_config == config:
            return
        self.stop_all()
        if config == "default":
            cfg = default_config(data_dir=self.dir / "amps-data")
        else:
            path = self.dir / config if (self.dir / config).exists() else ROOT / config
            cfg = load_config(path)
        # files (in the scratch directory, the working directory of the page's run), so that the
        # Admin's reset and snapshot work as on a server a reader starts
        self.embedded = EmbeddedServer(cfg, admin="127.0.0.1:0").start()
        self.embedded_config = config
        self.ports[9007] = self.embedded.port
        admin = self.embedded.server.admin.uri  # type: ignore[union-attr]
        self.ports[8085] = int(admin.rstrip("/").rsplit(":", 1)[1])

    def admins(self) -> list[str]:
        found = [job.admin() for job in self.jobs if job.proc.poll() is None]
        if self.embedded is not None:
            found.append(self.embedded.server.admin.uri)  # type: ignore[union-attr]
        return [a.rstrip("/") for a in found if a]

    def subscription_count(self) -> int:
        total = 0
        for admin in self.admins():
            with urllib.request.urlopen(admin + "/emulator/subscriptions", timeout=10) as r:
                body = json.loads(r.read())
            total += sum(len(subs) for subs in body["clients"].values())
        return total

    def stop_all(self) -> None:
        for job in self.jobs:
            job.stop()
        self.jobs.clear()
        self.foreground_server = None
        if self.embedded is not None:
            self.embedded.stop()
            self.embedded = None
            self.ports.pop(9007, None)
            self.ports.pop(8085, None)

    # -- commands ----------------------------------------------------------------------
    def is_server(self, command: str) -> bool:
        try:
            words = shlex.split(command, comments=True)
        except ValueError:  # a line of output, or part of a longer command
            return False
        return bool(words) and words[0] == "amps-emulator" and not EXITS & set(words)

    def background(self, command: str) -> Job:
        server = self.is_server(command)
        env = self.env
        configs = [w for w in shlex.split(command, comments=True)[1:] if w.endswith(".xml")]
        if server and (not configs or configs[0].startswith("examples/")):
            # the built-in config or a repository file: its first transport on the page's port
            env["AMPS_EMULATOR_LISTEN"] = f"127.0.0.1:{self.port(9007)}"
        subs = 0 if server else self.subscription_count()
        proc = subprocess.Popen(["bash", "-c", FUNCTIONS + ("exec " if server else "") + command],
                                cwd=self.dir, env=env, text=True, start_new_session=True,
                                stdout=subprocess.PIPE if server else None,
                                stderr=subprocess.PIPE if server else None)
        job = Job(command, proc, server)
        self.jobs.append(job)
        if server:
            assert job.ready.wait(30) and proc.poll() is None, \
                f"{command}: not ready; stderr: {proc.stderr.read() if proc.stderr else ''}"
        elif self.admins():
            deadline = time.monotonic() + 15
            while self.subscription_count() <= subs:  # a background subscriber: its subscription
                assert proc.poll() is None, f"{command}: ended (status {proc.returncode})"
                assert time.monotonic() < deadline, f"{command}: no subscription"
                time.sleep(0.02)
        return job

    def wait_for_writers(self, command: str) -> None:
        """Before a command that reads a file a background job writes, let that job finish."""
        for job in self.jobs:
            target = re.search(r">\s*(\S+)\s*$", job.command)
            if target and target[1] in command and not job.server:
                job.proc.wait(timeout=30)

    def run(self, command: str, where: str) -> list[str]:
        """One command line (its ports already the page's): what it printed (standard output
        and error)."""
        kill = re.fullmatch(r"kill %(\d+)", command.strip())
        if kill:
            self.jobs[int(kill[1]) - 1].stop()
            return []
        if command.rstrip().endswith("&"):
            self.background(command.rstrip()[:-1])
            return []
        if self.is_server(command):
            if self.foreground_server is not None:  # the previous one was stopped to type this
                self.foreground_server.stop()
            self.foreground_server = self.background(command)
            return list(self.foreground_server.lines)
        self.wait_for_writers(command)
        done = subprocess.run(["bash", "-c", FUNCTIONS + command], cwd=self.dir, env=self.env,
                              text=True, capture_output=True, timeout=60)
        assert done.returncode == 0, (f"{where}: {command}\nexit {done.returncode}\n"
                                      f"{done.stdout}\n{done.stderr}")
        return (done.stdout + done.stderr).splitlines()


# -- per language ------------------------------------------------------------------------------
def check_parsed(block: Block, text: str) -> None:
    if block.lang == "json":
        try:
            json.loads(text)
        except ValueError:  # JSON lines
            for ln in text.splitlines():
                if ln.strip() and not ln.lstrip().startswith("#"):
                    json.loads(ln)
    elif block.lang == "yaml":
        assert yaml.safe_load(text) is not None
    elif block.lang == "toml":
        tomllib.loads(text)
    elif block.lang == "ini":
        configparser.ConfigParser().read_string(text)


def check_xml(page: Page, block: Block, text: str) -> None:
    name = block.options.get("file", "block.xml")
    with contextlib.chdir(page.dir):  # paths in a config are the server's working directory's
        loads_config(text, filename=str(page.dir / name))


def run_python(page: Page, block: Block, text: str) -> None:
    if "pytest" in block.options:
        name = f"test_block_{block.line}.py"
        (page.dir / name).write_text(text)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   "--rootdir", str(page.dir), name]
    elif "file" in block.options:
        return  # a module a later block runs
    else:
        name = f"block_{block.line}.py"
        (page.dir / name).write_text(text)
        command = [sys.executable, name]
    done = subprocess.run(command, cwd=page.dir, env=page.env, text=True, capture_output=True,
                          timeout=60)
    assert done.returncode == 0, f"{block.where}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"


def command_lines(text: str) -> list[str]:
    """The command lines of an sh block: continuation lines joined, comments and blanks out."""
    out: list[str] = []
    pending = ""
    for ln in text.splitlines():
        if pending:
            pending += "\n" + ln
        elif ln.strip() and not ln.lstrip().startswith("#"):
            pending = ln
        else:
            continue
        if not ln.endswith("\\") and _balanced(pending):
            out.append(pending)
            pending = ""
    assert not pending, f"unfinished command: {pending}"
    return out


def _balanced(command: str) -> bool:
    try:
        shlex.split(command)
    except ValueError:
        return False
    return True


def run_sh(page: Page, block: Block, text: str) -> None:
    for command in command_lines(text):
        page.run(command, block.where)


def run_console(page: Page, block: Block, text: str) -> None:
    steps: list[tuple[str, list[str]]] = []
    for ln in text.splitlines():
        if ln.startswith("$ "):
            steps.append((ln[2:], []))
        else:
            assert steps, f"{block.where}: output before the first command"
            steps[-1][1].append(ln)
    for command, shown in steps:
        printed = page.run(command, block.where)
        if page.is_server(command):
            printed = printed[:len(shown)]
        assert [normalize(x) for x in printed] == [normalize(x) for x in shown], (
            f"{block.where}: {command}\nshown:\n" + "\n".join(shown) + "\nprinted:\n"
            + "\n".join(printed))


def run_block(page: Page, block: Block) -> None:
    if page.embedded is not None and block.lang in ("sh", "console") and any(
            page.is_server(c.removeprefix("$ ")) for c in block.text.splitlines()):
        page.stop_all()  # a server of the page's own takes the page's ports
    text = page.subst(block.text)
    if "server" in block.options:
        page.start_embedded(block.options["server"])
        text = page.subst(block.text)
    if "file" in block.options:
        target = page.dir / block.options["file"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    if block.lang in PARSED:
        check_parsed(block, text)
    elif block.lang == "xml":
        check_xml(page, block, text)
    elif block.lang == "python":
        run_python(page, block, text)
    elif block.lang == "sh":
        run_sh(page, block, text)
    elif block.lang == "console":
        run_console(page, block, text)


def run_page(path: Path, scratch: Path) -> None:
    page = Page(path, scratch)
    with contextlib.chdir(scratch):  # relative paths of the embedded servers' configs land here
        run_blocks(page, path)


def run_blocks(page: Page, path: Path) -> None:
    try:
        for block in blocks_of(path):
            if block.mark != "not-run":
                run_block(page, block)
    finally:
        page.stop_all()


# -- the tests ---------------------------------------------------------------------------------
def unaccounted(paths: list[Path]) -> list[str]:
    """The blocks of ``paths`` that are neither run nor marked with a reason."""
    found = []
    for path in paths:
        blocks = blocks_of(path)
        for block in blocks:
            if block.mark == "not-run":
                if not block.reason:
                    found.append(f"{block.where}: not-run without a reason")
            elif block.lang not in RUN | PARSED:
                found.append(f"{block.where}: a {block.lang or 'plain'} block, neither run nor "
                             "marked")
            elif block.options.get("file", "").endswith(".py") and not any(
                    block.options["file"] in b.text for b in blocks if b is not block):
                found.append(f"{block.where}: {block.options['file']} is never run")
    return found


def test_every_block_is_run_or_marked_with_a_reason():
    assert unaccounted(pages()) == []


def test_an_unmarked_block_is_reported(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```text\nready\n```\n\n<!-- not-run: -->\n```sh\nls\n```\n\n"
                    "<!-- not-run: shown only -->\n```java\nclass A {}\n```\n")
    assert [x.split(": ", 1)[1] for x in unaccounted([page])] == [
        "a text block, neither run nor marked", "not-run without a reason"]


def test_the_pages_have_blocks():
    counted = {p.relative_to(ROOT).as_posix(): len(blocks_of(p)) for p in pages()}
    assert counted["README.md"] >= 4 and counted["docs/getting-started/install.md"] >= 5
    assert sum(counted.values()) > 60


@pytest.mark.parametrize("path", [p for p in pages() if any(b.mark != "not-run"
                                                            for b in blocks_of(p))],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_blocks_of_the_page_run(path, tmp_path):
    run_page(path, tmp_path)


GOOD = {
    "python": "<!-- run: server=default -->\n```python\nimport AMPS\nc = AMPS.Client('x')\n"
              "c.connect('tcp://127.0.0.1:9007/amps/json')\nc.logon()\nc.close()\n```\n",
    "sh": "```sh\namps-emulator --sample-config > amps.xml\n"
          "amps-emulator --verify-config amps.xml\n```\n",
    "console": "```console\n$ amps-emulator --version\namps-emulator 0.1.0\n"
               "AMPS version announced: 5.3.4.0\n```\n",
    "xml": "```xml\n<AMPSConfig><Name>x</Name><Transports><Transport><Name>x</Name><Type>tcp</Type>"
           "<InetAddr>9007</InetAddr><Protocol>amps</Protocol></Transport></Transports>"
           "</AMPSConfig>\n```\n",
}
BROKEN = {
    "python": (GOOD["python"].replace("c.logon()", "c.logn()"), AssertionError),
    "sh": (GOOD["sh"].replace("--verify-config amps.xml", "--verify-config nothing.xml"),
           AssertionError),
    "console": (GOOD["console"].replace("5.3.4.0", "5.3.4.0\nsomething else"), AssertionError),
    "xml": (GOOD["xml"].replace("<Type>tcp</Type>", "<Type>tpc</Type>"), ConfigError),
}


@pytest.mark.parametrize("lang", sorted(GOOD))
def test_a_broken_snippet_fails(lang, tmp_path):
    """The runner passes a good snippet and fails the same snippet broken: one that raises, a
    command that fails, output that differs from what the page shows, an XML config that does
    not load."""
    page = tmp_path / "page.md"
    page.write_text(f"# {lang}\n\n{GOOD[lang]}")
    (tmp_path / "good").mkdir()
    run_page(page, tmp_path / "good")
    text, error = BROKEN[lang]
    page.write_text(f"# {lang}\n\n{text}")
    (tmp_path / "broken").mkdir()
    with pytest.raises(error):
        run_page(page, tmp_path / "broken")
