"""The version gate through the package's probe, the doctor's full inventory, and the package
commands' selectors, as an operator meets them."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

from hermes_cli.operator.doctor import MESH_CHECKS, TARGET_CHECKS
from runtime_package import manifests
from tests.e2e.test_operator_integration import MANAGE, tree_bytes
from tests.support.hermes_wrappers import speaking
from tests.support.runtime_package import PackageKit

WORK = ("--hermes-profile", "work")
VENV = Path(sys.executable).parent.parent  # whose Python has the payload's imports


@pytest.fixture
def kit(tmp_path):
    kit = PackageKit(tmp_path)
    kit.install_package()
    return kit


@pytest.fixture
def work(root):
    path = root / "profiles" / "work"
    path.mkdir(parents=True)
    return path


def fake_hermes(directory: Path, version_output: str, state: Path | None = None) -> Path:
    """A Hermes whose ``--version`` prints ``version_output`` (or hangs) and which speaks the
    real shapes for the rest, beside this checkout's Python; its enablement kept in ``state``."""
    answer = "exec sleep 30" if version_output == "hang" else f"printf '%s\\n' {shlex.quote(version_output)}"
    return speaking(directory / "fake-hermes", VENV, state or directory / "fake-hermes-enabled", version=answer)


@pytest.mark.parametrize(
    ("printed", "code"),
    [
        ("Hermes Agent v0.19.9 (2026.7.1)", "hermes_version_unsupported"),
        ("Hermes Agent v1.0.0 (2027.1.1)", "hermes_version_unsupported"),
        ("Hermes Agent v0.20.0-rc1 (2026.8.1)", "hermes_version_unreadable"),
        ("hermes, some version", "hermes_version_unreadable"),
        ("hang", "hermes_version_unreadable"),
    ],
)
def test_a_hermes_outside_the_packages_range_is_refused_and_nothing_changes(kit, root, work, tmp_path, printed, code):
    fake = fake_hermes(tmp_path, printed)
    before = tree_bytes(work, kit.state / "integrations")
    answer, data = kit.cli_json("operator", "install", *WORK, *MANAGE, "--hermes-bin", str(fake), home=root)
    assert answer == 2 and data["error"]["code"] == code, data
    assert tree_bytes(work, kit.state / "integrations") == before


def test_the_last_release_below_the_next_major_is_accepted_and_a_non_executable_is_not(kit, root, work, tmp_path):
    fake = fake_hermes(tmp_path, "Hermes Agent v0.99.99 (2027.6.1)")
    code, data = kit.cli_json("operator", "install", *WORK, *MANAGE, "--hermes-bin", str(fake), home=root)
    assert code == 0 and data["hermes"]["version"] == "0.99.99", data
    os.chmod(fake, 0o644)
    code, data = kit.cli_json("operator", "update", *WORK, "--hermes-bin", str(fake), home=root)
    assert code == 2 and data["error"]["code"] == "hermes_not_executable"
    assert data["error"]["detail"] == {"flag": "--hermes-bin", "reason": "not_executable"}
    code, data = kit.cli_json("operator", "status", *WORK, "--hermes-bin", str(fake), home=root)
    assert code == 0 and data["hermes"]["accepted"] is False and data["installed"]
    assert (data["enabled"], data["plugin_state_error"]) == (False, "hermes_not_executable"), "it is not run"


def test_doctor_lists_the_whole_inventory_in_order_and_a_healthy_install_passes_it(kit, root, work):
    assert kit.cli("operator", "install", *WORK, *MANAGE, home=root).returncode == 0
    _, data = kit.cli_json("operator", "doctor", *WORK, home=root)
    assert [c["code"] for c in data["checks"]] == [*TARGET_CHECKS, *MESH_CHECKS]
    target = {c["code"]: c["status"] for c in data["checks"] if c["code"] in TARGET_CHECKS}
    # Its verdict includes a latency bound, which a loaded machine may miss: ran, not judged here.
    assert target.pop("hook_registration") in ("pass", "fail")
    assert set(target.values()) == {"pass"}, target
    assert all(c["recovery_hint"] for c in data["checks"] if c["code"] != "asset_source")
    assert data["package_source_error"] is None and data["provenance"]["source"] == "package"
    _, bare = kit.cli_json("operator", "doctor", home=root)
    assert {c["status"] for c in bare["checks"] if c["code"] in TARGET_CHECKS} == {"not_run"}
    assert "findings" in bare


def test_doctor_fails_each_finding_it_can_see_without_changing_anything(kit, root, work):
    code, data = kit.cli_json("operator", "install", *WORK, *MANAGE, home=root)
    assert code == 0, data
    os.chmod(data["policy"]["path"], 0o644)
    (work / "plugins" / ".pohunek-stage-feedbeef").mkdir()
    before = tree_bytes(work, kit.state)
    code, doctor = kit.cli_json("operator", "doctor", *WORK, home=root)
    failed = {c["code"] for c in doctor["checks"] if c["status"] == "fail"}
    assert code == 1 and {"policy_schema_permissions", "stale_stage"} <= failed, failed
    assert "asset_integrity" not in failed
    assert tree_bytes(work, kit.state) == before


def test_package_selectors_never_guess(kit):
    newer = kit.build(kit.tree(version="1.0.1"))
    kit.install_package(newer, sequence=2)
    code, listed = kit.cli_json("operator", "package", "list")
    assert code == 0
    assert sorted((p["version"], p["enabled"], p["selected"]) for p in listed["packages"]) == [
        ("1.0.0", True, True),
        ("1.0.1", True, False),
    ]
    code, data = kit.cli_json("operator", "package", "select", manifests.PACKAGE_ID)
    assert code == 2 and data["error"]["code"] == "plugin_selector_ambiguous"
    code, data = kit.cli_json("operator", "package", "select", "pohunek.runtime.other", "--version", "1.0.0")
    assert code == 2 and data["error"]["code"] == "plugin_not_installed"
    code, data = kit.cli_json("operator", "package", "disable", manifests.PACKAGE_ID, "--version", "1.0.1")
    assert code == 0 and data["enabled"] is False
    code, data = kit.cli_json("operator", "package", "select", manifests.PACKAGE_ID, "--version", "1.0.1")
    assert code == 2 and data["error"]["code"] == "plugin_disabled"
    code, report = kit.cli_json("operator", "package", "doctor")
    assert code == 0 and report["ok"] and len(report["roots"]) == 2


def test_a_package_install_without_a_trust_anchor_is_refused(kit, tmp_path):
    path = kit.build(kit.tree(version="1.0.2"))
    catalog = kit.sign([path], sequence=3)
    code, data = kit.cli_json(
        "operator",
        "package",
        "install",
        str(path),
        "--catalog",
        str(catalog),
        env_extra={"POHUNEK_TRUST_ANCHOR": str(tmp_path / "no-anchor.json")},
    )
    assert code == 2 and data["error"]["code"] == "official_trust_unavailable"
