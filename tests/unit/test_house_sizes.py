"""The limits that keep the package readable: no folder of more than 20 modules, no module of
more than 700 lines, no function of more than 100. (Which package may import which is
``lint-imports``' job: the layer contract in ``pyproject.toml``.)"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

from tests.support.paths import ROOT

PACKAGE = ROOT / "amps_emulator"
MAX_MODULES, MAX_MODULE_LINES, MAX_FUNCTION_LINES = 20, 700, 100


def modules(root: Path = PACKAGE) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def too_big(root: Path) -> list[str]:
    """Every folder, module and function of ``root`` over its limit, as ``path: what``."""
    found = []
    per_folder = Counter(p.parent for p in modules(root))
    found += [f"{d.relative_to(root)}/: {n} modules" for d, n in per_folder.items() if n > MAX_MODULES]
    for path in modules(root):
        text = path.read_text()
        name = path.relative_to(root)
        if (lines := len(text.splitlines())) > MAX_MODULE_LINES:
            found.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{name}:{node.lineno} {node.name}(): {length} lines")
    return found


def test_no_folder_module_or_function_of_the_package_is_over_its_limit():
    assert too_big(PACKAGE) == []


@pytest.mark.parametrize("make, what", [
    (lambda d: [(d / f"m{i}.py").write_text("") for i in range(MAX_MODULES + 1)], "21 modules"),
    (lambda d: (d / "big.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1)), "big.py: 701 lines"),
    (lambda d: (d / "f.py").write_text("def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES),
     "f.py:1 f(): 101 lines"),
])
def test_each_limit_is_seen(tmp_path, make, what):
    make(tmp_path)
    assert any(what in line for line in too_big(tmp_path))
