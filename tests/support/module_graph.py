"""Reading the import graph of the tree statically: module names from paths, and what an
import statement names, with relative imports resolved. Used by the layer and cycle tests."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_in(root: Path, path: Path, nodes: Iterable[ast.AST]) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(module, names) for each import statement among ``nodes`` of the module at ``path``: the
    module named after ``import`` or ``from`` (a relative one resolved), and what ``from module
    import ...`` takes (``()`` for a plain import)."""
    package = module_name(root, path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield module, tuple(alias.name for alias in node.names)
