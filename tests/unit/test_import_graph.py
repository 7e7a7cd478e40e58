"""``server/`` imports in one direction: no import cycle, counting imports inside functions
(they run too) and not counting those under ``if TYPE_CHECKING:`` (annotations only); and
``server.app``, the composition root, is imported by nothing in the package but the command
line."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "amps_emulator.server"


def _type_checking_only(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def runtime_imports(directory: Path, package: str) -> dict[str, set[str]]:
    """Module name -> the modules of the same package it imports when its code runs."""
    modules = {p.stem for p in directory.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for name in modules:
        targets: set[str] = set()
        stack: list[ast.AST] = [ast.parse((directory / f"{name}.py").read_text())]
        while stack:
            node = stack.pop()
            for child in ast.iter_child_nodes(node):
                if _type_checking_only(child):
                    stack.append(ast.Module(body=child.orelse, type_ignores=[]))  # that runs
                    continue
                stack.append(child)
                if isinstance(child, ast.ImportFrom):
                    base = child.module or ""
                    if child.level:  # relative to this package
                        base = package + ("." + base if base else "")
                    if base == package:  # from package import a, b
                        targets.update(a.name for a in child.names)
                    elif base.startswith(package + "."):
                        targets.add(base[len(package) + 1:].split(".")[0])
                elif isinstance(child, ast.Import):
                    for a in child.names:
                        if a.name.startswith(package + "."):
                            targets.add(a.name[len(package) + 1:].split(".")[0])
        graph[name] = (targets & modules) - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_server_has_no_import_cycle():
    graph = runtime_imports(ROOT / "server", PACKAGE)
    assert "commands" in graph and graph["app"]  # the graph was read
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in server/: " + " -> ".join(cycle)


def test_only_the_command_line_imports_the_composition_root():
    graph = runtime_imports(ROOT / "server", PACKAGE)
    # the command line, and --verify-config's dry start-up (it builds a Server without ports)
    assert {m for m, deps in graph.items() if "app" in deps} == {"__main__", "preflight"}


def test_the_graph_counts_function_local_and_relative_imports_but_not_type_checking(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from amps_emulator.server.c import C\n"
                              "def f():\n    from amps_emulator.server import b\n")
    (pkg / "b.py").write_text("from .c import x\n")
    (pkg / "c.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    from . import a\n"
                              "else:\n    import amps_emulator.server.d\n")
    (pkg / "d.py").write_text("class D:\n    def m(self):\n        from amps_emulator.server.a import f\n")
    graph = runtime_imports(pkg, PACKAGE)
    assert graph == {"a": {"b"}, "b": {"c"}, "c": {"d"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "d", "a"]
    graph["d"] = set()
    assert find_cycle(graph) is None
