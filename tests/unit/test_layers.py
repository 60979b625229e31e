"""The dependency graph between packages, read statically from every module's imports.

The layers, bottom up (an arrow is "may import"):

    hermes_cli ──► services.<name> ──► nous ──► shared
        └──────────────────────────────┴────────┘

- ``shared`` imports nothing of this project but itself.
- ``nous`` (the Nous account domain, used by both workers) imports only ``shared``.
- A service imports ``shared``, ``nous`` and itself; never another service, never the CLI.
- The CLI imports anything below it, but only through a package's public face.
- The operator plugin's payload (``runtime-packages/hermes/operator/pohunek``), loaded by Hermes
  from its own directory, imports only ``shared`` and itself.

Every service package, and any other package whose ``__init__`` defines ``__all__``, has a public face: from outside the package
only the package itself and the names in its ``__all__`` may be imported; its modules are
private. Tests and benchmarks may read any module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.processes import ROOT

CHECKED = ("shared", "nous", "services", "hermes_cli")
OURS = frozenset(CHECKED)
PLUGIN_ROOT = Path("runtime-packages/hermes/operator")  # holds the payload package ``pohunek``
PLUGIN = "pohunek"


@dataclass(frozen=True, order=True)
class Violation:
    importer: str
    imported: str
    rule: str

    def __str__(self) -> str:
        return f"{self.importer} imports {self.imported}: {self.rule}"


@dataclass(frozen=True)
class Import:
    module: str  # the module named after ``import`` or ``from``, resolved when relative
    names: tuple[str, ...]  # what ``from module import ...`` takes; () for a plain import


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(root: Path, path: Path) -> Iterator[Import]:
    """Every import in the module, at any depth (a lazy import inside a function counts too)."""
    package = module_name(root, path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, ())
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield Import(module, tuple(alias.name for alias in node.names))


def layer(module: str) -> str:
    """``shared``, ``nous``, ``hermes_cli``, or the service package (``services.<name>``)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "services" else parts[0]


def allowed_layers(importer: str) -> set[str] | None:
    """The layers ``importer``'s layer may import; None: every layer."""
    own = layer(importer)
    if own == PLUGIN:
        return {PLUGIN, "shared"}
    if own == "shared":
        return {"shared"}
    if own == "nous":
        return {"nous", "shared"}
    if own.startswith("services."):
        return {own, "nous", "shared"}
    return None


def faces(root: Path) -> dict[str, frozenset[str]]:
    """Package -> the names of its public face: every package whose ``__init__`` has ``__all__``,
    and every service package (one without ``__all__`` shows nothing)."""
    found = {module_name(root, init): frozenset() for init in sorted(root.glob("services/*/__init__.py"))}
    for init in sorted(root.glob("**/__init__.py")):
        if init.relative_to(root).parts[0] not in OURS:
            continue
        for node in ast.parse(init.read_text()).body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
                found[module_name(root, init)] = frozenset(ast.literal_eval(node.value))
    return found


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def face_violation(importer: str, target: Import, public: dict[str, frozenset[str]]) -> str | None:
    """Why ``target`` reaches past a public face, or None."""
    for package, names in public.items():
        if _inside(importer, package):
            continue  # a package's own modules may import each other
        if target.module != package and _inside(target.module, package):
            return f"{target.module} is private to {package}: import what {package}.__all__ names"
        if target.module == package:
            hidden = [n for n in target.names if n not in names]
            if hidden:
                return f"{', '.join(hidden)} is not in {package}.__all__"
    return None


def violations(root: Path) -> list[Violation]:
    public = faces(root)
    found = set()
    trees = [(root, root / top) for top in CHECKED] + [(root / PLUGIN_ROOT, root / PLUGIN_ROOT / PLUGIN)]
    for base, tree in trees:
        for path in sorted(tree.rglob("*.py")):
            importer = module_name(base, path)
            allowed = allowed_layers(importer)
            for target in imports_of(base, path):
                if target.module.split(".")[0] not in OURS | {PLUGIN}:
                    continue
                imported = target.module
                if allowed is not None and layer(imported) not in allowed:
                    found.add(Violation(importer, imported, f"{layer(importer)} may import only {sorted(allowed)}"))
                elif why := face_violation(importer, target, public):
                    found.add(Violation(importer, imported, why))
    return sorted(found)


def test_the_tree_keeps_its_layers():
    found = violations(ROOT)
    assert not found, "\n".join(map(str, found))


# --- the checker itself, on a planted tree -----------------------------------------------------


def plant(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for top in CHECKED:
        (root / top).mkdir(exist_ok=True)
    return root


@pytest.mark.parametrize(
    "files, expected",
    [
        ({"shared/a.py": "from hermes_cli import parser\n"}, ("shared.a", "hermes_cli")),
        (
            {f"{PLUGIN_ROOT}/pohunek/tools.py": "from services.operator_sim import app\n"},
            ("pohunek.tools", "services.operator_sim"),
        ),
        ({"shared/a.py": "def f():\n    import services.gateway.ops\n"}, ("shared.a", "services.gateway.ops")),
        ({"nous/a.py": "from services.updater import plan\n"}, ("nous.a", "services.updater")),
        ({"services/a/x.py": "from services.b.y import z\n"}, ("services.a.x", "services.b.y")),
        ({"services/a/x.py": "from hermes_cli.output import table\n"}, ("services.a.x", "hermes_cli.output")),
        (
            {"services/a/__init__.py": "__all__ = ['run']\n", "hermes_cli/c.py": "from services.a.impl import run\n"},
            ("hermes_cli.c", "services.a.impl"),
        ),
        (
            {"services/a/__init__.py": "__all__ = ['run']\n", "hermes_cli/c.py": "from services.a import impl\n"},
            ("hermes_cli.c", "services.a"),
        ),
        (
            {"shared/k/__init__.py": "__all__: list[str] = ['f']\n", "shared/m.py": "from shared.k.rpc import f\n"},
            ("shared.m", "shared.k.rpc"),
        ),
    ],
    ids=[
        "shared-to-cli",
        "plugin-to-service",
        "lazy-shared-to-service",
        "nous-to-service",
        "service-to-service",
        "service-to-cli",
        "cli-to-private-module",
        "cli-to-name-not-in-face",
        "shared-past-a-face",
    ],
)
def test_a_planted_violation_is_found(tmp_path, files, expected):
    found = violations(plant(tmp_path, files))
    assert [(v.importer, v.imported) for v in found] == [expected]


def test_what_the_layers_allow_is_not_flagged(tmp_path):
    files = {
        "shared/a.py": "from shared import b\nfrom . import b\n",
        "shared/b.py": "import os\nimport zmq\n",
        "nous/store.py": "from shared.files import write_json_atomic\n",
        "services/a/__init__.py": "from services.a.impl import run\n__all__ = ['run']\n",
        "services/a/impl.py": "from .rules import decide\nfrom nous.store import x\nfrom shared import b\n",
        "services/a/rules.py": "",
        "hermes_cli/c.py": "from services.a import run\nimport services.a\nfrom shared.a import f\n",
    }
    assert violations(plant(tmp_path, files)) == []
