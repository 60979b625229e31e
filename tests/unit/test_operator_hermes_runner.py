"""The target Hermes as the installer judges it: its executable before it runs, the Python beside
it that the probe runs in, and ``plugins list --json`` read as the operator reads it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hermes_cli.operator import hermes_bin
from hermes_cli.operator.hermes_bin import HermesUnusable, parse_plugin_state

SECRET = "sk-live the owner's password"


def record(**fields: object) -> dict[str, object]:
    return {"name": "pohunek", "status": "enabled", "version": "1", "description": "", "source": "user", **fields}


def listed(*records: object, after: str = "") -> bytes:
    return (json.dumps(list(records), indent=2) + "\n" + after).encode()


@pytest.mark.parametrize("status", ["enabled", "disabled", "not enabled"])
def test_the_one_user_pohunek_record_gives_its_state_whatever_else_is_listed(status):
    others = [record(name="disk-cleanup", source="bundled", status="not enabled"), record(name="x", status="odd")]
    assert parse_plugin_state(listed(*others, record(status=status))) == status


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (listed(record(), record(status="disabled")), "duplicate"),
        (listed(record(source="bundled")), "source"),
        (listed(record(source="git")), "source"),
        (listed(record(), after="garbage"), "trailing_data"),
        (listed(record(), after="[]"), "trailing_data"),
        (listed(record(status="Enabled")), "status"),
        (listed(record(name="other")), "missing"),
        (listed(), "missing"),
        (listed(record(source=None)), "record_invalid"),
        (listed({"name": "pohunek", "status": "enabled"}), "record_invalid"),
        (listed("pohunek"), "record_invalid"),
        (json.dumps({"plugins": [record()]}).encode(), "not_a_list"),
        (b"No plugins installed.\n", "not_json"),
        (b"", "not_json"),
        (b"\xff[]", "not_json"),
        (b"[" * 100_000, "not_json"),
        (SECRET.encode(), "not_json"),
    ],
)
def test_anything_else_is_the_typed_state_error_naming_why_never_what_was_printed(raw, reason):
    with pytest.raises(HermesUnusable) as refused:
        parse_plugin_state(raw)
    assert refused.value.code == "hermes_plugin_state_invalid" and refused.value.detail == {"reason": reason}
    assert SECRET not in refused.value.message


def fake(directory: Path, body: str) -> str:
    """A Hermes executable of yours, private, running ``body``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "hermes"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o700)
    return str(path)


def refusal(path: str) -> dict:
    with pytest.raises(HermesUnusable) as refused:
        hermes_bin.check_bin(path)
    assert refused.value.code == "hermes_not_executable" and "--hermes-bin" in refused.value.message
    return refused.value.detail


def test_the_executable_is_judged_as_the_operator_judges_it(tmp_path):
    path = fake(tmp_path / "bin", "exit 0")
    assert hermes_bin.check_bin(path) == path
    assert refusal("bin/hermes") == {"flag": "--hermes-bin", "reason": "relative"}
    (tmp_path / "linked").symlink_to(tmp_path / "bin")
    assert refusal(str(tmp_path / "linked" / "hermes"))["reason"] == "symlink"
    (tmp_path / "link").symlink_to(path)
    assert refusal(str(tmp_path / "link"))["reason"] == "symlink"
    assert refusal(str(tmp_path / "bin" / ".." / "bin" / "hermes"))["reason"] == "not_canonical"
    assert refusal(str(tmp_path / "missing"))["reason"] == "missing"
    assert refusal(str(tmp_path / "bin"))["reason"] == "not_executable"
    os.chmod(path, 0o720)
    assert refusal(path)["reason"] == "writable"
    os.chmod(path, 0o700)
    os.chmod(tmp_path / "bin", 0o777)
    assert refusal(path)["reason"] == "writable"
    os.chmod(tmp_path / "bin", 0o700)
    os.chmod(path, 0o600)
    assert refusal(path)["reason"] == "not_executable"


def test_the_probes_python_is_the_one_beside_the_executable_and_must_be_safe(tmp_path):
    path = fake(tmp_path / "bin", "exit 0")
    with pytest.raises(HermesUnusable) as refused:
        hermes_bin.sibling_python(path)
    assert refused.value.code == "hermes_runtime_invalid" and refused.value.detail["flag"] == "--hermes-bin"
    python = tmp_path / "bin" / "python3"
    python.symlink_to(os.path.realpath("/proc/self/exe"))  # a venv's link to its interpreter
    assert hermes_bin.sibling_python(path) == str(python)
    python.unlink()
    python.write_text("#!/bin/sh\n")
    python.chmod(0o722)
    with pytest.raises(HermesUnusable):
        hermes_bin.sibling_python(path)
