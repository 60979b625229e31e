"""Where the installed plugin comes from: the four source errors, the provenance walk, modified
installs, and tampering with a packaged or installed byte."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hermes_cli import plugin_host
from hermes_cli.operator.target import Target, policy_path
from runtime_package import manifests
from tests.e2e.test_operator_integration import MANAGE, tree_bytes
from tests.support.operator_plugin import policy_fields, write_policy
from tests.support.runtime_package import SOURCE, PackageKit

WORK = ("--hermes-profile", "work")


@pytest.fixture
def kit(tmp_path):
    return PackageKit(tmp_path)


@pytest.fixture
def work(root):
    path = root / "profiles" / "work"
    path.mkdir(parents=True)
    return path


def status(kit, root):
    code, data = kit.cli_json("operator", "status", *WORK, home=root)
    assert code == 0, data
    return data


def doctor_checks(kit, root) -> dict[str, dict]:
    _, data = kit.cli_json("operator", "doctor", *WORK, home=root)
    return {check["code"]: check for check in data["checks"]}


def package_root(kit, digest: str) -> Path:
    return kit.state / "plugins" / "packages" / digest.removeprefix("sha256:") / "files"


def test_no_package_refuses_install_and_update_and_changes_nothing(kit, root, work):
    before = tree_bytes(root, kit.state)
    for verb, extra in (("install", MANAGE), ("update", ())):
        code, data = kit.cli_json("operator", verb, *WORK, *extra, home=root)
        assert code == 2 and data["error"]["code"] == "hermes_package_not_installed", data
        assert "signed catalog" in data["error"]["detail"]["hint"]
    assert tree_bytes(root, kit.state) == before
    data = status(kit, root)
    assert data["package_source_error"] == "hermes_package_not_installed" and data["provenance"] is None
    checks = doctor_checks(kit, root)
    assert checks["asset_source"]["status"] == "fail" and "signed catalog" in checks["asset_source"]["recovery_hint"]


def test_a_disabled_package_is_not_selected_and_a_broken_registry_is_unreadable(kit, root, work):
    kit.install_package()
    assert kit.cli("operator", "package", "disable", manifests.PACKAGE_ID).returncode == 0
    code, data = kit.cli_json("operator", "install", *WORK, *MANAGE, home=root)
    assert code == 2 and data["error"]["code"] == "hermes_package_not_selected"
    assert status(kit, root)["package_source_error"] == "hermes_package_not_selected"
    record = kit.state / "plugins" / "registry.json"
    record.write_text("{not json")
    code, data = kit.cli_json("operator", "install", *WORK, *MANAGE, home=root)
    assert code == 2 and data["error"]["code"] == "hermes_package_registry_unreadable"
    assert record.read_text() == "{not json"
    checks = doctor_checks(kit, root)
    assert checks["asset_source"]["status"] == "fail" and "package doctor" in checks["asset_source"]["recovery_hint"]


def test_a_package_root_changed_after_install_is_an_invalid_asset(kit, root, work):
    digest = kit.install_package()["digest"]
    tools = package_root(kit, digest) / "operator" / "pohunek" / "tools.py"
    tools.write_bytes(tools.read_bytes() + b"\n# changed\n")
    before = tree_bytes(root)
    code, data = kit.cli_json("operator", "install", *WORK, *MANAGE, home=root)
    assert code == 2 and data["error"]["code"] == "hermes_invalid_asset"
    assert tree_bytes(root) == before
    assert status(kit, root)["package_source_error"] == "hermes_invalid_asset"


@pytest.mark.parametrize("change", ["payload_edited", "file_added", "placeholder_twice"])
def test_a_package_whose_payload_breaks_its_sidecar_is_refused_at_package_install(kit, change):
    directory = kit.tree()
    init = directory / "operator" / "pohunek" / "__init__.py"
    if change == "payload_edited":
        init.write_bytes(init.read_bytes() + b"\n")
    elif change == "file_added":
        (directory / "operator" / "pohunek" / "extra.py").write_text("")
    else:
        init.write_text(init.read_text() + f"\n_ = {manifests.TOKEN}\n")
        from tests.support.runtime_package import refresh_operator_manifest

        refresh_operator_manifest(directory)
    path = kit.build(directory)
    code, data = kit.cli_json("operator", "package", "install", str(path), "--catalog", str(kit.sign([path])))
    assert code == 2 and data["error"]["code"] == "hermes_invalid_asset", data
    assert (
        not (kit.state / "plugins" / "registry.json").exists()
        or not json.loads((kit.state / "plugins" / "registry.json").read_text())["packages"]
    )


def test_a_flipped_archive_byte_and_a_rolled_back_or_expired_catalog_are_refused(kit):
    path = kit.build()
    tampered = path.with_name("tampered.tar.zst")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    tampered.write_bytes(bytes(data))
    code, out = kit.cli_json("operator", "package", "install", str(tampered), "--catalog", str(kit.sign([path])))
    assert code == 2 and out["error"]["code"] in ("package_archive_invalid", "package_not_authorized"), out
    code, out = kit.cli_json(
        "operator", "package", "install", str(path), "--catalog", str(kit.sign([path], expires_in=-1))
    )
    assert code == 2 and out["error"]["code"] == "catalog_expired"
    kit.install_package(path, sequence=5)
    newer = kit.build(kit.tree(version="1.0.1"))
    code, out = kit.cli_json(
        "operator", "package", "install", str(newer), "--catalog", str(kit.sign([newer], sequence=4))
    )
    assert code == 2 and out["error"]["code"] == "catalog_rollback"
    kit.install_package(newer, sequence=5)  # an equal sequence is accepted


def test_the_high_water_mark_is_kept_only_after_an_install_commits(kit):
    good = kit.build()
    broken = kit.tree()
    (broken / "operator" / "pohunek" / "extra.py").write_text("")  # after the manifest: unlisted
    bad = kit.build(broken)
    code, out = kit.cli_json("operator", "package", "install", str(bad), "--catalog", str(kit.sign([bad], sequence=9)))
    assert code == 2, out
    kit.install_package(good, sequence=3)  # 9 was never recorded
    state = json.loads((kit.state / "plugins" / "catalog-state.json").read_text())
    assert state["sequence"] == 3


def embedded_install(kit, root, work) -> Path:
    """What an older renderer left: the payload from the copy it carried, a version-1 marker,
    where it put it (``plugins/pohunek``)."""
    target = Target("profile", "work", work)
    policy = policy_path(kit.state, target)
    write_policy(policy, policy_fields("ipc:///tmp/pohunekd.ctl"))
    files = {
        p.relative_to(SOURCE).as_posix(): p.read_bytes()
        for p in SOURCE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    runtime = manifests.runtime_manifest(files)
    rendered = manifests.render(files, manifests.operator_manifest(files, runtime), str(policy))
    plugin = work / "plugins" / "pohunek"
    for rel, data in rendered.items():
        (plugin / rel).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        (plugin / rel).write_bytes(data)
        os.chmod(plugin / rel, 0o600)
    import hashlib

    marker = {
        "version": 1,
        "hermes_home": str(work),
        "policy_path": str(policy),
        "assets": {rel: hashlib.sha256(data).hexdigest() for rel, data in rendered.items()},
    }
    (plugin / ".pohunek-owned.json").write_text(json.dumps(marker))
    plugin_host.set_enabled(work, "pohunek", True)
    return plugin


def test_the_provenance_walk_from_embedded_to_package_to_outdated_to_null(kit, root, work):
    embedded_install(kit, root, work)
    data = status(kit, root)
    assert data["provenance"] == {"source": "embedded"} and data["installed"]
    assert data["package_source_error"] == "hermes_package_not_installed" and not data["outdated"]
    first = kit.install_package()
    data = status(kit, root)
    assert data["outdated"] and data["provenance"] == {"source": "embedded"}, "never migrated automatically"
    code, data = kit.cli_json("operator", "update", *WORK, home=root)
    assert code == 0, data
    assert data["provenance"]["source"] == "package" and data["provenance"]["package_digest"] == first["digest"]
    assert not data["outdated"] and data["policy"]["access_mode"] == "manage"
    assert data["plugin_root"] == str(work / "plugins" / "operators" / "pohunek")
    assert not (work / "plugins" / "pohunek").exists(), "moved to the category directory"
    newer = kit.build(kit.tree(version="1.0.1"))
    kit.install_package(newer, sequence=2)
    assert kit.cli("operator", "package", "select", manifests.PACKAGE_ID, "--version", "1.0.1").returncode == 0
    data = status(kit, root)
    assert data["outdated"] and not data["modified"], "outdated although no file was edited"
    assert doctor_checks(kit, root)["asset_current"]["status"] == "fail"
    assert kit.cli("operator", "package", "uninstall", manifests.PACKAGE_ID, "--version", "1.0.1").returncode == 0
    data = status(kit, root)
    assert data["package_source_missing"] and not data["outdated"]
    code, data = kit.cli_json("operator", "uninstall", *WORK, home=root)
    assert code == 0 and data["provenance"] is None and not data["installed"]
    assert plugin_host.enabled_names(work) == []


def test_a_modified_install_needs_confirmation_and_unmanaged_files_are_left(kit, root, work):
    kit.install_package()
    assert kit.cli("operator", "install", *WORK, *MANAGE, home=root).returncode == 0
    plugin = work / "plugins" / "operators" / "pohunek"
    tools = plugin / "tools.py"
    tools.write_bytes(tools.read_bytes() + b"# local edit\n")
    assert status(kit, root)["modified"]
    assert doctor_checks(kit, root)["asset_integrity"]["status"] == "fail"
    code, data = kit.cli_json("operator", "update", *WORK, home=root)
    assert code == 2 and data["error"]["code"] == "confirmation_required"
    assert tools.read_bytes().endswith(b"# local edit\n")
    code, data = kit.cli_json("operator", "update", *WORK, "--confirm-modified", home=root)
    assert code == 0 and not data["modified"], data
    (plugin / "notes.txt").write_text("the owner's")
    assert status(kit, root)["modified"]
    code, data = kit.cli_json("operator", "uninstall", *WORK, home=root)
    assert code == 2 and data["error"]["code"] == "confirmation_required"
    code, data = kit.cli_json("operator", "uninstall", *WORK, "--confirm-modified", home=root)
    assert code == 0 and data["provenance"] is None
    assert sorted(p.name for p in plugin.iterdir()) == ["notes.txt"]


def test_uninstall_needs_no_package(kit, root, work):
    kit.install_package()
    code, data = kit.cli_json("operator", "install", *WORK, *MANAGE, home=root)
    assert code == 0, data
    policy = Path(data["policy"]["path"])
    (kit.state / "plugins" / "registry.json").write_text("corrupt")
    code, data = kit.cli_json("operator", "uninstall", *WORK, home=root)
    assert code == 0 and data["provenance"] is None, data
    assert not (work / "plugins" / "operators" / "pohunek").exists() and not policy.exists()
