"""Which home an integration command acts on: judged by its real path and identity, never by its
spelling, and refused when the policy would land inside it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.e2e.test_operator_integration import MANAGE, tree_bytes
from tests.support.runtime_package import PackageKit


@pytest.fixture
def kit(tmp_path):
    return PackageKit(tmp_path)


def private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700)
    os.chmod(path, 0o700)
    return path


def test_your_home_is_refused_in_every_spelling(kit, tmp_path):
    kit.install_package()
    me = private_dir(tmp_path / "me")
    (tmp_path / "alias").symlink_to(tmp_path)
    for spelling in ("/" + str(me), f"{me}/", f"{me}/../me", str(tmp_path / "alias" / "me"), "//"):
        code, data = kit.cli_json(
            "operator", "install", "--hermes-home", spelling, *MANAGE, env_extra={"HOME": str(me)}
        )
        assert code == 2 and data["error"]["code"] == "hermes_target_invalid", (spelling, data)
        assert data["error"]["detail"]["reason"] == "too_broad", (spelling, data)
    assert list(me.iterdir()) == []


def test_every_spelling_of_a_home_is_one_target_with_one_policy(kit, tmp_path):
    kit.install_package()
    custom = private_dir(tmp_path / "custom")
    real = os.path.realpath(custom)
    (tmp_path / "alias").symlink_to(tmp_path)
    code, installed = kit.cli_json("operator", "install", "--hermes-home", str(tmp_path / "alias" / "custom"), *MANAGE)
    assert code == 0, installed
    assert installed["target"] == {"kind": "home", "hermes_home": real}
    for spelling in (real, "/" + real, f"{real}/./", str(tmp_path / "alias" / "custom")):
        code, data = kit.cli_json("operator", "status", "--hermes-home", spelling)
        assert code == 0 and data["target"] == installed["target"], (spelling, data)
        assert data["installed"] and not data["modified"], (spelling, data)
        assert data["policy"]["path"] == installed["policy"]["path"], spelling
    code, data = kit.cli_json("operator", "doctor", "--hermes-home", "/" + real)
    checks = {check["code"]: check["status"] for check in data["checks"]}
    assert checks["plugin_ownership"] == checks["policy_schema_permissions"] == "pass", data


@pytest.mark.parametrize("through_symlink", [False, True], ids=["state", "state-through-a-symlink"])
def test_a_home_that_holds_the_integration_state_is_refused_at_install(tmp_path, through_symlink):
    home = private_dir(tmp_path / "home")
    kit = PackageKit(home)  # the state, and its package registry, are inside the home
    kit.install_package()
    extra = {}
    if through_symlink:
        (tmp_path / "state-link").symlink_to(kit.state)
        extra = {"POHUNEK_STATE_DIR": str(tmp_path / "state-link")}
    before = tree_bytes(home)
    for verb, flags in (("install", MANAGE), ("update", MANAGE)):
        code, data = kit.cli_json("operator", verb, "--hermes-home", str(home), *flags, env_extra=extra)
        assert code == 2 and data["error"]["code"] == "hermes_target_invalid", (verb, data)
        assert data["error"]["detail"]["reason"] == "policy_inside_home", (verb, data)
    assert tree_bytes(home) == before
    assert not (home / "plugins").exists() and not (kit.state / "integrations").exists()
    code, data = kit.cli_json("operator", "doctor", "--hermes-home", str(home), env_extra=extra)
    checks = {c["code"]: c["status"] for c in data["checks"]}
    assert code == 1 and checks["target_safety"] == "fail", data


@pytest.mark.parametrize("verb", ["install", "status", "doctor", "update", "uninstall"])
def test_a_profile_and_a_home_together_are_one_typed_json_refusal(kit, tmp_path, root, verb):
    (root / "profiles" / "work").mkdir(parents=True)
    custom = private_dir(tmp_path / "custom")
    flags = ("--hermes-profile", "work", "--hermes-home", str(custom))
    done = kit.cli("operator", verb, *flags, "--json", home=root)
    assert done.returncode == 2, done
    error = json.loads(done.stdout)["error"]  # the whole of stdout is one document
    assert error["code"] == "hermes_target_invalid" and error["detail"]["reason"] == "two_targets", error
    assert done.stderr == ""
    assert not (custom / "plugins").exists() and not (root / "profiles" / "work" / "plugins").exists()
