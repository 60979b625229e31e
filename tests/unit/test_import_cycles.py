"""No import cycles: the modules of a package import each other in one direction only, read
statically from every module's module-level imports.

A module-level import is one that runs, or that a type checker follows, when the module is
loaded: anywhere outside a function body, so an ``if TYPE_CHECKING:`` import counts. An import
inside a function is left out: it runs later, when every module is loaded. The layers
(tests/unit/test_layers.py) already keep packages from importing each other both ways, so
every cycle found lies inside one package.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support.module_graph import imports_in, module_name, parsed, plant
from tests.support.processes import PACKAGES, ROOT

CHECKED = PACKAGES


def _module_level(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                yield from _module_level(getattr(node, field, []))


def imported_modules(root: Path, path: Path, modules: frozenset[str]) -> set[str]:
    """The modules of ``modules`` that ``path`` imports at module level (``from package import
    name`` imports the module ``package.name`` when there is one, else the package)."""
    found = set()
    for source, names in imports_in(root, path, _module_level(parsed(path).body)):
        if not names:
            found.add(source)
        for name in names:
            found.add(f"{source}.{name}" if f"{source}.{name}" in modules else source)
    return found & modules


def import_graph(root: Path) -> dict[str, set[str]]:
    paths = {module_name(root, p): p for top in CHECKED for p in sorted((root / top).rglob("*.py"))}
    modules = frozenset(paths)
    return {name: imported_modules(root, path, modules) - {name} for name, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Every set of modules that import each other, round (strongly connected components with
    more than one module, by Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[str, ...]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.get(module, ())):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(tuple(sorted(component)))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def test_no_package_imports_itself_round():
    found = cycles(import_graph(ROOT))
    assert not found, "modules that import each other, round:\n" + "\n".join(" ⇄ ".join(c) for c in found)


# --- the checker itself, on a planted tree -----------------------------------------------------


def test_a_planted_cycle_is_found_however_it_is_spelled(tmp_path):
    files = {
        "services/a/__init__.py": "",
        "services/a/app.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .process import P\n",
        "services/a/process.py": "from services.a import rules\n",
        "services/a/rules.py": "import services.a.app\n",
        "shared/x.py": "try:\n    from shared import y\nexcept ImportError:\n    pass\n",
        "shared/y.py": "class Y:\n    from shared.x import f\n",
    }
    assert cycles(import_graph(plant(tmp_path, files))) == [
        ("services.a.app", "services.a.process", "services.a.rules"),
        ("shared.x", "shared.y"),
    ]


def test_an_import_inside_a_function_and_one_way_imports_are_no_cycle(tmp_path):
    files = {
        "services/a/__init__.py": "from services.a.app import run\n",
        "services/a/app.py": "from . import rules\n\ndef run():\n    from services.a import process\n",
        "services/a/process.py": "from services.a.app import run\n",
        "services/a/rules.py": "import os\n",
    }
    assert cycles(import_graph(plant(tmp_path, files))) == []
