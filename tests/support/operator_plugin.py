"""The operator plugin as the tests use it: its source modules imported straight from the
payload, and the payload rendered into a Hermes home with a policy beside it (what the
installer does, without the package)."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
import types
from pathlib import Path
from typing import Any

from shared.operator.policy import DEFAULT_REQUEST_TIMEOUT_MS
from tests.support.processes import ROOT

PAYLOAD = ROOT / "runtime-packages" / "hermes" / "operator" / "pohunek"
TOKEN = "__POHUNEK_" + "POLICY_PATH__"
SOURCE_PACKAGE = "pohunek_source"


def payload(module: str) -> types.ModuleType:
    """``pohunek/<module>.py`` from the source tree, imported without the package's
    ``__init__`` (which needs a rendered policy path)."""
    if SOURCE_PACKAGE not in sys.modules:
        package = types.ModuleType(SOURCE_PACKAGE)
        package.__path__ = [str(PAYLOAD)]
        sys.modules[SOURCE_PACKAGE] = package
    return importlib.import_module(f"{SOURCE_PACKAGE}.{module}")


def policy_fields(daemon_endpoint: str, **overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "schema_version": 1,
        "daemon_endpoint": daemon_endpoint,
        "protocol_min": 3,
        "protocol_max": 4,
        "access_mode": "manage",
        "allowed_hosts": ["local"],
        "tool_timeout_ms": 60_000,
        "request_timeout_ms": DEFAULT_REQUEST_TIMEOUT_MS,
        "max_output_bytes": 1_048_576,
        "max_screen_bytes": 262_144,
        "max_concurrency": 8,
    }
    fields.update(overrides)
    return fields


def write_policy(path: Path, fields: dict[str, Any], *, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(json.dumps(fields))
    os.chmod(path, mode)
    return path


def install(home: Path, policy: Path, *, enable: bool = True) -> Path:
    """Render the payload into ``<home>/plugins/pohunek`` with ``policy``'s path in its one
    token, and enable it the supported way."""
    target = home / "plugins" / "pohunek"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(PAYLOAD, target, ignore=shutil.ignore_patterns("__pycache__"))
    init = target / "__init__.py"
    text = init.read_text()
    assert text.count(TOKEN) == 1
    init.write_text(text.replace(TOKEN, json.dumps(str(policy))))
    if enable:
        from shared import plugin_host  # only what enables it needs the host

        plugin_host.set_enabled(home, "pohunek", True)
    return target
