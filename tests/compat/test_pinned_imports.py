"""The import paths an installed operator plugin reaches into this install for. A payload is
copied into a Hermes home and stays there across updates of the mesh, so every path a payload
of any release imports (lazily, when our packages are on its path) must keep importing, with
every name it takes. The list only grows; the payload of this release must import nothing
outside it."""

from __future__ import annotations

import ast
import importlib

import pytest

from tests.support.module_graph import parsed
from tests.support.processes import ROOT

PAYLOAD = ROOT / "runtime-packages" / "hermes" / "operator" / "pohunek"
# module -> the names payloads take from it ("" for the module itself)
PINNED: dict[str, tuple[str, ...]] = {
    "shared.hooks": ("",),
    "shared.hook_vocabulary": ("",),
    "shared.protocol": ("Code", "OpSpec", "RemoteError"),
    "shared.operator.client": ("DaemonClient",),
    "shared.operator.policy": (
        "InvalidPolicy",
        "LOCAL",
        "MAX_OUTPUT_BYTES",
        "Policy",
        "WILDCARD",
        "check",
        "host_allowed",
        "overlap",
    ),
    "shared.operator.policy_file": ("load_policy",),
    "shared.operator.protocol": (
        "ACTIVITIES",
        "CLIENT_WINDOW",
        "Code",
        "DAEMON_ID_ENV",
        "INPUT_MAX_BYTES",
        "MAX_COLS",
        "MAX_ROWS",
        "ORIGIN_DENIED",
        "OUTPUT_MAX_BYTES",
        "SESSION_ENV",
        "STATES",
        "WAIT_MAX_MS",
    ),
    "shared.operator.tool_calls": ("",),
    "shared.operator.u64": ("",),
}


def payload_imports() -> set[tuple[str, str]]:
    """(module, name) for every import of our packages in this release's payload."""
    found = set()
    for path in sorted(PAYLOAD.rglob("*.py")):
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("shared"):
                for alias in node.names:
                    module = f"{node.module}.{alias.name}"
                    found.add((module, "") if module in PINNED else (node.module or "", alias.name))
            elif isinstance(node, ast.Import):
                found.update((a.name, "") for a in node.names if a.name.startswith("shared"))
    return found


def test_the_payload_imports_only_pinned_paths():
    loose = sorted(f"{m}:{n}" for m, n in payload_imports() if n not in PINNED.get(m, ()))
    assert not loose, f"pin these in PINNED first (they must then keep working): {loose}"


@pytest.mark.parametrize("module", PINNED)
def test_a_pinned_path_still_imports(module):
    imported = importlib.import_module(module)
    missing = [n for n in PINNED[module] if n and not hasattr(imported, n)]
    assert not missing, f"{module} lost {missing}"
