"""The doctor's three registration checks of a probed operator plugin, and the expected names
they hold, which must be the payload's own."""

from __future__ import annotations

import dataclasses

import pytest

from hermes_cli.operator import registration
from hermes_cli.operator.probe_client import HookDryRun, ProbeResult
from hermes_cli.operator.registration import EXPECTED_HOOKS, EXPECTED_TOOLS, TOOLS_BY_MODE, checks
from tests.support.operator_plugin import payload

CODES = ["tool_registration", "skill_registration", "hook_registration"]
CLEAN = HookDryRun(calls=7, forbidden=(), escaped=(), forced_failure_swallowed=True, latency_ms=12)


def result(mode: str = "manage", **changes) -> ProbeResult:
    base = ProbeResult(
        loaded=True,
        error=None,
        state="ready",
        policy_bound=True,
        tools=tuple(sorted(TOOLS_BY_MODE[mode])),
        skills=("pohunek",),
        hooks=EXPECTED_HOOKS,
        hook_dry_run=CLEAN,
    )
    return dataclasses.replace(base, **changes)


def statuses(found: list[dict]) -> list[str]:
    return [check["status"] for check in found]


@pytest.mark.parametrize("mode", ["read_only", "manage", "full"])
def test_the_expected_tools_are_the_payloads_own_for_each_mode(mode):
    schemas = payload("schemas")
    assert TOOLS_BY_MODE[mode] == frozenset(schemas.tools_for(mode))
    assert len(schemas.tools_for(mode)) == EXPECTED_TOOLS[mode]


def test_the_expected_counts_and_hooks_are_the_payloads():
    assert EXPECTED_TOOLS == {"read_only": 7, "manage": 14, "full": 16}
    assert EXPECTED_HOOKS == tuple(payload("hooks").callbacks())


def test_no_result_is_three_checks_not_run_in_order():
    found = checks(None, "manage")
    assert [c["code"] for c in found] == CODES
    assert statuses(found) == ["not_run"] * 3


@pytest.mark.parametrize("mode", ["read_only", "manage", "full"])
def test_a_clean_probe_of_its_mode_passes_all_three(mode):
    found = checks(result(mode), mode)
    assert [c["code"] for c in found] == CODES and statuses(found) == ["pass"] * 3


def test_each_check_has_its_one_fixed_hint_whatever_the_outcome():
    outcomes = [checks(None, None), checks(result(), "manage"), checks(result(loaded=False), "manage")]
    for found in outcomes:
        assert [c["recovery_hint"] for c in found] == [registration.RECOVERY_HINTS[c] for c in CODES]
        assert all(set(c) == {"code", "status", "recovery_hint"} for c in found)


@pytest.mark.parametrize(
    ("probed", "policy_mode"),
    [("manage", "full"), ("full", "manage"), ("read_only", "manage"), ("manage", None), ("manage", "admin")],
)
def test_tools_of_another_mode_or_an_unknown_mode_fail_tool_registration(probed, policy_mode):
    assert statuses(checks(result(probed), policy_mode)) == ["fail", "pass", "pass"]


def test_one_tool_missing_or_one_too_many_fails_tool_registration():
    tools = tuple(sorted(TOOLS_BY_MODE["manage"]))
    assert statuses(checks(result(tools=tools[1:]), "manage"))[0] == "fail"
    assert statuses(checks(result(tools=(*tools, "pohunek_session_stop")), "manage"))[0] == "fail"


@pytest.mark.parametrize("skills", [(), ("pohunek", "pohunek"), ("other",)])
def test_anything_but_the_one_skill_fails_skill_registration(skills):
    assert statuses(checks(result(skills=skills), "manage")) == ["pass", "fail", "pass"]


def test_a_plugin_that_did_not_load_fails_all_three():
    assert statuses(checks(result(loaded=False, error="import_failed"), "manage")) == ["fail"] * 3


@pytest.mark.parametrize(
    "spoil",
    [
        {"hooks": EXPECTED_HOOKS[:-1]},
        {"hooks": (*EXPECTED_HOOKS, "pre_tool_call")},
        {"hook_dry_run": dataclasses.replace(CLEAN, calls=6)},
        {"hook_dry_run": dataclasses.replace(CLEAN, forbidden=("subprocess.Popen",))},
        {"hook_dry_run": dataclasses.replace(CLEAN, escaped=("pre_llm_call",))},
        {"hook_dry_run": dataclasses.replace(CLEAN, forced_failure_swallowed=False)},
        {"hook_dry_run": dataclasses.replace(CLEAN, latency_ms=1001)},
    ],
)
def test_each_hook_defect_alone_fails_hook_registration(spoil):
    assert statuses(checks(result(**spoil), "manage")) == ["pass", "pass", "fail"]


def test_hooks_in_another_order_and_latency_at_the_bound_pass():
    spoil = {"hooks": EXPECTED_HOOKS[::-1], "hook_dry_run": dataclasses.replace(CLEAN, latency_ms=1000)}
    assert statuses(checks(result(**spoil), "manage")) == ["pass"] * 3


def test_a_plugin_bound_to_another_policy_fails_tool_registration():
    assert statuses(checks(result(policy_bound=False), "manage")) == ["fail", "pass", "pass"]
