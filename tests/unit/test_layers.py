"""The dependency graph between packages, read statically from every module's imports.

``ARROWS`` is the house: each layer and the layers it may import (every layer may import
itself). ``services.*`` stands for each service package and ``simulators.*`` for each
simulator: one service never imports another. The operator plugin's payload
(``runtime-packages/hermes/operator/pohunek``), loaded by Hermes from its own directory, is the
layer ``pohunek``. docs/architecture.md draws this table (``render_arrows``), checked here.

Every service and simulator package, and any other package whose ``__init__`` defines
``__all__``, has a public face: from outside the package only the package itself and the names
in its ``__all__`` may be imported; its modules are private. Tests and benchmarks may read any
module.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.compat.test_pinned_imports import PINNED
from tests.support.module_graph import imports_in, module_name, parsed, plant
from tests.support.processes import PACKAGES, ROOT

ARROWS: dict[str, tuple[str, ...]] = {
    "hermes_cli": ("services.*", "simulators.*", "nous", "fleet", "runtime_package", "shared"),
    "services.*": ("nous", "fleet", "shared"),
    "simulators.*": ("runtime_package", "shared"),
    "nous": ("shared",),
    "fleet": ("shared",),
    "runtime_package": ("shared",),
    "pohunek": ("shared",),
    "shared": (),
}
WHAT = {
    "hermes_cli": "the `hermes` command line: a client of every process",
    "services.*": "one package per mesh process: gateway, gateway_host, updater, auth_worker, handoff_retry, hook_reporter",
    "simulators.*": "stand-ins for outside peers: the operator daemon, the Nous portal",
    "nous": "the Nous account domain: store, tokens, portal client, guest handoff",
    "fleet": "finding and driving gateways: discovery, argv matchers, supervisors",
    "runtime_package": "the signed runtime package: archive, catalog, registry",
    "pohunek": "the operator plugin's payload, loaded by Hermes from a home",
    "shared": "the kernel, with the transport behind one face (`shared.transport`)",
}
CHECKED = PACKAGES
OURS = frozenset(CHECKED)
PLUGIN_ROOT = Path("runtime-packages/hermes/operator")  # holds the payload package ``pohunek``
PLUGIN = "pohunek"
FAMILIES = ("services", "simulators")  # a package of packages: each member is a layer of its own


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


def imports_of(root: Path, path: Path) -> Iterator[Import]:
    """Every import in the module, at any depth (a lazy import inside a function counts too)."""
    for module, names in imports_in(root, path, ast.walk(parsed(path))):
        yield Import(module, names)


def layer(module: str) -> str:
    """The layer ``module`` is in: a top-level package, or one member of a family
    (``services.gateway``)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] in FAMILIES and len(parts) > 1 else parts[0]


def kind(layer_name: str) -> str:
    """The row of ``ARROWS`` a layer follows: ``services.gateway`` follows ``services.*``."""
    top = layer_name.split(".")[0]
    return f"{top}.*" if top in FAMILIES else layer_name


def may_import(importer: str, imported: str) -> bool:
    own, other = layer(importer), layer(imported)
    return own == other or kind(other) in ARROWS[kind(own)]


def render_arrows() -> str:
    """The house as docs/architecture.md draws it: every layer, what it is, what it may import."""
    width = max(map(len, ARROWS))
    lines = []
    for name, targets in ARROWS.items():
        lines.append(f"{name:<{width}}  ──► {', '.join(targets) if targets else '(nothing of ours)'}")
        lines.append(f"{'':<{width}}      {WHAT[name]}")
    return "\n".join(lines) + "\n"


def faces(root: Path) -> dict[str, frozenset[str]]:
    """Package -> the names of its public face: every package whose ``__init__`` has ``__all__``,
    and every service and simulator package (one without ``__all__`` shows nothing)."""
    found = {
        module_name(root, init): frozenset()
        for family in FAMILIES
        for init in sorted(root.glob(f"{family}/*/__init__.py"))
    }
    for init in sorted(root.glob("**/__init__.py")):
        if init.relative_to(root).parts[0] not in OURS:
            continue
        for node in parsed(init).body:
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
            for target in imports_of(base, path):
                if target.module.split(".")[0] not in OURS | {PLUGIN}:
                    continue
                imported = target.module
                if not may_import(importer, imported):
                    rule = f"{layer(importer)} may import only {[layer(importer), *ARROWS[kind(layer(importer))]]}"
                    found.add(Violation(importer, imported, rule))
                elif why := face_violation(importer, target, public):
                    found.add(Violation(importer, imported, why))
    return sorted(found)


