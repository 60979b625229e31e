"""The integration doctor: a fixed inventory of typed checks for one Hermes home.

Each check is ``{code, status: pass | fail | not_run, recovery_hint}``, in a fixed order, and
holds nothing of the policy, the plugin's files or a payload. Only the registration checks
run Hermes's Python (the probe script on the installed plugin), and ``plugin_enabled`` asks
``hermes plugins list --json``; the others read files.
A check whose premise failed is ``not_run``, never a guess.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from runtime_package.manifests import DEFAULT_PROBE
from shared.errors import HermesError
from shared.operator.policy import ACCESS_MODES, Policy, overlap, valid_host
from shared.operator.protocol import CLIENT_WINDOW

from . import assets, hermes_bin, lifecycle, probe_client, registration, settings
from .source import HINTS
from .status import enabled, outdated, source_or_error
from .target import Target, policy_inside_home, policy_path

_UPDATE = "Run `hermes operator update` with the same target flags."
HINT = {
    "hermes_executable": (
        "Give the Hermes executable with --hermes-bin ABS: its real path, an executable file of yours "
        "that no one else can write, with its python3 beside it."
    ),
    "hermes_version": "Install a Hermes Agent release the package accepts (see `hermes --version`).",
    "target_safety": "Use an owner-private Hermes home; the policy must stay outside it.",
    "plugin_ownership": "Run `hermes operator install` for this target, or move a foreign plugin away.",
    "asset_integrity": "Review the changes, then `hermes operator update --confirm-modified`.",
    "asset_current": _UPDATE,
    "plugin_enabled": "Run `hermes operator update` (it enables the plugin through `hermes plugins enable`).",
    "policy_schema_permissions": _UPDATE + " It rewrites the policy 0600 and keeps every setting.",
    "pohunek_cli_compatibility": _UPDATE,
    "host_allowlist_syntax": _UPDATE + " Give --allow-host local, '*' or DNS names.",
    "access_mode": _UPDATE + " Give --access-mode read_only, manage or full.",
    "stale_stage": "An install was interrupted: run `hermes operator update`, which recovers it.",
    "stale_backup": "An install was interrupted: run `hermes operator update`, which recovers it.",
    **registration.RECOVERY_HINTS,
    "hook_dry_run": "Run `hermes operator doctor` inside the managed session to see the finding.",
    "reporter_reachable": "Start the hook reporter (`hermes mesh up`).",
    "daemon_reachable": "Start the session daemon, or set POHUNEK_DAEMON_ENDPOINT for the reporter.",
}
NOT_SELECTED_HINT = "select --hermes-profile or --hermes-home"
TARGET_CHECKS = (
    "hermes_executable",
    "hermes_version",
    "target_safety",
    "asset_source",
    "plugin_ownership",
    "asset_integrity",
    "asset_current",
    "plugin_enabled",
    "policy_schema_permissions",
    "pohunek_cli_compatibility",
    "tool_registration",
    "skill_registration",
    "hook_registration",
    "host_allowlist_syntax",
    "access_mode",
    "stale_stage",
    "stale_backup",
)
MESH_CHECKS = ("hook_dry_run", "reporter_reachable", "daemon_reachable")


def _check(code: str, status: str, hint: str | None = None) -> dict[str, Any]:
    return {"code": code, "status": status, "recovery_hint": hint if hint is not None else HINT[code]}


def not_run(codes: tuple[str, ...], hint: str) -> list[dict[str, Any]]:
    return [_check(code, "not_run", hint) for code in codes]


def _verdict(code: str, ok: bool | None) -> dict[str, Any]:
    return _check(code, "not_run" if ok is None else "pass" if ok else "fail")


def _attempt(step: Callable[[], Any]) -> tuple[Any, bool]:
    try:
        return step(), True
    except HermesError:
        return None, False


def _policy_check(policy_file: Path, ok: bool | None) -> dict[str, Any]:
    """``policy_schema_permissions``, whose hint is the repair that works: update when it can
    read the settings back (the mode is the fault), else install with every setting given."""
    if ok is not False:
        return _verdict("policy_schema_permissions", ok)
    kept, _ = _attempt(lambda: settings.read_installed(policy_file))
    return _check("policy_schema_permissions", "fail", None if kept is not None else settings.REINSTALL_HINT)


def target_checks(target: Target, state: Path, bin_path: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The target's checks, and the source error and provenance the document carries."""
    source, error = source_or_error(state)
    probe = source.runtime.probe if source is not None else DEFAULT_PROBE
    _, executable = _attempt(lambda: (hermes_bin.check_bin(bin_path), hermes_bin.sibling_python(bin_path)))
    _, version_ok = _attempt(lambda: hermes_bin.version(bin_path, probe, target.home)) if executable else (None, None)
    policy_file = policy_path(state, target)
    # The policy must be out of the home's reach, and every directory the installer goes through real.
    safe = not policy_inside_home(state, target) and lifecycle.paths_safe(target, state)
    checks = [
        _verdict("hermes_executable", executable),
        _verdict("hermes_version", version_ok),
        _verdict("target_safety", safe),
    ]
    checks.append(_check("asset_source", "fail", HINTS[error.code]) if error else _check("asset_source", "pass", ""))
    found: lifecycle.Installed | None
    found, readable = _attempt(lambda: lifecycle.installed(target))
    marker = found.marker if found is not None else None
    owned = readable and marker is not None and marker.hermes_home == str(target.home)
    owned = owned and marker is not None and marker.policy_path == str(policy_file)
    checks.append(_verdict("plugin_ownership", owned))
    installed = found if owned else None
    checks.append(
        _verdict(
            "asset_integrity", None if installed is None else not assets.modified(installed.root, installed.marker)
        )
    )
    current = None if installed is None or source is None else not outdated(installed.marker, source)
    checks.append(_verdict("asset_current", current))
    checks.append(_verdict("plugin_enabled", None if installed is None else enabled(target, bin_path)[0]))
    policy: Policy | None
    policy, policy_ok = _attempt(lambda: settings.read(policy_file)) if installed is not None else (None, None)
    checks.append(_policy_check(policy_file, policy_ok))
    checks.append(
        _verdict("pohunek_cli_compatibility", None if policy is None else overlap(policy, CLIENT_WINDOW) is not None)
    )
    result = None
    if installed is not None and executable:
        result, _ = _attempt(lambda: probe_client.run_probe(bin_path, installed.root, policy_file))
    checks.extend(registration.checks(result, policy.access_mode if policy is not None else None))
    hosts_ok = None if policy is None else all(valid_host(h, allow_wildcard=True) for h in policy.allowed_hosts)
    checks.append(_verdict("host_allowlist_syntax", hosts_ok))
    checks.append(_verdict("access_mode", None if policy is None else policy.access_mode in ACCESS_MODES))
    stale = lifecycle.stale_siblings(target)
    checks.append(_verdict("stale_stage", not stale["stage"] and not stale["journal"]))
    checks.append(_verdict("stale_backup", not stale["backup"]))
    extra = {
        "package_source_error": error.code if error is not None else None,
        "provenance": marker.provenance if marker is not None else None,
    }
    return checks, extra
