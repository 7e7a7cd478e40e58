"""Imports go one way.

``server/`` has no import cycle counting imports inside functions (they run too), and none
either once the imports under ``if TYPE_CHECKING:`` (annotations only) count as well: what a
lower module needs of a higher one is a Protocol in ``server/ports.py``, never a type-only
import of it. The same holds over the whole product, every package of ``amps_emulator`` at
module granularity. ``server.app``, the composition root, is imported by nothing in the package
but the operator rooms above it (the command line, admin, reset, console, stats, preflight)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "amps_emulator.server"
PRODUCT = ROOT / "amps_emulator"
#: the rooms above the composition root, which may use the whole Server on purpose
OPERATOR_ROOMS = {"__main__", "admin", "reset", "console", "stats", "preflight"}


def _type_checking_only(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imported(tree: ast.AST, *, type_only: bool) -> list[tuple[str, list[str], int]]:
    """(module, names, level) of every import in ``tree``; those under ``if TYPE_CHECKING:``
    only when ``type_only``."""
    found: list[tuple[str, list[str], int]] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if not type_only and _type_checking_only(child):
                assert isinstance(child, ast.If)
                stack.append(ast.Module(body=child.orelse, type_ignores=[]))  # that runs
                continue
            stack.append(child)
            if isinstance(child, ast.ImportFrom):
                found.append((child.module or "", [a.name for a in child.names], child.level))
            elif isinstance(child, ast.Import):
                found.extend((a.name, [], 0) for a in child.names)
    return found


def runtime_imports(directory: Path, package: str, *, type_only: bool = False
                    ) -> dict[str, set[str]]:
    """Module name -> the modules of the same package it imports when its code runs (and,
    with ``type_only``, also those it imports for annotations only)."""
    modules = {p.stem for p in directory.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for name in modules:
        targets: set[str] = set()
        tree = ast.parse((directory / f"{name}.py").read_text())
        for base, names, level in _imported(tree, type_only=type_only):
            if level:  # relative to this package
                base = package + ("." + base if base else "")
            if base == package:  # from package import a, b
                targets.update(names)
            elif base.startswith(package + "."):
                targets.add(base[len(package) + 1:].split(".")[0])
        graph[name] = (targets & modules) - {name}
    return graph


def product_imports(root: Path, *, type_only: bool) -> dict[str, set[str]]:
    """Every module of the product (``server.app``, ``protocol.filter.compiler``, a package's
    ``__init__`` as the package's own name) -> the product modules it imports."""
    top = root.name
    names: dict[Path, str] = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[path] = ".".join([top, *parts])
    modules = set(names.values())
    graph: dict[str, set[str]] = {}
    for path, name in names.items():
        package = name if path.stem == "__init__" else name.rpartition(".")[0]
        targets: set[str] = set()
        for base, imported, level in _imported(ast.parse(path.read_text()), type_only=type_only):
            if level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            if base not in modules:
                while base and base not in modules:  # import a.b.c.attr: the module a.b.c
                    base = base.rpartition(".")[0]
                if base:
                    targets.add(base)
                continue
            subs = [f"{base}.{n}" for n in imported if f"{base}.{n}" in modules]
            # from package import module: the module; from package import name: the package
            targets.update(subs)
            if len(subs) < len(imported) or not imported:
                targets.add(base)
        graph[name] = targets - {name}
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


def test_server_has_no_import_cycle_counting_type_only_imports():
    graph = runtime_imports(ROOT / "server", PACKAGE, type_only=True)
    assert "commands" in graph and graph["app"]
    cycle = find_cycle(graph)
    assert cycle is None, ("import cycle in server/ (type-only imports included): "
                           + " -> ".join(cycle))


def test_the_product_has_no_import_cycle_counting_type_only_imports():
    graph = product_imports(PRODUCT, type_only=True)
    assert "amps_emulator.server.app" in graph["amps_emulator.server.__main__"]
    assert "amps_emulator.sow" in graph  # packages count as their __init__
    cycle = find_cycle(graph)
    assert cycle is None, ("import cycle in amps_emulator (type-only imports included): "
                           + " -> ".join(cycle))


def test_only_the_operator_rooms_import_the_composition_root():
    graph = runtime_imports(ROOT / "server", PACKAGE, type_only=True)
    assert {m for m, deps in graph.items() if "app" in deps} <= OPERATOR_ROOMS
    assert "__main__" in {m for m, deps in graph.items() if "app" in deps}


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
    typed = runtime_imports(pkg, PACKAGE, type_only=True)
    assert typed == {"a": {"b", "c"}, "b": {"c"}, "c": {"a", "d"}, "d": {"a"}}
    typed["d"] = set()
    assert find_cycle(typed) == ["a", "b", "c", "a"]


def test_the_product_graph_resolves_packages_modules_and_relative_imports(tmp_path):
    root = tmp_path / "amps_emulator"
    (root / "p" / "q").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "p" / "__init__.py").write_text("from amps_emulator.p.m import X\n")
    (root / "p" / "m.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                     "    from .q import helper\nX = 1\n")
    (root / "p" / "q" / "__init__.py").write_text("from .. import m\n")
    (root / "p" / "q" / "helper.py").write_text("import amps_emulator.p.m.X\n")
    (root / "r.py").write_text("from amps_emulator.p import X, m\n")
    graph = product_imports(root, type_only=True)
    assert graph == {
        "amps_emulator": set(),
        "amps_emulator.p": {"amps_emulator.p.m"},
        "amps_emulator.p.m": {"amps_emulator.p.q.helper"},
        "amps_emulator.p.q": {"amps_emulator.p.m"},
        "amps_emulator.p.q.helper": {"amps_emulator.p.m"},
        "amps_emulator.r": {"amps_emulator.p", "amps_emulator.p.m"},
    }
    assert find_cycle(graph) == ["amps_emulator.p.m", "amps_emulator.p.q.helper",
                                 "amps_emulator.p.m"]
    assert find_cycle(product_imports(root, type_only=False)) is None
