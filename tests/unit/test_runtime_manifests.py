"""The Hermes package's contract: runtime.toml's identity and probe, operator.toml's closed
allowlist, the one placeholder, and rendering."""

from __future__ import annotations

import json

import pytest

from runtime_package import manifests
from tests.support.processes import ROOT

SOURCE = ROOT / "runtime-packages" / "hermes"
INIT = manifests.PLACEHOLDER_FILE


def source_files() -> dict[str, bytes]:
    return {
        p.relative_to(SOURCE).as_posix(): p.read_bytes()
        for p in sorted(SOURCE.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def closed(files: dict[str, bytes]) -> dict[str, bytes]:
    """``files`` with operator.toml rewritten to list them as they are."""
    payload = {k: v for k, v in files.items() if k != manifests.OPERATOR_MANIFEST}
    return {**payload, manifests.OPERATOR_MANIFEST: manifests.operator_manifest_text(payload).encode()}


def check(files: dict[str, bytes]) -> manifests.OperatorManifest:
    return manifests.operator_manifest(files, manifests.runtime_manifest(files))


def test_the_committed_operator_manifest_closes_the_payload_as_it_is():
    files = source_files()
    assert files[manifests.OPERATOR_MANIFEST] == closed(files)[manifests.OPERATOR_MANIFEST], (
        "operator.toml is stale: run scripts/build_runtime_package.py --refresh-operator-manifest"
    )
    assert len(check(files).files) == sum(1 for path in files if path.startswith("operator/"))


def rule_of(files: dict[str, bytes]) -> str:
    with pytest.raises(manifests.InvalidAsset) as raised:
        check(files)
    assert raised.value.code == "hermes_invalid_asset"
    return raised.value.detail["rule"]


def test_an_unlisted_a_missing_and_an_altered_payload_file_are_each_refused():
    files = source_files()
    assert rule_of({**files, "operator/pohunek/extra.py": b""}) == "unlisted_file"
    assert rule_of({**files, "operator/pohunek/__pycache__/tools.cpython-311.pyc": b"\0"}) == "unlisted_file"
    assert rule_of({k: v for k, v in files.items() if k != "operator/pohunek/tools.py"}) == "missing_file"
    assert rule_of({**files, "operator/pohunek/tools.py": files["operator/pohunek/tools.py"] + b" "}) == "altered_file"
    assert rule_of({**files, "README.md": b"outside the contract"}) == "unlisted_file"


@pytest.mark.parametrize("where", ["absent", "twice", "another_file"])
def test_the_placeholder_must_be_once_in_its_own_file(where):
    files = source_files()
    token = manifests.TOKEN.encode()
    if where == "absent":
        files[INIT] = files[INIT].replace(token, b"None")
    elif where == "twice":
        files[INIT] += b"\n_again = " + token + b"\n"
    else:
        files["operator/pohunek/hooks.py"] += b"\n# " + token + b"\n"
    assert rule_of(closed(files)) == "placeholder"


def test_runtime_toml_must_describe_the_official_hermes_runtime():
    files = source_files()
    runtime = manifests.runtime_manifest(files)
    assert (runtime.package_id, runtime.runtime_id, runtime.probe.min, runtime.probe.below) == (
        "pohunek.runtime.hermes",
        "hermes",
        (0, 20, 0),
        (1, 0, 0),
    )
    for old, new in (
        (b'id = "pohunek.runtime.hermes"', b'id = "pohunek.runtime.other"'),
        (b'parser = "hermes-agent-v1"', b'parser = "other"'),
        (b'min = "0.20.0"', b'min = "0.20"'),
        (b'min = "0.20.0"', b'min = "2.0.0"'),
        (b'detect_manifest = "detect.toml"', b'detect_manifest = "../detect.toml"'),
    ):
        changed = {**files, "runtime.toml": files["runtime.toml"].replace(old, new, 1)}
        with pytest.raises(manifests.InvalidAsset):
            manifests.runtime_manifest(changed)
    with pytest.raises(manifests.InvalidAsset):
        manifests.runtime_manifest({**files, "runtime.toml": b"\xff not toml"})


def test_rendering_writes_the_policy_path_as_one_string_literal():
    files = source_files()
    path = '/state/pohunek/integrations/hermes/"quoted"/policy.json'
    rendered = manifests.render(files, check(files), path)
    init = rendered["__init__.py"].decode()
    assert manifests.TOKEN not in init and json.dumps(path) in init
    namespace: dict = {}
    exec(compile(f"POLICY_PATH = {json.dumps(path)}", "x", "exec"), namespace)
    assert namespace["POLICY_PATH"] == path
    assert set(rendered) == {p.removeprefix("operator/pohunek/") for p in files if p.startswith("operator/")}
