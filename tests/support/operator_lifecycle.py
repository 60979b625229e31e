"""The operator's integration lifecycle as its Hermes compatibility harness runs it: install,
status, doctor and uninstall on the lock's named profile and policy, each command's result read
as a state (``installed``, ``healthy``, ``absent``) and held to the lock's expected one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_cli.operator.doctor import TARGET_CHECKS
from tests.support.hermes_contract import lock

Run = Callable[..., tuple[int, Any]]  # ``hermes operator ARGS --json``: exit code, document


def contract() -> dict[str, Any]:
    return lock()["plugin_contract"]["integration_lifecycle"]


def state(action: str, data: dict[str, Any]) -> str:
    """The state a command's document shows; ``unexpected`` when it shows none of the lock's."""
    if action == "doctor":
        checks = {c["code"]: c["status"] for c in data["checks"] if c["code"] in TARGET_CHECKS}
        # The hooks' verdict includes a latency bound a loaded machine may miss: it must have run.
        ran = checks.pop("hook_registration") in ("pass", "fail")
        return "healthy" if ran and set(checks.values()) == {"pass"} else "unexpected"
    if data["modified"] or any(data["stale"].values()):
        return "unexpected"
    if action in ("install", "status") and data["installed"] and data["enabled"]:
        return "installed"
    if action == "uninstall" and not data["installed"] and not data["enabled"]:
        return "absent"
    return "unexpected"


def run_lifecycle(
    run: Run, hermes_bin: Path | None, home: Path, *, installed: Callable[[], None] | None = None
) -> list[tuple[str, str]]:
    """Each step of the lock's lifecycle: (action, state seen), with ``installed`` called after
    status (where the operator's harness loads the plugin in Hermes). The named profile must exist."""
    wanted = contract()
    target = ("--hermes-profile", wanted["target_value"])
    chosen = ("--hermes-bin", str(hermes_bin)) if hermes_bin is not None else ()
    policy = ("--access-mode", wanted["access_mode"])
    for host in wanted["allowed_hosts"]:
        policy += ("--allow-host", host)
    seen = []
    for step in wanted["steps"]:
        action = step["action"]
        code, data = run("operator", action, *target, *chosen, *(policy if action == "install" else ()))
        assert action == "doctor" or code == 0, (action, data)
        seen.append((action, state(action, data)))
        if action in ("install", "status"):
            assert data["policy"]["access_mode"] == wanted["access_mode"]
            assert data["policy"]["allowed_hosts"] == wanted["allowed_hosts"]
            assert data["plugin_root"] == str(home / "plugins" / "operators" / "pohunek")
        if action == "status" and installed is not None:
            installed()
    return seen


def expected() -> list[tuple[str, str]]:
    return [(step["action"], step["expected_state"]) for step in contract()["steps"]]
