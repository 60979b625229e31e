"""``hermes profile rename OLD NEW`` run as a real process: its refusals, what follows the new
name, a real gateway under a real supervisord carried over with no turn lost, and what a
``kill -9`` between any two of its steps leaves for the next command to finish or undo."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from fleet.supervisors import supervisord as sv
from hermes_cli import profile_rename
from services.updater import obligations
from shared import homes
from shared.faults import ENV as PAUSE_ENV
from shared.faults import KILL_ENV
from shared.files import read_json, write_json_atomic
from shared.gateways import ops
from shared.layout import GUEST_HANDOFF_FILE
from shared.stop_grace import DEFAULT as STOP_DRAIN_SECONDS
from shared.transport.call_rules import NO_RETRY
from shared.transport.sync_client import connect
from tests.support import mesh_roots, processes
from tests.support.cli import HERMES, hermes, hermes_json
from tests.support.hermes_contract import lock
from tests.support.homes import make_profile
from tests.support.processes import ROOT, python_env

WAIT = 30.0


def rename(root: Path, *args: str, env_extra: dict[str, str] | None = None) -> tuple[int, Any]:
    return hermes_json("profile", "rename", *args, home=root, env_extra=env_extra)


def error_of(document: Any) -> dict[str, Any]:
    return document["error"]


# --- the usage line -------------------------------------------------------------------------


def test_the_usage_line_is_hermes_agents_own():
    done = hermes("profile", "rename", "--help")
    assert done.returncode == 0
    assert done.stdout.splitlines()[0] == "usage: hermes profile rename [-h] old_name new_name"
    case = next(c for c in lock()["cli_checks"] if c["id"] == "profile-rename-help")
    assert all(text in done.stdout for text in case["required_text"])


# --- refusals ---------------------------------------------------------------------------------


@pytest.fixture
def install(root: Path) -> Path:
    make_profile(root, "coder")
    make_profile(root, "writer")
    return root


@pytest.mark.parametrize(
    ("args", "code", "field"),
    [
        (("ghost", "newname"), "profile_not_found", "old_name"),
        (("coder", "writer"), "profile_exists", "new_name"),
        (("coder", "Bad-Name"), "invalid_profile_name", "new_name"),
        (("coder", "coder"), "profile_rename_same_name", "new_name"),
        (("default", "newname"), "profile_reserved", "old_name"),
        (("coder", "default"), "profile_reserved", "new_name"),
    ],
)
def test_a_refused_rename_names_its_field_and_changes_nothing(install, args, code, field):
    status, document = rename(install, *args)
    assert status == 2
    assert error_of(document)["code"] == code and error_of(document)["detail"]["field"] == field
    assert homes.list_profiles(install) == ["default", "coder", "writer"]
    assert not profile_rename.journal_path(install).exists()


def test_a_profile_whose_gateway_is_on_tcp_is_refused(install):
    status, document = rename(
        install, "coder", "author", env_extra={"HERMES_MESH_TCP": "gateway@coder=tcp://127.0.0.1:7420"}
    )
    assert status == 2 and error_of(document)["code"] == "profile_rename_unsupported"
    assert error_of(document)["detail"] == {"field": "old_name", "name": "coder", "key_name": "gateway@coder"}
    assert homes.list_profiles(install) == ["default", "coder", "writer"]


def test_a_symlink_planted_at_the_new_name_is_refused(install, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (homes.profiles_dir(install) / "planted").symlink_to(target)
    status, document = rename(install, "coder", "planted")
    assert status == 2 and error_of(document)["code"] == "profile_exists"
    assert (homes.profiles_dir(install) / "coder").is_dir() and list(target.iterdir()) == []


def test_a_second_rename_while_one_is_under_way_is_refused(install):
    first = subprocess.Popen(
        [*HERMES, "profile", "rename", "coder", "renamed"],
        env=python_env(HERMES_HOME=str(install), **{PAUSE_ENV: "profile-rename-move_home"}),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stderr is not None
        assert first.stderr.readline() == "paused profile-rename-move_home\n"
        status, document = rename(install, "writer", "author")
        assert status == 2 and error_of(document)["code"] == "profile_busy"
        assert error_of(document)["detail"]["field"] == "lock"
        first.send_signal(signal.SIGUSR1)
        assert first.wait(timeout=WAIT) == 0
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=10)
    assert sorted(homes.list_profiles(install)) == ["default", "renamed", "writer"]


# --- what follows the new name ----------------------------------------------------------------


def owe_everything_to(root: Path, profile: str) -> None:
    """A restart an update owes, a guest handoff and Hermes Agent's active pointer, all naming ``profile``."""
    part = obligations.owed_part("a" * 40, obligations.STALE, "runs other code", "u1")
    obligations.replace_fleet(root, {profile: part, "writer": part})
    handoffs = root / GUEST_HANDOFF_FILE
    handoffs.parent.mkdir(mode=0o700, exist_ok=True)
    write_json_atomic(handoffs, {"version": 1, "records": {"k": {"profile": profile, "state": "pending"}}}, secret=True)
    (root / "active_profile").write_text(f"{profile}\n")


