"""``register(ctx)`` of the rendered operator plugin, with a context that records what it is
given: the hooks always, tools only under a policy that holds, exactly the access mode's."""

from __future__ import annotations

import importlib.util
import itertools
import os
import sys
from pathlib import Path

import pytest

from hermes_cli.operator.registration import EXPECTED_HOOKS
from tests.support.operator_plugin import install, policy_fields, write_policy

HOOKS = set(EXPECTED_HOOKS)
_names = itertools.count()


class Recorder:
    def __init__(self) -> None:
        self.tools: dict[str, dict] = {}
        self.hooks: list[str] = []
        self.skills: list[str] = []

    def register_tool(self, name, toolset, schema, handler, **kwargs):
        assert callable(handler) and toolset == "pohunek"
        self.tools[name] = schema

    def register_hook(self, name, callback):
        self.hooks.append(name)

    def register_skill(self, name, path, description=""):
        assert Path(path).is_file()
        self.skills.append(name)


def registered(home: Path, policy: Path | None) -> tuple[Recorder, dict]:
    """Render the plugin for ``policy`` (the token left as it is when None), import it under a
    fresh name and register it."""
    target = install(home, policy or Path("/unused"), enable=False)
    if policy is None:
        (target / "__init__.py").write_text(
            (Path(__file__).parents[2] / "runtime-packages/hermes/operator/pohunek/__init__.py").read_text()
        )
    name = f"pohunek_rendered_{next(_names)}"
    spec = importlib.util.spec_from_file_location(
        name, target / "__init__.py", submodule_search_locations=[str(target)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    ctx = Recorder()
    module.register(ctx)
    return ctx, module.integration_status()


@pytest.mark.parametrize(("mode", "count"), [("read_only", 7), ("manage", 14), ("full", 16)])
def test_each_mode_registers_exactly_its_tools_the_hooks_and_the_skill(tmp_path, mode, count):
    policy = write_policy(tmp_path / "state" / "policy.json", policy_fields("ipc:///nowhere", access_mode=mode))
    ctx, status = registered(tmp_path / "home", policy)
    assert len(ctx.tools) == count
    assert set(ctx.hooks) == HOOKS and len(ctx.hooks) == 7
    assert ctx.skills == ["pohunek"]
    assert status == {"state": "ready", "failure_count": 0, "tools": count, "hooks": 7, "skill": True}
    for name, schema in ctx.tools.items():
        assert schema["name"] == name and schema["parameters"]["type"] == "object"


@pytest.mark.parametrize(
    "spoil",
    [
        {"access_mode": "admin"},
        {"tool_timeout_ms": 60_001},
        {"request_timeout_ms": 60_000},
        {"max_concurrency": 0},
        {"allowed_hosts": []},
        {"allowed_hosts": ["10.0.0.1"]},
        {"extra": True},
    ],
    ids=["mode", "tool-timeout", "request-not-below-tool", "concurrency", "no-hosts", "ip-host", "extra-field"],
)
def test_an_invalid_policy_registers_the_hooks_and_no_tool(tmp_path, spoil):
    policy = write_policy(tmp_path / "state" / "policy.json", policy_fields("ipc:///nowhere", **spoil))
    ctx, status = registered(tmp_path / "home", policy)
    assert ctx.tools == {} and ctx.skills == []
    assert set(ctx.hooks) == HOOKS
    assert (status["state"], status["failure_count"]) == ("policy_invalid", 1)


def test_a_policy_others_can_read_or_a_link_registers_no_tool(tmp_path):
    policy = write_policy(tmp_path / "state" / "policy.json", policy_fields("ipc:///nowhere"), mode=0o644)
    ctx, status = registered(tmp_path / "home", policy)
    assert ctx.tools == {} and status["state"] == "policy_invalid"
    os.chmod(policy, 0o600)
    link = tmp_path / "state" / "link.json"
    link.symlink_to(policy)
    ctx, status = registered(tmp_path / "home2", link)
    assert ctx.tools == {} and status["state"] == "policy_invalid"


def test_the_token_left_unrendered_registers_no_tool(tmp_path):
    ctx, status = registered(tmp_path / "home", None)
    assert ctx.tools == {} and set(ctx.hooks) == HOOKS
    assert status["state"] == "policy_invalid"


@pytest.mark.parametrize(
    ("low", "high", "state"), [(3, 3, "ready"), (4, 4, "ready"), (1, 2, "cli_incompatible"), (5, 6, "cli_incompatible")]
)
def test_the_protocol_range_must_meet_the_clients_window(tmp_path, low, high, state):
    fields = policy_fields("ipc:///nowhere", access_mode="full", protocol_min=low, protocol_max=high)
    ctx, status = registered(tmp_path / "home", write_policy(tmp_path / "state" / "policy.json", fields))
    assert status["state"] == state
    assert len(ctx.tools) == (16 if state == "ready" else 0)
