"""What a probed operator plugin must have registered, and the three doctor checks judging a
probe's result against it: ``tool_registration``, ``skill_registration``, ``hook_registration``.

Pure: the caller runs the probe (``hermes_cli.operator.probe_client``) and passes its result.
The expected tools are the access policy's (``shared.operator.policy``), never read from the
plugin's payload: the CLI never imports the payload it judges (a test holds the payload's copy
equal).
"""

from __future__ import annotations

from typing import Any

from hermes_cli.operator.probe_client import ProbeResult
from shared.operator import policy

TOOLS_BY_MODE: dict[str, frozenset[str]] = {mode: frozenset(names) for mode, names in policy.TOOLS_BY_MODE.items()}
EXPECTED_TOOLS = {mode: len(names) for mode, names in TOOLS_BY_MODE.items()}
EXPECTED_HOOKS = (
    "on_session_start",
    "pre_llm_call",
    "post_llm_call",
    "pre_approval_request",
    "post_approval_response",
    "on_session_end",
    "on_session_finalize",
)
# Registered only with every read tool, which every mode has.
EXPECTED_SKILLS = ("pohunek",)
MAX_HOOK_LATENCY_MS = 1000

CHECKS = ("tool_registration", "skill_registration", "hook_registration")
RECOVERY_HINTS = {
    "tool_registration": (
        "the plugin did not register exactly its access mode's tools, or is not bound to its "
        "policy: check the policy file and its protocol range, then run 'hermes operator install' again"
    ),
    "skill_registration": (
        "the plugin did not register its skill: every read tool must register; reinstall with 'hermes operator install'"
    ),
    "hook_registration": (
        "the plugin's hooks are not the seven expected, or did what a hook must never do (a "
        "process, the network, a database, an exception, a slow call): reinstall with "
        "'hermes operator install'"
    ),
}


def _check(code: str, passed: bool | None) -> dict[str, Any]:
    status = "not_run" if passed is None else "pass" if passed else "fail"
    return {"code": code, "status": status, "recovery_hint": RECOVERY_HINTS[code]}


def _tools_pass(result: ProbeResult, access_mode: str | None) -> bool:
    # An unknown mode expects no tool list at all: nothing the plugin did can pass.
    expected = TOOLS_BY_MODE.get(access_mode) if isinstance(access_mode, str) else None
    return expected is not None and result.loaded and result.policy_bound and frozenset(result.tools) == expected


def _hooks_pass(result: ProbeResult) -> bool:
    dry = result.hook_dry_run
    return (
        result.loaded
        and sorted(result.hooks) == sorted(EXPECTED_HOOKS)
        and dry.calls == len(EXPECTED_HOOKS)
        and not dry.forbidden
        and not dry.escaped
        and dry.forced_failure_swallowed
        and dry.latency_ms <= MAX_HOOK_LATENCY_MS
    )


def checks(result: ProbeResult | None, access_mode: str | None) -> list[dict[str, Any]]:
    """The three checks, in order, each ``{"code", "status", "recovery_hint"}``; every one
    ``not_run`` when no probe result is there (the probe failed, or was not run)."""
    if result is None:
        return [_check(code, None) for code in CHECKS]
    return [
        _check("tool_registration", _tools_pass(result, access_mode)),
        _check("skill_registration", result.loaded and tuple(result.skills) == EXPECTED_SKILLS),
        _check("hook_registration", _hooks_pass(result)),
    ]
