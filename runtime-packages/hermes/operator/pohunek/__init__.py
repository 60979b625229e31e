"""The Pohunek operator plugin for Hermes: typed tools over the operator session daemon, and
the lifecycle hooks of a managed session.

``register(ctx)`` registers the hooks first (they need nothing else, so they work even when the
policy does not), then loads the policy (``settings``: in process where this project's packages
import, else through the operator CLI the policy names); a policy that fails its rules, whose
protocol range misses the client's window, or that names no CLI to reach the daemon through
where one is needed, leaves no tools at all. Only the access mode's tools are registered, and
the skill only when every read tool is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import hooks, schemas, settings
from .tools import Toolbox

# The installer replaces the one token below with the policy's absolute path, as a string
# literal; left as it is, the name does not exist and the plugin registers no tools.
try:
    POLICY_PATH: str | None = __POHUNEK_POLICY_PATH__  # type: ignore[name-defined]
except NameError:
    POLICY_PATH = None

SKILL_PATH = Path(__file__).parent / "skills" / "pohunek" / "SKILL.md"
TOOLSET = "pohunek"
MAX_FAILURES = 1_000_000
_STATUS: dict[str, Any] = {"state": "not_registered", "failure_count": 0, "tools": 0, "hooks": 0, "skill": False}


def integration_status() -> dict[str, Any]:
    """Bounded and payload-free: what doctor's probe reads."""
    return dict(_STATUS)


def _status(state: str, *, failed: bool = False) -> None:
    _STATUS["state"] = state
    if failed:
        _STATUS["failure_count"] = min(_STATUS["failure_count"] + 1, MAX_FAILURES)


def register(ctx: Any) -> None:
    for name, callback in hooks.callbacks().items():
        ctx.register_hook(name, callback)
        _STATUS["hooks"] += 1
    loaded = settings.load(POLICY_PATH)
    if isinstance(loaded, str):
        _status(loaded, failed=True)
        return
    toolbox = Toolbox(loaded.policy, loaded.window, transport=loaded.transport)
    names = schemas.tools_for(loaded.policy.access_mode)
    for name in names:
        schema = schemas.SCHEMAS[name]
        ctx.register_tool(name, TOOLSET, schema, toolbox.handler(name), description=schema["description"])
    _STATUS["tools"] = len(names)
    if set(schemas.READ_TOOLS) <= set(names) and SKILL_PATH.is_file():
        ctx.register_skill(TOOLSET, SKILL_PATH)
        _STATUS["skill"] = True
    _status("ready")
