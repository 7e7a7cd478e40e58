"""The podman recipe of docs/getting-started/containers.md ("Podman, step by step"), run as the
page gives it: its blocks in order, the ones marked ``the podman recipe`` (``in the
repository``: from the repository's root, the others in a directory of their own) and the
files it writes (``file=NAME``). ``sh`` blocks must exit 0; each ``$`` line of a ``console``
block must print what the page shows under it (times, rates, keys aside, as the docs' own test
compares them; podman's own log lines aside, such as its complaint about a missing systemd).
The one change: the host port of ``-p 9007:9007``, a free port here.

Opt-in with the other image tests (``AMPS_EMULATOR_IMAGE_TESTS=1``; needs podman and
podman-compose). The recipe names its container ``amps`` and its volume ``amps-data``: the test
skips where either exists already rather than take them over.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.support import images
from tests.support.docblocks import Block, blocks_of, normalize
from tests.support.paths import ROOT
from tests.support.procserver import free_port

PAGE = ROOT / "docs" / "getting-started" / "containers.md"
SECTION = "## Podman, step by step"
MARK = "the podman recipe"
#: podman's own log lines on standard error (where it has no systemd: "unable to get systemd
#: connection to add healthchecks", at every start and stop)
PODMAN_LOG = re.compile(r'^time="[^"]*" level=\w+ msg=')


def recipe() -> list[Block]:
    """The section's blocks that make up the recipe, in page order."""
    lines = PAGE.read_text().splitlines()
    first = lines.index(SECTION) + 1
    last = next((i for i in range(first, len(lines)) if lines[i].startswith("## ")), len(lines))
    return [b for b in blocks_of(PAGE) if first <= b.line <= last
            and (b.reason.startswith(MARK) or "file" in b.options)]


def test_the_recipe_has_every_step():
    """What the recipe must show, so that a marker lost in an edit cannot drop a step unseen."""
    text = "".join(b.text for b in recipe())
    for step in ("examples/podman/base-image.sh", "podman build --format docker --secret",
                 "podman run -d --name amps", "until podman healthcheck run amps",
                 "podman stop amps", "podman start amps", "podman-compose up -d",
                 "podman-compose down --volumes", "image: localhost/amps-emulator"):
        assert step in text, step


def _exists(kind: str, name: str) -> bool:
    return images.run(kind, "exists", name, check=False).returncode == 0


@pytest.mark.container
@pytest.mark.skipif(not images.enabled() or images.engine() != "podman"
                    or shutil.which("podman-compose") is None,
                    reason="runs podman: set AMPS_EMULATOR_IMAGE_TESTS=1 (needs podman and podman-compose)")
def test_the_podman_recipe_runs_as_the_docs_give_it(tmp_path):
    if _exists("container", "amps") or _exists("volume", "amps-data"):
        pytest.skip("a container named amps or a volume amps-data exists here: the recipe would take it")
    port = str(free_port())
    try:
        for block in recipe():
            text = block.text.replace("9007:9007", f"{port}:9007")
            if "file" in block.options:
                (tmp_path / block.options["file"]).write_text(text)
            elif block.lang == "sh":
                cwd = ROOT if "in the repository" in block.reason else tmp_path
                done = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=cwd,
                                      capture_output=True, text=True, timeout=900)
                assert done.returncode == 0, f"{block.where}: exit {done.returncode}\n{done.stderr}"
            else:
                assert block.lang == "console", block.where
                _run_console(block, text, tmp_path)
    finally:
        if (tmp_path / "compose.yaml").exists():
            subprocess.run(["podman-compose", "down", "--volumes"], cwd=tmp_path, capture_output=True,
                           timeout=120)
        images.remove("amps")
        images.run("volume", "rm", "-f", "amps-data", check=False)


def _run_console(block: Block, text: str, cwd) -> None:
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    for command, shown in steps:
        done = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, f"{block.where}: {command}: exit {done.returncode}\n{done.stderr}"
        printed = done.stdout.splitlines() + [x for x in done.stderr.splitlines() if not PODMAN_LOG.match(x)]
        assert [normalize(x) for x in printed] == [normalize(x) for x in shown], (
            f"{block.where}: {command}\nshown:\n" + "\n".join(shown) + "\nprinted:\n" + "\n".join(printed))