def test_the_tree_keeps_its_layers():
    found = violations(ROOT)
    assert not found, "\n".join(map(str, found))


# --- the checker itself, on a planted tree -----------------------------------------------------


PLANTED = {
    "shared-to-cli": ({"shared/a.py": "from hermes_cli import parser\n"}, ("shared.a", "hermes_cli")),
    "shared-to-fleet": ({"shared/a.py": "from fleet import discovery\n"}, ("shared.a", "fleet")),
    "shared-to-runtime-package": (
        {"shared/a.py": "from runtime_package.archive import x\n"},
        ("shared.a", "runtime_package.archive"),
    ),
    "lazy-shared-to-service": (
        {"shared/a.py": "def f():\n    import services.gateway.ops\n"},
        ("shared.a", "services.gateway.ops"),
    ),
    "shared-to-simulator": (
        {"shared/a.py": "from simulators.portal_sim import x\n"},
        ("shared.a", "simulators.portal_sim"),
    ),
    "plugin-to-simulator": (
        {f"{PLUGIN_ROOT}/pohunek/tools.py": "from simulators.operator_sim import app\n"},
        ("pohunek.tools", "simulators.operator_sim"),
    ),
    "plugin-to-runtime-package": (
        {f"{PLUGIN_ROOT}/pohunek/tools.py": "from runtime_package import registry\n"},
        ("pohunek.tools", "runtime_package"),
    ),
    "nous-to-service": ({"nous/a.py": "from services.updater import plan\n"}, ("nous.a", "services.updater")),
    "nous-to-fleet": ({"nous/a.py": "from fleet.discovery import x\n"}, ("nous.a", "fleet.discovery")),
    "fleet-to-service": ({"fleet/a.py": "from services.updater import plan\n"}, ("fleet.a", "services.updater")),
    "fleet-to-runtime-package": ({"fleet/a.py": "from runtime_package import x\n"}, ("fleet.a", "runtime_package")),
    "runtime-package-to-fleet": ({"runtime_package/a.py": "from fleet import x\n"}, ("runtime_package.a", "fleet")),
    "runtime-package-to-nous": ({"runtime_package/a.py": "from nous import x\n"}, ("runtime_package.a", "nous")),
    "service-to-service": ({"services/a/x.py": "from services.b.y import z\n"}, ("services.a.x", "services.b.y")),
    "service-to-cli": (
        {"services/a/x.py": "from hermes_cli.output import table\n"},
        ("services.a.x", "hermes_cli.output"),
    ),
    "service-to-simulator": ({"services/a/x.py": "from simulators.b import y\n"}, ("services.a.x", "simulators.b")),
    "service-to-runtime-package": (
        {"services/a/x.py": "from runtime_package import y\n"},
        ("services.a.x", "runtime_package"),
    ),
    "simulator-to-service": ({"simulators/a/x.py": "from services.b import y\n"}, ("simulators.a.x", "services.b")),
    "simulator-to-simulator": (
        {"simulators/a/x.py": "from simulators.b import y\n"},
        ("simulators.a.x", "simulators.b"),
    ),
    "simulator-to-fleet": ({"simulators/a/x.py": "from fleet import y\n"}, ("simulators.a.x", "fleet")),
    "simulator-to-cli": ({"simulators/a/x.py": "import hermes_cli.main\n"}, ("simulators.a.x", "hermes_cli.main")),
    "cli-to-private-module": (
        {"services/a/__init__.py": "__all__ = ['run']\n", "hermes_cli/c.py": "from services.a.impl import run\n"},
        ("hermes_cli.c", "services.a.impl"),
    ),
    "cli-to-name-not-in-face": (
        {"services/a/__init__.py": "__all__ = ['run']\n", "hermes_cli/c.py": "from services.a import impl\n"},
        ("hermes_cli.c", "services.a"),
    ),
    "cli-to-private-simulator-module": (
        {"simulators/a/__init__.py": "__all__ = ['ops']\n", "hermes_cli/c.py": "from simulators.a.app import run\n"},
        ("hermes_cli.c", "simulators.a.app"),
    ),
    "cli-past-the-transport-face": (
        {
            "shared/transport/__init__.py": "__all__ = ['connect']\n",
            "hermes_cli/c.py": "from shared.transport.sync_client import connect\n",
        },
        ("hermes_cli.c", "shared.transport.sync_client"),
    ),
    "shared-past-a-face": (
        {"shared/k/__init__.py": "__all__: list[str] = ['f']\n", "shared/m.py": "from shared.k.rpc import f\n"},
        ("shared.m", "shared.k.rpc"),
    ),
}


