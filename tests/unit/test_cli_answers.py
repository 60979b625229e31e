"""The ``hermes`` command's answers and refusals (its text, its --json documents, its exit
codes), run in this process against a temporary home: no service, no child process."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.support.cli import hermes_in_process


def as_json(result: subprocess.CompletedProcess):
    return json.loads(result.stdout)


def test_no_command_and_unknown_command_are_usage_errors(root):
    assert hermes_in_process(home=root).returncode == 2
    assert hermes_in_process("frobnicate", home=root).returncode == 2


@pytest.mark.parametrize(
    "argv",
    [
        ("frobnicate", "--json"),
        ("profile", "list", "--frobnicate", "--json"),
        ("operator", "install", "--access-mode", "everything", "--json"),
        ("logs", "update", "--follow", "--wait", "soon", "--json"),
        ("profile", "create", "--json"),
    ],
)
def test_a_usage_error_under_json_is_one_json_error_document(root, argv):
    result = hermes_in_process(*argv, home=root)
    assert result.returncode == 2
    error = as_json(result)["error"]  # the whole of stdout is one document
    assert error["code"] == "usage_error" and error["message"].startswith("hermes"), error
    assert result.stderr == ""
    text = hermes_in_process(*[word for word in argv if word != "--json"], home=root)
    assert text.returncode == 2 and text.stdout == "" and "error:" in text.stderr


def test_profile_create_list_show_delete(root):
    created = hermes_in_process("profile", "create", "coder", "--json", home=root)
    assert created.returncode == 0, created.stderr
    home = root / "profiles" / "coder"
    assert as_json(created) == {"name": "coder", "home": str(home)}
    assert oct((home / "run").stat().st_mode & 0o777) == "0o700"

    listed = as_json(hermes_in_process("profile", "list", "--json", home=root))
    assert [p["name"] for p in listed["profiles"]] == ["default", "coder"]
    assert listed["active"] == "default"

    shown = as_json(hermes_in_process("profile", "show", "coder", "--json", home=root))
    assert shown["home"] == str(home) and shown["gateway_state"] == {"status": "absent"}

    deleted = hermes_in_process("profile", "delete", "coder", "--yes", home=root)
    assert deleted.returncode == 0, deleted.stderr
    assert not home.exists()
    assert [p["name"] for p in as_json(hermes_in_process("profile", "list", "--json", home=root))["profiles"]] == [
        "default"
    ]


def test_profile_create_on_a_new_machine_makes_the_root_home_and_all_it_makes_0700(short_dir):
    root = short_dir / "new" / "home"  # a new machine: no root home yet, nor its parent
    old = os.umask(0o022)  # the child inherits it
    try:
        created = hermes_in_process("profile", "create", "coder", home=root)
    finally:
        os.umask(old)
    assert created.returncode == 0, created.stderr
    top = short_dir / "new"
    modes = {str(p.relative_to(short_dir)): oct(p.stat().st_mode & 0o777) for p in (top, *top.rglob("*")) if p.is_dir()}
    assert {"new/home", "new/home/profiles", "new/home/profiles/coder/run", "new/home/profiles/coder/logs"} <= set(
        modes
    )
    assert modes == dict.fromkeys(modes, "0o700")


@pytest.mark.parametrize("name", ["Coder", "-x", "a/b", "", "x" * 65, "default"])
def test_profile_create_refuses_bad_or_reserved_names(root, name):
    result = hermes_in_process("profile", "create", "--json", "--", name, home=root)
    assert result.returncode == 2
    assert as_json(result)["error"]["code"] in {"invalid_profile_name", "profile_reserved"}


def test_profile_create_twice_is_refused(root):
    assert hermes_in_process("profile", "create", "coder", home=root).returncode == 0
    again = hermes_in_process("profile", "create", "coder", "--json", home=root)
    assert (again.returncode, as_json(again)["error"]["code"]) == (2, "profile_exists")


def test_profile_operations_are_anchored_on_the_root(root):
    for name in ("coder", "writer"):
        assert hermes_in_process("profile", "create", name, home=root).returncode == 0
    # Launched for a profile (HERMES_HOME is the profile's home), or with -p before or after.
    for args, home in (
        (("profile", "list", "--json"), root / "profiles" / "coder"),
        (("-p", "coder", "profile", "list", "--json"), root),
        (("profile", "list", "--json", "--profile", "coder"), root),
        (("--profile=coder", "profile", "list", "--json"), root),
    ):
        listed = as_json(hermes_in_process(*args, home=home))
        assert listed["root"] == str(root)
        assert listed["active"] == "coder"
        assert [p["name"] for p in listed["profiles"]] == ["default", "coder", "writer"]


def test_unknown_profile_flag_is_refused_before_anything_runs(root):
    result = hermes_in_process("-p", "ghost", "doctor", "--json", home=root)
    assert result.returncode == 2
    assert as_json(result)["error"]["code"] == "profile_not_found"
    assert not (root / "profiles" / "ghost").exists()


def test_delete_needs_confirmation_when_not_interactive(root):
    hermes_in_process("profile", "create", "coder", home=root)
    result = hermes_in_process("profile", "delete", "coder", "--json", home=root)
    assert (result.returncode, as_json(result)["error"]["code"]) == (2, "confirmation_required")
    assert (root / "profiles" / "coder").is_dir()


def test_doctor_on_a_fresh_home_passes(root):
    result = hermes_in_process("doctor", "--json", home=root)
    assert result.returncode == 0, result.stdout
    report = as_json(result)
    assert report["ok"] is True
    names = {c["name"] for c in report["checks"]}
    assert {"python", "dependency zmq", "install", "root home", "profile default: gateway"} <= names


def test_doctor_fails_on_an_unsafe_run_dir(root):
    hermes_in_process("profile", "create", "coder", home=root)
    (root / "profiles" / "coder" / "run").chmod(0o755)
    result = hermes_in_process("doctor", "--json", home=root)
    assert result.returncode == 1
    failed = [c for c in as_json(result)["checks"] if c["status"] == "fail"]
    assert [c["name"] for c in failed] == ["profile coder: run dir"]
    assert "0755" in failed[0]["message"]


def make_profile(root, name):
    (root / "profiles" / name).mkdir(parents=True)


def test_drain_without_a_gateway_is_a_typed_error(root):
    make_profile(root, "coder")
    result = hermes_in_process("-p", "coder", "gateway", "drain", "--json", "--deadline", "1", home=root)
    assert result.returncode == 2  # refused: there is nothing to drain
    assert json.loads(result.stdout)["error"]["code"] == "gateway_not_running"