def assert_owed_to(root: Path, profile: str, other: str) -> None:
    assert set(obligations.read_fleet(root)) == {profile, "writer"}
    assert read_json(root / GUEST_HANDOFF_FILE)["records"]["k"]["profile"] == profile
    assert (root / "active_profile").read_text().strip() == profile
    assert other not in homes.list_profiles(root)


def test_a_rename_moves_the_home_and_everything_owed_to_it(install):
    home = homes.profile_home("coder", install)
    (home / "config.yaml").write_text("model: x\n")
    owe_everything_to(install, "coder")

    status, document = rename(install, "coder", "author")

    assert status == 0, document
    assert document["home"] == str(homes.profile_home("author", install))
    assert document["obligations"] == {"restart_owed": True, "handoffs": 1}
    assert document["active_pointer_moved"] is True
    assert (homes.profile_home("author", install) / "config.yaml").read_text() == "model: x\n"
    assert not home.exists()
    assert_owed_to(install, "author", "coder")
    assert not profile_rename.journal_path(install).exists()


# --- kill -9 between steps --------------------------------------------------------------------

# Each point a rename pauses at, and whether a rename killed there is undone or carried through.
PAUSES = [
    (rename_step, "back" if rename_step in (profile_rename.DRAIN, profile_rename.MOVE_HOME) else "forward")
    for rename_step in profile_rename.STEPS
]


