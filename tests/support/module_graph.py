"""Reading the import graph of the tree statically: module names from paths, and what an
import statement names, with relative imports resolved. Used by the layer and cycle tests."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator
from pathlib import Path

from tests.support.processes import PACKAGES


def parsed(path: Path) -> ast.Module:
    """The syntax tree of the file at ``path``, parsed once per process while it is unchanged:
    several checks read the whole tree."""
    stat = path.stat()
    return _parsed(path, stat.st_mtime_ns, stat.st_size)


@functools.cache
def _parsed(path: Path, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


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


def plant(root: Path, files: dict[str, str]) -> Path:
    """A tree for a checker to read: ``files`` (path -> text) under ``root``, and every top-level
    package of the product, empty where ``files`` puts nothing."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for top in PACKAGES:
        (root / top).mkdir(exist_ok=True)
    return root
