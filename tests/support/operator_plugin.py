"""The operator plugin as the tests use it: its source modules imported straight from the
payload, and the payload rendered into a Hermes home with a policy beside it (what the
installer does, without the package)."""

from __future__ import annotations

import copy
import importlib
import json
import os
import shutil
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shared.operator.policy import DEFAULT_REQUEST_TIMEOUT_MS
from tests.support.processes import ROOT

PAYLOAD = ROOT / "runtime-packages" / "hermes" / "operator" / "pohunek"
# The operator CLI the checkout installs beside its interpreter (the ``hermes-operator`` script).
OPERATOR_CLI = Path(sys.executable).parent / "hermes-operator"
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


def package_payload(archive_bytes: bytes) -> dict[str, bytes]:
    """The operator payload a built package carries: its files under ``operator/pohunek/``,
    by their path inside the plugin."""
    from runtime_package import archive

    prefix = "operator/pohunek/"
    return {e.path[len(prefix) :]: e.data for e in archive.read(archive_bytes) if e.path.startswith(prefix)}


def render(files: dict[str, bytes], target: Path, policy: Path) -> Path:
    """Write the payload ``files`` into ``target`` with ``policy``'s path in its one token, as
    the installer renders it."""
    if target.exists():
        shutil.rmtree(target)
    for name, data in files.items():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_bytes(data)
    init = target / "__init__.py"
    text = init.read_text()
    assert text.count(TOKEN) == 1
    init.write_text(text.replace(TOKEN, json.dumps(str(policy))))
    return target


def source_payload() -> dict[str, bytes]:
    """The payload as the source tree holds it."""
    return {
        path.relative_to(PAYLOAD).as_posix(): path.read_bytes()
        for path in sorted(PAYLOAD.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def install(home: Path, policy: Path, *, enable: bool = True) -> Path:
    """Render the payload into ``<home>/plugins/pohunek`` with ``policy``'s path in its one
    token, and enable it the supported way."""
    target = render(source_payload(), home / "plugins" / "pohunek", policy)
    if enable:
        from hermes_cli import plugin_host  # only what enables it needs the host

        plugin_host.set_enabled(home, "pohunek", True)
    return target


def argument_fields(schema: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[str, str]]:
    """``(path, kind)`` of every text (``string``) and whole-number (``integer``) argument a
    tool's parameters declare, at any depth; an array's item is its index 0, a ``oneOf``
    yields each branch's fields."""
    for branch in schema.get("oneOf", ()):
        yield from argument_fields(branch, path)
    kinds = schema.get("type", "string" if "enum" in schema else None)
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "object" in kinds:
        for key, value in schema.get("properties", {}).items():
            yield from argument_fields(value, (*path, key))
    elif "array" in kinds:
        yield from argument_fields(schema["items"], (*path, "0"))
    elif "integer" in kinds or "string" in kinds:
        yield ".".join(path), "integer" if "integer" in kinds else "string"


def with_argument(args: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``args`` with ``value`` at the dotted ``path``; the objects and one-item
    arrays on the way are made when missing."""
    changed = copy.deepcopy(args)
    keys = path.split(".")
    node: Any = changed
    for here, following in zip(keys, keys[1:], strict=False):
        empty: Any = [None] if following.isdigit() else {}
        if isinstance(node, list):
            node[int(here)] = node[int(here)] or empty
            node = node[int(here)]
        else:
            node = node.setdefault(here, empty)
    if isinstance(node, list):
        node[int(keys[-1])] = value
    else:
        node[keys[-1]] = value
    return changed


def arguments_around(name: str, path: str, session: str) -> dict[str, Any]:
    """The smallest valid arguments of tool ``name`` on ``session`` (project ``web``), shaped to
    take one more argument at ``path``: a start names its project where ``path`` does."""
    pair = {"worker_instance_id": "w-1", "runtime_generation": "1"}
    args: dict[str, Any] = {
        "pohunek_hosts": {},
        "pohunek_sessions": {},
        "pohunek_session_output": {"session": session, **pair, "after_offset": "0"},
        "pohunek_session_wait": {"session": session, "timeout_ms": 100},
        "pohunek_session_start": {"agent_profile": "shell", "name": "n"},
        "pohunek_session_send": {"session": session, "input": "x"},
        "pohunek_session_resize": {"session": session, "cols": 80, "rows": 24},
        "pohunek_session_rename": {"session": session, "name": "n"},
        "pohunek_session_set_metadata": {"session": session, "metadata": {"label": "x"}},
    }.get(name, {"session": session})
    if name == "pohunek_session_start" and not path.startswith("project."):
        if path.startswith("worktree.project."):
            args["worktree"] = {}
        elif path.startswith("worktree."):
            args["worktree"] = {"project": {"label": "web"}}
        else:
            args["project"] = {"label": "web"}
    return args