def killed_at_pause(root: Path, step: str) -> None:
    proc = subprocess.Popen(
        [*HERMES, "profile", "rename", "coder", "author"],
        env=python_env(HERMES_HOME=str(root), **{PAUSE_ENV: f"profile-rename-{step}"}),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    try:
        assert proc.stderr.readline() == f"paused profile-rename-{step}\n"
    finally:
        proc.kill()
        proc.wait(timeout=10)


def assert_finished_by_next_command(root: Path, direction: str) -> None:
    assert profile_rename.journal_path(root).exists()
    done = hermes("profile", "list", "--json", home=root)
    assert done.returncode == 0, done.stderr
    listed = [p["name"] for p in json.loads(done.stdout)["profiles"]]
    assert not profile_rename.journal_path(root).exists()
    if direction == "back":
        assert "undid the interrupted rename" in done.stderr
        assert listed == ["default", "coder", "writer"]
        assert_owed_to(root, "coder", "author")
    else:
        assert "finished the interrupted rename" in done.stderr
        assert listed == ["default", "author", "writer"]
        assert_owed_to(root, "author", "coder")


@pytest.mark.parametrize(("step", "direction"), PAUSES)
def test_a_rename_killed_between_steps_is_finished_or_undone_by_the_next_command(install, step, direction):
    owe_everything_to(install, "coder")
    killed_at_pause(install, step)
    assert_finished_by_next_command(install, direction)


@pytest.mark.parametrize("kill_at", [1, 2, 3, 4, 5])
def test_a_rename_killed_inside_a_step_is_finished_or_undone_by_running_it_again(install, kill_at):
    # Changes without a gateway: 1 the home's move, 2-4 the obligations, 5 the journal's removal.
    owe_everything_to(install, "coder")
    done = hermes("profile", "rename", "coder", "author", home=install, env_extra={KILL_ENV: str(kill_at)})
    assert done.returncode == -signal.SIGKILL
    again = hermes("profile", "rename", "coder", "author", "--json", home=install)
    if kill_at == 1:  # killed before its home moved: undone, and the rename taken again whole
        assert "undid the interrupted rename of profile coder to author" in again.stderr
        assert again.returncode == 0, again.stdout
    else:  # carried through first, so OLD is no more when the rename is asked again
        assert "finished the interrupted rename of profile coder to author" in again.stderr
        assert again.returncode == 2 and json.loads(again.stdout)["error"]["code"] == "profile_not_found"
    assert not profile_rename.journal_path(install).exists()
    assert_owed_to(install, "author", "coder")


# --- a real gateway under a real supervisord --------------------------------------------------


@pytest.fixture
def mesh() -> Any:
    with mesh_roots.mesh_root("coder", "writer") as root:
        sv.up(root, ["coder"])
        yield root


def gateway_status(root: Path, profile: str) -> dict[str, Any] | None:
    try:
        with connect(homes.endpoint(homes.profile_home(profile, root), ops.SERVICE, create=False), retry=NO_RETRY) as c:
            status = c.call(ops.STATUS, timeout=2.0)
    except Exception:
        return None
    return status if isinstance(status, dict) and status.get("state") == ops.RUNNING else None


def wait_serving(root: Path, profile: str) -> dict[str, Any]:
    return processes.wait_for(lambda: gateway_status(root, profile), timeout=WAIT, what=f"{profile}'s gateway")


def programs(root: Path) -> dict[str, str]:
    return {p.name: p.state for p in sv.status(root).programs}


@pytest.mark.slow
def test_a_supervised_gateway_serves_through_a_rename_and_then_as_the_new_name(mesh):
    before = wait_serving(mesh, "coder")
    # A turn in flight as the rename starts finishes: it is drained, never cut (a supervisor's
    # stop alone would give it STOP_DRAIN_SECONDS, less than it takes).
    turn: dict[str, Any] = {}
    endpoint = homes.endpoint(homes.profile_home("coder", mesh), ops.SERVICE, create=False)

    def long_turn() -> None:
        with connect(endpoint, retry=NO_RETRY) as client:
            turn["answer"] = client.call(ops.TURN, {"text": "hello", "seconds": STOP_DRAIN_SECONDS + 2}, timeout=WAIT)

    worker = threading.Thread(target=long_turn)
    worker.start()
    processes.wait_for(lambda: (gateway_status(mesh, "coder") or {}).get("active_turns"), timeout=WAIT, what="turn")

    status, document = rename(mesh, "coder", "author")
    worker.join(timeout=WAIT)

    assert status == 0, document
    assert turn["answer"]["text"] == "hello" and turn["answer"]["profile"] == "coder"
    after = wait_serving(mesh, "author")
    assert after["profile"] == "author" and after["home"] == str(homes.profile_home("author", mesh))
    assert after["pid"] != before["pid"] and document["gateway"]["pid"] == after["pid"]
    assert document["unit"] == {
        "kind": "supervisord",
        "name": "hermes-gateway-author",
        "scope": "user",
        "replaced": "hermes-gateway-coder",
    }
    assert programs(mesh) == {"hermes-gateway-author": "RUNNING"}
    assert "hermes-gateway-coder" not in (mesh / "mesh" / "supervisord.conf").read_text()
    answer = connect_call(mesh, "author", ops.TURN, {"text": "again"})
    assert answer["profile"] == "author"


def connect_call(root: Path, profile: str, op: Any, args: dict[str, Any]) -> Any:
    with connect(homes.endpoint(homes.profile_home(profile, root), ops.SERVICE, create=False), retry=NO_RETRY) as c:
        return c.call(op, args, timeout=WAIT)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("step", "serving"),
    [
        (profile_rename.MOVE_HOME, "coder"),  # stopped, not moved: undone, OLD started again
        (profile_rename.MOVE_UNITS, "author"),  # moved, its unit still OLD's: carried through
        (profile_rename.START_GATEWAY, "author"),  # everything moved, nothing started yet
    ],
)
def test_a_supervised_rename_killed_between_steps_leaves_a_gateway_serving_after_the_next_command(mesh, step, serving):
    wait_serving(mesh, "coder")
    killed_at_pause(mesh, step)
    done = hermes("profile", "list", home=mesh)
    assert done.returncode == 0, done.stderr
    assert not profile_rename.journal_path(mesh).exists()
    assert wait_serving(mesh, serving)["profile"] == serving
    assert programs(mesh) == {sv.unit_name(serving): "RUNNING"}


@pytest.mark.slow
def test_a_gateway_of_the_gateway_host_is_refused_running_or_stopped():
    with mesh_roots.mesh_root("coder") as root:
        assert hermes("mesh", "up", "--host", "--profiles", "coder", home=root, timeout=120).returncode == 0
        wait_serving(root, "coder")
        for stop in (True, False):
            status, document = rename(root, "coder", "author")
            assert status == 2 and error_of(document)["code"] == "profile_busy", document
            assert "gateway host" in error_of(document)["message"]
            assert homes.profile_home("coder", root).is_dir() and not profile_rename.journal_path(root).exists()
            if stop:  # a stopped gateway of the host is still the host's: its set names the profile
                assert hermes("-p", "coder", "gateway", "stop", home=root, timeout=120).returncode == 0


def test_an_unsupervised_gateway_is_refused_and_keeps_serving(install, gateways):
    gateway = gateways(install, "coder")
    gateway.wait_running()
    status, document = rename(install, "coder", "author")
    assert status == 2 and error_of(document)["code"] == "profile_busy"
    assert error_of(document)["detail"]["pid"] == gateway.pid
    assert homes.profile_home("coder", install).is_dir() and gateway.proc.poll() is None
    assert not profile_rename.journal_path(install).exists()
    os.kill(gateway.pid, signal.SIGTERM)
    gateway.wait_exit()
