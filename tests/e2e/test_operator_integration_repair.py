"""A doctor finding about the policy, repaired by running the very command its hint names: the
repair keeps every setting it was not told to change."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from tests.support.runtime_package import PackageKit

WORK = ("--hermes-profile", "work")
SETTINGS = ("--access-mode", "full", "--allow-host", "desktop", "--max-concurrency", "2")
SETTINGS += ("--tool-timeout-ms", "50000", "--max-output-bytes", "4096")
BOUNDS = {
    "tool_timeout_ms": 50000,
    "request_timeout_ms": 45000,
    "max_output_bytes": 4096,
    "max_screen_bytes": 262144,
    "max_concurrency": 2,
}


@pytest.fixture
def installed(tmp_path, root):
    (root / "profiles" / "work").mkdir(parents=True)
    kit = PackageKit(tmp_path)
    kit.install_package()
    code, data = kit.cli_json("operator", "install", *WORK, *SETTINGS, home=root)
    assert code == 0, data
    return kit, root, Path(data["policy"]["path"])


def doctor(kit, root) -> dict[str, dict]:
    _, data = kit.cli_json("operator", "doctor", *WORK, home=root)
    return {check["code"]: check for check in data["checks"]}


def hinted_command(hint: str) -> list[str]:
    """The ``hermes operator ...`` command a recovery hint names, without ``hermes``."""
    found = re.search(r"`hermes (operator [^`]+)`", hint)
    assert found, hint
    return found.group(1).split()


def stale_protocol(policy: Path) -> None:
    fields = json.loads(policy.read_text())
    fields.update(protocol_min=1, protocol_max=2)  # no overlap with this client's window
    policy.write_text(json.dumps(fields))


@pytest.mark.parametrize(
    ("spoil", "finding"),
    [
        (lambda policy: os.chmod(policy, 0o644), "policy_schema_permissions"),
        (lambda policy: os.chmod(policy, 0o640), "policy_schema_permissions"),
        (stale_protocol, "pohunek_cli_compatibility"),
    ],
    ids=["readable-by-all", "readable-by-group", "stale-protocol-range"],
)
def test_the_hinted_update_repairs_the_policy_and_keeps_every_setting(installed, spoil, finding):
    kit, root, policy = installed
    spoil(policy)
    check = doctor(kit, root)[finding]
    assert check["status"] == "fail", check
    command = hinted_command(check["recovery_hint"])
    assert command[:2] == ["operator", "update"], check
    code, data = kit.cli_json(*command, *WORK, home=root)
    assert code == 0, data
    assert data["policy"]["bounds"] == BOUNDS
    assert data["policy"]["access_mode"] == "full" and data["policy"]["allowed_hosts"] == ["desktop"]
    assert data["policy"]["protocol"] == {"min": 3, "max": 4}
    assert stat.S_IMODE(policy.stat().st_mode) == 0o600
    after = doctor(kit, root)
    assert after["policy_schema_permissions"]["status"] == after["pohunek_cli_compatibility"]["status"] == "pass"


@pytest.mark.parametrize(
    "spoil",
    [lambda policy: os.chmod(policy, 0o664), lambda policy: policy.write_text("{not json")],
    ids=["writable-by-group", "not-json"],
)
def test_a_policy_update_cannot_read_back_is_refused_and_the_hint_names_install(installed, spoil):
    kit, root, policy = installed
    spoil(policy)
    before = (policy.read_bytes(), stat.S_IMODE(policy.stat().st_mode))
    code, data = kit.cli_json(
        "operator", "update", *WORK, "--access-mode", "full", "--allow-host", "desktop", home=root
    )
    assert code == 2 and data["error"]["code"] == "hermes_invalid_policy", data
    assert "hermes operator install" in data["error"]["detail"]["hint"]
    assert (policy.read_bytes(), stat.S_IMODE(policy.stat().st_mode)) == before
    check = doctor(kit, root)["policy_schema_permissions"]
    assert check["status"] == "fail"
    command = hinted_command(check["recovery_hint"])
    assert command[:2] == ["operator", "install"], check
    code, data = kit.cli_json(*command, *WORK, *SETTINGS, home=root)
    assert code == 0, data
    assert data["policy"]["bounds"] == BOUNDS
    assert doctor(kit, root)["policy_schema_permissions"]["status"] == "pass"
