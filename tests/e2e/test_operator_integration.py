"""``hermes operator install|status|doctor|update|uninstall`` as an operator runs them: real CLI
processes, a package built from the source tree and signed with a key made for the run, real
Hermes homes, the real plugin host loading the result."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from hermes_cli import plugin_host
from hermes_cli.operator import hermes_bin
from tests.support.runtime_package import PackageKit

MANAGE = ("--access-mode", "manage", "--allow-host", "local")


@pytest.fixture
def kit(tmp_path):
    return PackageKit(tmp_path)


@pytest.fixture
def home(root):
    (root / "profiles" / "work").mkdir(parents=True)
    return root


def tree_bytes(*roots: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``roots`` with its mode and bytes: what "nothing changed" compares. A
    target's lock file is left out: it names the last command that held it."""
    seen: dict[str, tuple[int, bytes]] = {}
    for base in roots:
        for path in sorted(base.rglob("*")) if base.exists() else []:
            if path.is_file() and not path.is_symlink() and path.suffix != ".lock":
                seen[str(path)] = (stat.S_IMODE(path.stat().st_mode), path.read_bytes())
    return seen


def test_the_seeds_first_install_targets_the_default_profile_explicitly(kit, home):
    installed = kit.install_package()
    code, data = kit.cli_json(
        "operator", "install", "--agent", "hermes", "--hermes-profile", "default", *MANAGE, home=home
    )
    assert code == 0, data
    assert data["installed"] and data["enabled"] and not data["modified"] and not data["outdated"]
    assert data["provenance"] == {
        "source": "package",
        "package_id": "pohunek.runtime.hermes",
        "package_digest": installed["digest"],
    }
    assert data["target"] == {"kind": "profile", "profile": "default", "hermes_home": str(home)}
    assert data["policy"]["access_mode"] == "manage" and data["policy"]["allowed_hosts"] == ["local"]
    assert data["policy"]["bounds"]["request_timeout_ms"] == 45_000
    assert data["hermes"] == {"bin": data["hermes"]["bin"], "version": "0.20.0", "accepted": True}
    plugin = home / "plugins" / "operators" / "pohunek"
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in plugin.rglob("*") if p.is_file())
    policy = Path(data["policy"]["path"])
    assert not policy.is_relative_to(home) and stat.S_IMODE(policy.stat().st_mode) == 0o600
    assert str(policy) in (plugin / "__init__.py").read_text()
    assert hermes_bin.plugin_state(hermes_bin.default_bin(), home) == "enabled"
    loaded = plugin_host.PluginHost.load(home)
    assert len(loaded.tools) == 14 and len(loaded.hooks) == 7


def test_the_seeds_second_install_is_refused_until_the_request_timeout_is_lowered(kit, home):
    kit.install_package()
    bounds = ("--tool-timeout-ms", "8000", "--max-output-bytes", "262144", "--max-screen-bytes", "65536")
    args = ("operator", "install", "--agent", "hermes", "--hermes-profile", "work", "--access-mode", "full")
    args += ("--allow-host", "local", "--allow-host", "desktop", *bounds, "--max-concurrency", "1")
    before = tree_bytes(home, kit.state)
    code, data = kit.cli_json(*args, home=home)
    assert code == 2 and data["error"]["code"] == "hermes_invalid_policy"
    assert "--request-timeout-ms" in data["error"]["detail"]["hint"]
    assert tree_bytes(home, kit.state) == before
    code, data = kit.cli_json(*args, "--request-timeout-ms", "5000", home=home)
    assert code == 0, data
    assert data["policy"]["bounds"] == {
        "tool_timeout_ms": 8000,
        "request_timeout_ms": 5000,
        "max_output_bytes": 262144,
        "max_screen_bytes": 65536,
        "max_concurrency": 1,
    }
    assert data["policy"]["allowed_hosts"] == ["local", "desktop"]
    assert len(plugin_host.PluginHost.load(home / "profiles" / "work").tools) == 16


