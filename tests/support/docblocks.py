"""The fenced code blocks of a Markdown page, with the marker comment on the line before each
(``<!-- not-run: REASON -->`` or ``<!-- run: OPTIONS -->``), and how a line of output shown in a
``console`` block is compared with what a command printed. Read by the test that runs the
documentation's blocks (tests/integration/docs/test_docs_examples.py, where the conventions are
described) and by the one that runs the podman recipe
(tests/integration/containers/test_podman_recipe.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.paths import ROOT

FENCE = re.compile(r"^(`{3,})\s*([\w-]*)\s*$")
MARK = re.compile(r"^<!--\s*(not-run|run):\s*(.*?)\s*-->$")


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    text: str
    mark: str | None = None  # "run" or "not-run"
    options: dict[str, str] = field(default_factory=dict)
    reason: str = ""

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, with the marker on the line before each."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == m[1]), None)
        assert end is not None, f"{page}:{i + 1}: unclosed fence"
        block = Block(page, i + 1, m[2], "\n".join(lines[i + 1:end]) + "\n")
        mark = MARK.match(lines[i - 1].strip()) if i else None
        if mark:
            block.mark = mark[1]
            if mark[1] == "not-run":
                block.reason = mark[2]
            else:
                for word in mark[2].split():
                    key, _, value = word.partition("=")
                    block.options[key] = value
        found.append(block)
        i = end + 1
    return found


def normalize(line: str) -> str:
    """A line of output as compared: what differs from run to run (decimal numbers such as
    times, rates, numbers of three digits or more such as ports, keys and publisher ids) and
    runs of blanks aside; small counts are compared as they are."""
    line = re.sub(r"\d+\.\d+|\d+/s\b|\d{3,}", "N", line)
    return re.sub(r"\s+", " ", line).strip()