@pytest.mark.parametrize("name", PLANTED)
def test_a_planted_violation_is_found(tmp_path, name):
    files, expected = PLANTED[name]
    found = violations(plant(tmp_path, files))
    assert [(v.importer, v.imported) for v in found] == [expected]


def test_every_arrow_has_a_planted_violation_of_its_absence():
    """Each pair of layers the table does not join is tried by at least one planted tree."""
    tried = {(kind(layer(v[1][0])), kind(layer(v[1][1]))) for v in PLANTED.values()}
    for own in ("shared", "fleet", "runtime_package", "nous", "services.*", "simulators.*", "pohunek"):
        refused = [other for other in ARROWS if other != own and other not in ARROWS[own] and other != "pohunek"]
        assert any((own, other) in tried for other in refused), f"no planted violation for {own}"


def test_what_the_layers_allow_is_not_flagged(tmp_path):
    files = {
        "shared/a.py": "from shared import b\nfrom . import b\nfrom shared.transport import connect\n",
        "shared/b.py": "import os\nimport zmq\n",
        "shared/transport/__init__.py": "__all__ = ['connect']\n",
        "shared/transport/sync_client.py": "from shared.transport.call_rules import x\nfrom shared import b\n",
        "fleet/d.py": "from shared.transport import connect\nfrom shared import b\n",
        "runtime_package/r.py": "from shared import b\n",
        "nous/store.py": "from shared.files import write_json_atomic\n",
        "services/a/__init__.py": "from services.a.impl import run\n__all__ = ['run']\n",
        "services/a/impl.py": "from .rules import decide\nfrom nous.store import x\nfrom shared import b\nfrom fleet import d\n",
        "services/a/rules.py": "",
        "simulators/s/__init__.py": "__all__ = ['ops']\n",
        "simulators/s/app.py": "from runtime_package import r\nfrom shared import b\n",
        "hermes_cli/c.py": (
            "from services.a import run\nimport services.a\nfrom shared.a import f\n"
            "from simulators.s import ops\nfrom fleet import d\nfrom runtime_package import r\n"
        ),
    }
    assert violations(plant(tmp_path, files)) == []


# --- the kernel holds only what two or more layers need -----------------------------------


def kernel_users(root: Path) -> dict[str, set[str]]:
    """Kernel module -> the other layers that use it, directly or through other kernel modules."""
    modules = {module_name(root, p): p for p in sorted((root / "shared").rglob("*.py"))}
    direct: dict[str, set[str]] = {m: set() for m in modules}
    inside: dict[str, set[str]] = {m: set() for m in modules}  # kernel module -> its kernel importers
    trees = [(root, root / top) for top in CHECKED] + [(root / PLUGIN_ROOT, root / PLUGIN_ROOT / PLUGIN)]
    for base, tree in trees:
        for path in sorted(tree.rglob("*.py")):
            importer = module_name(base, path)
            for target in imports_of(base, path):
                for name in (target.module, *(f"{target.module}.{n}" for n in target.names)):
                    if name not in modules or name == importer:
                        continue
                    if layer(importer) == "shared":
                        inside[name].add(importer)
                    else:
                        direct[name].add(layer(importer))
    users = {m: set(direct[m]) for m in modules}
    changed = True
    while changed:  # a kernel module serves whoever its kernel importers serve
        changed = False
        for m in modules:
            grown = users[m].union(*(users[k] for k in inside[m]))
            if grown != users[m]:
                users[m], changed = grown, True
    return users


def single_user_modules(root: Path, pinned: Collection[str] = PINNED) -> list[str]:
    """Kernel modules fewer than two layers use. A path the operator plugin's payload is pinned
    to counts the payload as a user: an installed payload of an older release imports it."""
    found = []
    for module, users in kernel_users(root).items():
        if module in pinned:
            users = users | {PLUGIN}
        if len(users) < 2 and module not in {"shared", "shared.transport"}:
            found.append(f"{module} serves only {sorted(users)}")
    return found


def test_the_kernel_holds_no_module_only_one_layer_uses():
    found = single_user_modules(ROOT)
    assert not found, "\n".join(found)


def test_a_planted_single_user_kernel_module_is_found(tmp_path):
    files = {
        "shared/only_cli.py": "",
        "shared/both.py": "",
        "shared/through.py": "from shared import both\n",
        "services/a/x.py": "from shared import both\n",
        "hermes_cli/c.py": "from shared import only_cli\nfrom shared.through import f\n",
        "nous/n.py": "from shared import through\n",
    }
    found = single_user_modules(plant(tmp_path, files), pinned=())
    assert found == ["shared.only_cli serves only ['hermes_cli']"]
