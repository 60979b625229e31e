"""The systemd restart kind: which units are ours, drain first, the budgeted blunt restart.

systemd cannot run on this machine, so ``tests/support/doubles/systemctl`` stands in for it (see its
docstring): it prints what systemd 252 printed (checked here against the captures) and runs
each started unit's gateway as a real process, restarting it as systemd would. The gateways
run a clone of this checkout, so that a commit made in the clone is the new code that a
restart must bring up; ``systemctl`` calls are asserted on through the double's log.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.discovery import discover
from fleet.supervisors import gateway_environment, systemd
from fleet.supervisors.systemd import manager as systemd_manager
from services.updater.restart import restart_fleet, systemd_budget
from services.updater.restart.base import unit_targets
from services.updater.restart.systemd import CLIENT_GAVE_UP, SystemdKind
from services.updater.restart.systemd_budget import restart_budget
from shared import homes
from shared.gateways import ops
from shared.transport.sync_client import SyncClient
from tests.support import DOUBLES
from tests.support.installs import release
from tests.support.systemd_captures import transcript

pytestmark = pytest.mark.root(profiles=("work", "workbench"))

SECOND = 1_000_000  # the double keeps timeouts in microseconds, as systemd does
# The systemctl verbs that only read: the units are found, and nothing is done to them.
READS = {"list-units", "list-unit-files", "show"}


class Systemd:
    """The double's state file and log, seen from the test."""

    def __init__(self, base: Path, code: Path):
        base.mkdir()
        self.state_path = base / "systemctl.json"
        self.log = base / "systemctl.log"
        self.log.touch()
        self.state_path.write_text(
            json.dumps(
                {
                    "log": str(self.log),
                    "dir": str(base),
                    "exec": [sys.executable, "-m", "services.gateway"],
                    "cwd": str(code),
                    "units": {"user": {}, "system": {}},
                    "jobs": {},
                    "pids": [],
                }
            )
        )

    def _update(self, change) -> None:
        with open(f"{self.state_path}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = json.loads(self.state_path.read_text())
            change(state)
            self.state_path.write_text(json.dumps(state))

    def state(self) -> dict:
        return json.loads(self.state_path.read_text())

    def add(self, scope: str, name: str, home: Path | str, *, stop=90 * SECOND, start=90 * SECOND, env=None, **props):
        unit = {
            "Type": "notify",
            "TimeoutStartUSec": start,
            "TimeoutStopUSec": stop,
            "MainPID": 0,
            "Result": "success",
            "NRestarts": 0,
            "ExecMainStatus": 0,
            "Environment": {**gateway_environment(Path(home), systemd.KIND), **(env or {})},
            "LoadState": "loaded",
            "ActiveState": "inactive",
            "SubState": "dead",
            **props,
        }
        self._update(lambda state: state["units"][scope].__setitem__(name, unit))

    def systemctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=60)

    def start(self, scope: str, name: str) -> int:
        """Start the unit through the double; its main pid once the gateway said READY."""
        started = self.systemctl(*(["--user"] if scope == "user" else []), "start", name)
        assert started.returncode == 0, started.stderr
        return self.unit(scope, name)["MainPID"]

    def unit(self, scope: str, name: str) -> dict:
        return self.state()["units"][scope][name]

    def calls(self) -> list[tuple[str, str, str]]:
        """(scope, verb, last word) of every systemctl call since the log was cleared."""
        calls = []
        for line in self.log.read_text().splitlines():
            argv = json.loads(line)
            words = [word for word in argv if not word.startswith("-")]
            calls.append(("user" if "--user" in argv else "system", words[0], words[-1]))
        return calls

    def argv(self) -> list[list[str]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def clear_log(self) -> None:
        self.log.write_text("")

    def shutdown(self) -> None:
        """Stop every process the double started: no monitor restarts anything after this."""
        self._update(lambda state: state.__setitem__("shutdown", True))
        for pid in self.state()["pids"]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def fake_systemd(short_dir, code, monkeypatch):
    monkeypatch.setenv("PATH", os.pathsep.join([str(DOUBLES), str(Path(sys.executable).parent), os.environ["PATH"]]))
    double = Systemd(short_dir / "systemd", code)
    monkeypatch.setenv("SYSTEMCTL_DOUBLE_STATE", str(double.state_path))
    booted = short_dir / "booted"
    booted.mkdir()
    monkeypatch.setattr(systemd_manager, "BOOTED_MARKER", booted)
    yield double
    double.shutdown()


def status(home: Path) -> dict:
    with SyncClient(homes.endpoint(home, ops.SERVICE, create=False).control) as client:
        return client.call(ops.STATUS, timeout=10)


def live(root: Path) -> dict:
    return {g.profile: g for g in discover(root, scan=False)}


def by_unit(outcomes) -> dict:
    return {(o.scope, o.unit): o for o in outcomes}


# --- the double against real systemd 252 output ---------------------------------------------------


CAPTURED_UNITS = {  # the README's table, as systemd 252 reported it
    "hermes-gateway.service": ("/home/op/.hermes", 90 * SECOND, 90 * SECOND, 59, {}),
    "hermes-gateway-work.service": (
        "/home/op/.hermes/profiles/work",
        70 * SECOND,
        90 * SECOND,
        62,
        {"HERMES_LABEL": "a b"},
    ),
    "hermes-gateway-workbench.service": ("/home/op/.hermes/profiles/workbench", "infinity", 90 * SECOND, 64, {}),
    "hermes-gateway-ops.service": ("/srv/other/.hermes/profiles/ops", 30 * 3600 * SECOND, "infinity", 66, {}),
    "hermes-gateway-slow.service": ("/home/op/.hermes/profiles/slow", 604800 * SECOND, 2_500_000, 68, {}),
}


def load_capture(double: Systemd) -> None:
    running = {"ActiveState": "active", "SubState": "running"}
    for name, (home, stop, start, pid, extra) in CAPTURED_UNITS.items():
        environment = {"HERMES_HOME": home, **extra}
        double.add("system", name, home, stop=stop, start=start, MainPID=pid, Environment=environment, **running)
    double.add("system", "hermes-gatewayd.service", "/home/op/.hermes", **running)


def test_the_double_prints_what_systemd_252_printed(fake_systemd):
    load_capture(fake_systemd)
    listed = shown = 0
    for command, output, code in transcript("systemd-252-capture.txt"):
        argv = shlex.split(command)[1:]
        if "--value" in argv or "--type=service" in argv:
            continue  # forms the updater does not use
        done = fake_systemd.systemctl(*argv)
        assert (done.stdout.splitlines(), done.returncode) == (output, code), command
        listed += argv[0] == "list-units"
        shown += argv[0] == "show"
    assert (listed, shown) == (1, 6)


def test_the_double_fails_as_systemd_252_failed(fake_systemd):
    fake_systemd.add("system", "hermes-gateway-workbench.service", "/x", listed=False)  # stopped: unloaded
    blocks = {command: (output, code) for command, output, code in transcript("systemd-252-lifecycle.txt")}
    for command in (
        "systemctl reset-failed hermes-gateway-workbench.service",
        "systemctl restart hermes-gateway-nope.service",
    ):
        done = fake_systemd.systemctl(*shlex.split(command)[1:])
        assert (done.stderr.splitlines(), done.returncode) == blocks[command], command


# --- which units are ours --------------------------------------------------------------------------


def test_units_are_judged_by_the_home_they_run_on(fake_systemd):
    load_capture(fake_systemd)
    ours, foreign, skipped = SystemdKind().find(Path("/home/op/.hermes"))
    assert {(u.scope, u.name, u.profile) for u in ours} == {
        ("system", "hermes-gateway.service", "default"),
        ("system", "hermes-gateway-work.service", "work"),
        ("system", "hermes-gateway-workbench.service", "workbench"),
        ("system", "hermes-gateway-slow.service", "slow"),
    }
    assert [(u.name, str(u.home)) for u in foreign] == [
        ("hermes-gateway-ops.service", "/srv/other/.hermes/profiles/ops")
    ]
    assert skipped == []
    shown = {target for scope, verb, target in fake_systemd.calls() if verb == "show"}
    assert shown == set(CAPTURED_UNITS)  # hermes-gatewayd is not a gateway unit: never even read
    assert [verb for _, verb, _ in fake_systemd.calls()] == [*["list-units", "list-unit-files"] * 2, *["show"] * 5]


def test_a_name_claims_only_its_own_profiles_home(fake_systemd, root):
    fake_systemd.add("user", "hermes-gateway-workbench.service", root / "profiles" / "work")
    fake_systemd.add("user", "hermes-gateway-work.service", root / "profiles" / "work" / ".." / "work")
    fake_systemd.add("user", "hermes-gateway-default.service", root)
    fake_systemd.add("user", "hermes-gateway-nohome.service", root, Environment={"PYTHONUNBUFFERED": "1"})
    ours, foreign, skipped = SystemdKind().find(root)
    assert [u.name for u in ours] == ["hermes-gateway-work.service"]
    assert [u.name for u in foreign] == ["hermes-gateway-workbench.service"]
    assert [name for name, _ in skipped] == ["hermes-gateway-nohome.service"]


# --- restarts --------------------------------------------------------------------------------------


def test_the_fleet_drains_onto_the_new_code_and_nothing_else_is_touched(fake_systemd, code, root, short_dir):
    other = short_dir / "other"
    (other / "profiles" / "ops").mkdir(parents=True)
    names = {
        "default": "hermes-gateway.service",
        "work": "hermes-gateway-work.service",
        "workbench": "hermes-gateway-workbench.service",
    }
    for profile, name in names.items():
        fake_systemd.add("user", name, homes.profile_home(profile, root), env={"HERMES_LABEL": "a b"})
    fake_systemd.add("user", "hermes-gateway-ops.service", other / "profiles" / "ops")
    fake_systemd.add("user", "hermes-gateway-scratch.service", root / "profiles" / "work", ActiveState="failed")
    fake_systemd.add("user", "hermes-gatewayd.service", root, ActiveState="failed")
    before = {name: fake_systemd.start("user", name) for name in [*names.values(), "hermes-gateway-ops.service"]}
    foreign_gateway = status(other / "profiles" / "ops")
    new = release(code)
    fake_systemd.clear_log()

    outcomes = restart_fleet(root, new)

    assert [(o.profile, o.unit, o.scope, o.method, o.fallback, o.ok) for o in outcomes] == [
        (profile, name, "user", "drain", None, True) for profile, name in names.items()
    ]
    for outcome in outcomes:
        unit = fake_systemd.unit("user", outcome.unit)
        assert outcome.old_pid == before[outcome.unit] != outcome.new_pid == unit["MainPID"]
        assert unit["NRestarts"] == 1  # systemd started it again after the drain's exit 75
        assert status(homes.profile_home(outcome.profile, root))["code_sha"] == new
    calls = fake_systemd.calls()
    assert {verb for _, verb, _ in calls} == READS  # no signal, no blunt restart
    assert not [c for c in calls if c[2] == "hermes-gatewayd.service"]
    foreign = ("hermes-gateway-ops.service", "hermes-gateway-scratch.service")
    assert {verb for _, verb, target in calls if target in foreign} == {"show"}
    assert fake_systemd.unit("user", "hermes-gateway-ops.service")["MainPID"] == before["hermes-gateway-ops.service"]
    assert status(other / "profiles" / "ops")["pid"] == foreign_gateway["pid"]


def test_a_gateway_whose_socket_is_gone_is_drained_by_sigusr1(fake_systemd, code, root):
    fake_systemd.add("user", "hermes-gateway-work.service", root / "profiles" / "work")
    old = fake_systemd.start("user", "hermes-gateway-work.service")
    homes.endpoint(root / "profiles" / "work", ops.SERVICE).directory.joinpath("gateway.ctl").unlink()
    new = release(code)
    fake_systemd.clear_log()

    ours, _, _ = SystemdKind().find(root)
    (outcome,) = SystemdKind().restart(root, unit_targets(ours, live(root)), new)

    assert (outcome.method, outcome.ok, outcome.fallback) == ("signal", True, None)
    assert outcome.old_pid == old != outcome.new_pid
    usr1 = ["--user", "--no-ask-password", "kill", "-s", "USR1", "--kill-whom=main", "hermes-gateway-work.service"]
    assert usr1 in fake_systemd.argv()
    assert "restart" not in {verb for _, verb, _ in fake_systemd.calls()}
    assert status(root / "profiles" / "work")["code_sha"] == new


def test_without_a_fresh_main_process_the_unit_is_reset_and_restarted_in_its_own_manager(
    fake_systemd, code, root, short_dir
):
    # StartLimitBurst=0: the restart after the drain hits the start limit and the unit fails.
    fake_systemd.add(
        "system",
        "hermes-gateway-work.service",
        root / "profiles" / "work",
        stop=70 * SECOND,
        start=2_500_000,
        StartLimitBurst=0,
    )
    fake_systemd.add(
        "user",
        "hermes-gateway-work.service",
        short_dir / "other" / "profiles" / "work",
        stop=604800 * SECOND,
        start=86400 * SECOND,
        ActiveState="failed",
    )
    fake_systemd.add("user", "hermes-gateway.service", root, start=30 * SECOND, StartLimitBurst=0)
    old = {
        scope: fake_systemd.start(scope, name)
        for scope, name in (("system", "hermes-gateway-work.service"), ("user", "hermes-gateway.service"))
    }
    new = release(code)
    fake_systemd.clear_log()

    ours, foreign, _ = SystemdKind().find(root)
    assert [(u.scope, u.name) for u in foreign] == [("user", "hermes-gateway-work.service")]
    outcomes = by_unit(SystemdKind(euid=0).restart(root, unit_targets(ours, live(root)), new))

    work = outcomes["system", "hermes-gateway-work.service"]
    default = outcomes["user", "hermes-gateway.service"]
    for outcome, scope in ((work, "system"), (default, "user")):
        assert (outcome.method, outcome.fallback, outcome.ok) == ("drain", "blunt", True), outcome
        assert outcome.old_pid == old[scope] != outcome.new_pid
        assert "restarted through systemd" in outcome.note
        assert "the unit is failed" in outcome.note  # the start limit: no automatic restart to wait for
    # The gateway drained and exited: only the start is waited for, with this unit's own limit.
    assert work.budget == restart_budget("1min 10s", "2.500000s", start_only=True) == 2.5 + systemd.CLIENT_SLACK
    assert default.budget == 30 + systemd.CLIENT_SLACK
    argv = fake_systemd.argv()
    for flags, name in (
        (["--no-ask-password"], "hermes-gateway-work.service"),
        (["--user", "--no-ask-password"], "hermes-gateway.service"),
    ):
        assert argv.index([*flags, "reset-failed", name]) < argv.index([*flags, "restart", name])
    assert ("user", "restart", "hermes-gateway-work.service") not in fake_systemd.calls()
    for home in (root / "profiles" / "work", root):
        assert status(home)["code_sha"] == new


def test_a_systemctl_that_gives_up_waiting_is_reported_and_the_unit_checked(fake_systemd, code, root, monkeypatch):
    monkeypatch.setattr(systemd_budget, "CLIENT_SLACK", 0.0)
    # A job slower than the budget: the client is killed at 1 s, the job goes on without it.
    fake_systemd.add("user", "hermes-gateway.service", root, stop=SECOND, start=SECOND, StartLimitBurst=0, job_delay=3)
    fake_systemd.start("user", "hermes-gateway.service")
    new = release(code)
    fake_systemd.clear_log()

    ours, _, _ = SystemdKind().find(root)
    (outcome,) = SystemdKind().restart(root, unit_targets(ours, live(root)), new)

    assert outcome.budget == 1.0
    assert CLIENT_GAVE_UP in outcome.note
    assert (outcome.fallback, outcome.ok, outcome.reason) == ("blunt", True, None)
    assert outcome.new_pid == fake_systemd.unit("user", "hermes-gateway.service")["MainPID"]
    assert status(root)["code_sha"] == new
    assert [verb for _, verb, _ in fake_systemd.calls()].count("restart") == 1


def test_a_unit_that_is_down_is_not_started_and_a_failed_one_is_reported(fake_systemd, code, root):
    failed = {"ActiveState": "failed", "SubState": "failed", "Result": "exit-code", "ExecMainStatus": 78}
    fake_systemd.add("user", "hermes-gateway-work.service", root / "profiles" / "work", **failed)
    # Stopped, and unloaded by the manager: only its unit file still names it.
    fake_systemd.add("user", "hermes-gateway.service", root, listed=False)
    new = release(code)
    fake_systemd.clear_log()

    default, work = restart_fleet(root, new)

    assert (default.unit, default.method, default.ok, default.new_pid) == ("hermes-gateway.service", "skip", True, None)
    assert default.note.startswith("down; not started")
    assert (work.unit, work.method, work.ok, work.new_pid) == ("hermes-gateway-work.service", "skip", False, None)
    assert work.reason.startswith("the unit failed; not started: Result=exit-code, ExecMainStatus=78")
    assert (work.failure["result"], work.failure["exit_status"]) == ("exit-code", 78)
    assert {verb for _, verb, _ in fake_systemd.calls()} == READS  # neither was started
    assert fake_systemd.unit("user", "hermes-gateway-work.service")["ActiveState"] == "failed"


def test_system_units_are_left_running_without_privilege(fake_systemd, code, root):
    fake_systemd.add("system", "hermes-gateway-work.service", root / "profiles" / "work")
    fake_systemd.add("user", "hermes-gateway.service", root)
    system_pid = fake_systemd.start("system", "hermes-gateway-work.service")
    fake_systemd.start("user", "hermes-gateway.service")
    new = release(code)
    fake_systemd.clear_log()

    ours, _, _ = SystemdKind().find(root)
    outcomes = by_unit(SystemdKind(euid=1000).restart(root, unit_targets(ours, live(root)), new))

    skipped = outcomes["system", "hermes-gateway-work.service"]
    assert (skipped.method, skipped.ok, skipped.new_pid) == ("skip", False, None)
    assert "needs root" in skipped.reason
    assert outcomes["user", "hermes-gateway.service"].ok
    assert {verb for scope, verb, _ in fake_systemd.calls() if scope == "system"} == READS
    after = status(root / "profiles" / "work")  # not drained: the same process, still serving
    assert (after["pid"], after["state"]) == (system_pid, ops.RUNNING)


def test_one_unit_failing_leaves_the_others_restarted(fake_systemd, code, root):
    names = {
        "default": "hermes-gateway.service",
        "work": "hermes-gateway-work.service",
        "workbench": "hermes-gateway-workbench.service",
    }
    for profile, name in names.items():
        fake_systemd.add("user", name, homes.profile_home(profile, root))
        fake_systemd.start("user", name)
    # workbench's next gateway finds its run/ dir unsafe and exits 78, which systemd does not restart.
    os.chmod(root / "profiles" / "workbench" / "run", 0o777)
    # A unit whose MainPID cannot be read: the restart code raises for it, and only for it.
    fake_systemd.add(
        "user", "hermes-gateway-odd.service", root / "profiles" / "odd", MainPID="junk", ActiveState="active"
    )
    new = release(code)

    outcomes = by_unit(restart_fleet(root, new))

    broken = outcomes["user", "hermes-gateway-workbench.service"]
    # Its run dir is not private: no socket in it is asked, and that gateway alone fails.
    assert (broken.ok, broken.new_pid) == (False, None), broken
    assert "refusing to use" in broken.reason and "workbench/run" in broken.reason
    odd = outcomes["user", "hermes-gateway-odd.service"]
    assert (odd.ok, odd.new_pid) == (False, None)
    assert odd.reason.startswith("ValueError:")
    for profile in ("default", "work"):
        outcome = outcomes["user", names[profile]]
        assert (outcome.ok, outcome.method, outcome.fallback) == (True, "drain", None)
        assert status(homes.profile_home(profile, root))["code_sha"] == new


def test_a_unit_of_another_install_is_never_restarted_even_when_asked(fake_systemd, root, short_dir):
    fake_systemd.add("user", "hermes-gateway.service", short_dir / "other")
    ours, _, _ = SystemdKind().find(short_dir / "other")
    (outcome,) = SystemdKind().restart(root, unit_targets(ours, {}), None)
    assert (outcome.method, outcome.ok) == ("skip", False)
    assert "not this install's home" in outcome.reason
    assert {verb for _, verb, _ in fake_systemd.calls()} == READS


def test_the_plan_names_a_unit_of_another_home_as_foreign(fake_systemd, code, root, short_dir):
    from services.updater.install_kind import Probes
    from services.updater.plan import make_plan

    fake_systemd.add("user", "hermes-gateway-work.service", short_dir / "sibling" / "profiles" / "work")
    plan = make_plan(root, code, probes=Probes(dockerenv=short_dir / "none"), env={})
    # (other tests' gateways on this machine are rightly listed too, as foreign processes)
    assert {(f["kind"], f["name"], f["home"]) for f in plan.foreign if f["kind"] == "systemd"} == {
        ("systemd", "hermes-gateway-work.service", str(short_dir / "sibling" / "profiles" / "work"))
    }
    assert any(a.startswith("leave alone") and "hermes-gateway-work.service" in a for a in plan.actions)
    assert not [c for c in fake_systemd.calls() if c[1] not in READS]  # a plan only reads