def test_the_seeds_third_install_needs_the_wildcard_confirmed_separately(kit, tmp_path):
    kit.install_package()
    custom = tmp_path / "owner-private-hermes-home"
    custom.mkdir(mode=0o700)
    args = ("operator", "install", "--agent", "hermes", "--hermes-home", str(custom), "--access-mode", "read_only")
    code, data = kit.cli_json(*args, "--allow-host", "*")
    assert code == 2 and data["error"]["code"] == "confirmation_required"
    code, data = kit.cli_json(*args, "--allow-host", "local", "--confirm-wildcard")
    assert code == 2 and data["error"]["code"] == "hermes_invalid_policy"
    assert not (custom / "plugins" / "operators" / "pohunek").exists()
    code, data = kit.cli_json(*args, "--allow-host", "*", "--confirm-wildcard")
    assert code == 0, data
    assert data["target"] == {"kind": "home", "hermes_home": str(custom)}
    assert data["policy"]["wildcard"] is True and data["policy"]["access_mode"] == "read_only"
    assert len(plugin_host.PluginHost.load(custom).tools) == 7
    for verb in ("status", "doctor", "update", "uninstall"):
        code, data = kit.cli_json("operator", verb, "--agent", "hermes", "--hermes-home", str(custom))
        assert code in (0, 1) and "error" not in data, (verb, data)
    assert data["provenance"] is None and not (custom / "plugins" / "operators" / "pohunek").exists()


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (("--tool-timeout-ms", "0"), "tool_timeout_ms"),
        (("--tool-timeout-ms", "60001"), "tool_timeout_ms"),
        (("--max-output-bytes", "1e3"), "max_output_bytes"),
        (("--max-concurrency", "9"), "max_concurrency"),
        (("--max-concurrency", "1", "--max-concurrency", "2"), "max_concurrency"),
        (("--request-timeout-ms", "60000"), "request_timeout_ms"),
        (("--allow-host", "10.0.0.1"), "allowed_hosts"),
    ],
)
def test_a_bad_bound_or_host_is_the_typed_policy_error(kit, home, flags, field):
    code, data = kit.cli_json("operator", "install", "--hermes-profile", "work", *MANAGE, *flags, home=home)
    assert code == 2 and data["error"]["code"] == "hermes_invalid_policy"
    assert data["error"]["detail"]["field"] == field
    assert not (home / "profiles" / "work" / "plugins").exists()


def test_targets_that_are_ambiguous_missing_or_unsafe_are_refused(kit, home, tmp_path):
    kit.install_package()
    both = kit.cli(
        "operator", "install", "--hermes-profile", "work", "--hermes-home", str(tmp_path), *MANAGE, home=home
    )
    assert both.returncode == 2 and "give one" in both.stderr
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    link = tmp_path / "link"
    link.symlink_to(loose)
    for flags, reason in (
        (("--hermes-home", "relative/home"), "relative"),
        (("--hermes-home", str(loose)), "permissions"),
        (("--hermes-home", str(link)), "symlink"),
        (("--hermes-home", "/"), "too_broad"),
        (("--hermes-profile", "ghost"), None),
        ((), "no_target"),
    ):
        code, data = kit.cli_json("operator", "install", *flags, *MANAGE, home=home)
        assert code == 2, (flags, data)
        assert data["error"]["code"] in ("hermes_target_invalid", "profile_not_found"), data
        if reason:
            assert data["error"]["detail"]["reason"] == reason


def test_codex_and_claude_are_typed_refusals(kit, home):
    code, data = kit.cli_json("operator", "update", "--agent", "codex", "--hermes-profile", "work", home=home)
    assert code == 2 and data["error"]["code"] == "integration_action_unsupported"
    code, data = kit.cli_json(
        "operator", "install", "--agent", "claude", "--hermes-profile", "work", *MANAGE, home=home
    )
    assert code == 2 and data["error"]["code"] == "agent_not_served"


def test_a_status_flag_the_command_does_not_take_is_a_usage_error(kit, home):
    done = kit.cli("operator", "status", "--hermes-profile", "work", "--tool-timeout-ms", "5", home=home)
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_update_inherits_each_bound_and_setting_and_refreshes_the_protocol_range(kit, home):
    kit.install_package()
    target = ("--hermes-profile", "work")
    code, data = kit.cli_json(
        "operator",
        "install",
        *target,
        "--access-mode",
        "full",
        "--allow-host",
        "desktop",
        "--max-concurrency",
        "2",
        "--tool-timeout-ms",
        "50000",
        home=home,
    )
    assert code == 0, data
    policy = Path(data["policy"]["path"])
    fields = json.loads(policy.read_text())
    fields.update(protocol_max=3, daemon_endpoint="ipc:///kept/endpoint.ctl")
    policy.write_text(json.dumps(fields))
    code, data = kit.cli_json("operator", "update", *target, "--max-screen-bytes", "1000", home=home)
    assert code == 0, data
    assert data["policy"]["bounds"] == {
        "tool_timeout_ms": 50000,
        "request_timeout_ms": 45000,
        "max_output_bytes": 1_048_576,
        "max_screen_bytes": 1000,
        "max_concurrency": 2,
    }
    assert data["policy"]["protocol"] == {"min": 3, "max": 4}
    assert data["policy"]["daemon_endpoint"] == "ipc:///kept/endpoint.ctl"
    assert data["policy"]["access_mode"] == "full" and data["policy"]["allowed_hosts"] == ["desktop"]


def test_install_makes_the_access_mode_and_the_allowlist_explicit(kit, home):
    kit.install_package()
    for flags, field in ((("--allow-host", "local"), "access_mode"), (("--access-mode", "manage"), "allowed_hosts")):
        code, data = kit.cli_json("operator", "install", "--hermes-profile", "work", *flags, home=home)
        assert code == 2 and data["error"]["code"] == "hermes_invalid_policy", data
        assert data["error"]["detail"]["field"] == field
    assert not (home / "profiles" / "work" / "plugins" / "operators" / "pohunek").exists()
