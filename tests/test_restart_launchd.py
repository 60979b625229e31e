"""The updater's launchd restarts: which jobs are the install's, and how each is restarted.

This machine has no launchd (a Linux container). The jobs are plists written by ``render``
into temporary LaunchAgents and LaunchDaemons directories, beside hand-written foreign and
malformed ones; ``launchctl`` is a recording runner that logs every argv and answers with
canned results. The gateways are real processes: a drained one really exits 75, and
launchd's part (KeepAlive starting it again, ``kickstart -k`` or ``bootstrap`` starting a new
one) is played by starting a real gateway for the same home, so the check that a fresh
process answers on the expected code is the real one.
"""

from __future__ import annotations

import plistlib
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from services.updater.restart.base import Waits, unit_targets
from services.updater.restart.launchd import LaunchdKind, is_ours
from shared import exit_codes, homes
from shared.gateways import ops
from shared.gateways.discovery import discover
from shared.supervisors import Unit, launchd
from shared.sync_client import SyncClient
from shared.version import code_sha
from tests.support.processes import ROOT, GatewayProcess, python_env, read_state, wait_for

UID = 501
SHA = code_sha(ROOT)  # what a gateway started from this checkout reports


# Long enough for a real gateway to start on a loaded 2-core machine; it bounds only the
# cases that must wait it out (a gateway that never comes back).
SHORT = Waits(drain=5.0, come_back=10.0, poll=0.05)


@pytest.fixture
def dirs(tmp_path) -> dict[str, Path]:
    made = {"user": tmp_path / "LaunchAgents", "system": tmp_path / "LaunchDaemons"}
    for directory in made.values():
        directory.mkdir()
    return made


def write_job(dirs: dict[str, Path], scope: str, profile: str, home: Path, *, label: str | None = None) -> Path:
    """``render``'s plist for ``profile`` running on ``home``, filed under ``label`` (its own by default)."""
    path = dirs[scope] / f"{label or launchd.unit_name(profile)}.plist"
    path.write_bytes(launchd.render(profile, home, scope=scope))
    return path


def write_plist(path: Path, job: object) -> Path:
    path.write_bytes(plistlib.dumps(job))
    return path


class FakeLaunchd:
    """launchctl and launchd for one test. Every argv is recorded; ``print`` succeeds for the
    targets in ``loaded``; ``kickstart -k`` and ``bootstrap`` of a target run ``on[target]``.
    ``keep_alive`` starts a gateway again when it exits 75, as KeepAlive does."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.calls: list[list[str]] = []
        self.loaded: set[str] = set()
        self.on: dict[str, Callable[[], object]] = {}
        self.processes: list[GatewayProcess] = []
        self._lock = threading.Lock()
        self._closed = False

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        with self._lock:
            self.calls.append(list(argv))
        verb = argv[1]
        if verb == "print":
            return subprocess.CompletedProcess(argv, 0 if argv[2] in self.loaded else 113, "", "")
        target = argv[-1] if verb == "kickstart" else f"{argv[2]}/{Path(argv[3]).stem}"
        if target in self.on:
            self.on[target]()
        return subprocess.CompletedProcess(argv, 0, "", "")

    def spawn(self, profile: str) -> GatewayProcess | None:
        """A real gateway for ``profile``'s home, not waited for: launchd does not wait either."""
        with self._lock:
            if self._closed:
                return None
            gateway = GatewayProcess(self.root, profile, env=python_env(HERMES_SUPERVISOR="launchd"))
            self.processes.append(gateway)
            return gateway

    def start(self, profile: str) -> GatewayProcess:
        gateway = self.spawn(profile)
        gateway.wait_running()
        return gateway

    def keep_alive(self, gateway: GatewayProcess) -> None:
        def watch() -> None:
            if gateway.proc.wait() == exit_codes.PLANNED_RESTART:
                self.spawn(gateway.profile)

        threading.Thread(target=watch, daemon=True).start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        for gateway in self.processes:
            gateway.kill()


@pytest.fixture
def fake(root):
    sim = FakeLaunchd(root)
    yield sim
    sim.close()


def target(label: str, scope: str = "user") -> str:
    return f"{'system' if scope == 'system' else f'gui/{UID}'}/{label}"


def live(root: Path) -> dict:
    return {record.profile: record for record in discover(root, scan=False)}


def labels_named(calls: list[list[str]]) -> set[str]:
    """Every job label that appears in a recorded launchctl argv, as a target or a plist."""
    return {
        word.rsplit("/", 1)[-1].removesuffix(".plist") for argv in calls for word in argv[2:] if "ai.hermes" in word
    }


def status(gateway: GatewayProcess) -> dict:
    with SyncClient(gateway.endpoint.control) as client:
        return client.call(ops.STATUS)


def mixed_fleet(root: Path, dirs: dict[str, Path], tmp_path: Path) -> None:
    """Our jobs (default and work as user agents, batch as a daemon) among lookalikes."""
    write_job(dirs, "user", "default", root)
    write_job(dirs, "user", "work", root / "profiles" / "work")
    write_job(dirs, "system", "batch", root / "profiles" / "batch")
    # Lookalikes: a label that only starts like ours, a prefix sibling running work's home,
    # "default" spelled with a suffix, a sibling install's job, a second job for work's home.
    write_plist(
        dirs["user"] / "ai.hermes.gatewayd.plist",
        {"Label": "ai.hermes.gatewayd", "EnvironmentVariables": {"HERMES_HOME": str(root)}},
    )
    write_job(dirs, "user", "workbench", root / "profiles" / "work")
    write_job(dirs, "user", "default", root, label="ai.hermes.gateway-default")
    write_job(dirs, "user", "ops", tmp_path / "other-install" / "profiles" / "ops")
    write_job(dirs, "system", "work", root / "profiles" / "work")


# --- which jobs are ours ----------------------------------------------------------------------


def test_only_exact_labels_on_this_installs_homes_are_ours(root, dirs, tmp_path):
    mixed_fleet(root, dirs, tmp_path)
    ours, foreign, skipped = LaunchdKind(euid=0, agent_dirs=dirs).find(root)
    assert [(u.name, u.profile, u.scope, u.home) for u in ours] == [
        ("ai.hermes.gateway", "default", "user", root),
        ("ai.hermes.gateway-work", "work", "user", root / "profiles" / "work"),
        ("ai.hermes.gateway-batch", "batch", "system", root / "profiles" / "batch"),
    ]
    assert [(u.name, u.home) for u in foreign] == [
        ("ai.hermes.gateway-ops", tmp_path / "other-install" / "profiles" / "ops"),
        ("ai.hermes.gateway-workbench", root / "profiles" / "work"),
    ]
    ((label, reason),) = skipped
    assert label == "ai.hermes.gateway-work" and "same home" in reason and str(dirs["system"]) in reason
    assert ours[0].path == dirs["user"] / "ai.hermes.gateway.plist"


def test_commands_name_only_our_jobs_each_in_its_own_domain(root, dirs, tmp_path, fake):
    mixed_fleet(root, dirs, tmp_path)
    ours, _, _ = LaunchdKind(euid=0, agent_dirs=dirs).find(root)
    # Nothing is running; work and batch are loaded (kickstart), default is not (bootstrap).
    fake.loaded = {target("ai.hermes.gateway-work"), target("ai.hermes.gateway-batch", "system")}
    fake.on = {
        target("ai.hermes.gateway"): lambda: fake.spawn("default"),
        target("ai.hermes.gateway-work"): lambda: fake.spawn("work"),
        target("ai.hermes.gateway-batch", "system"): lambda: fake.spawn("batch"),
    }
    outcomes = LaunchdKind(SHORT, runner=fake, uid=UID).restart(root, unit_targets(ours, live(root)), SHA)
    assert [(o.profile, o.method, o.ok, o.old_pid) for o in outcomes] == [
        ("default", "bootstrap", True, 0),
        ("work", "kickstart", True, 0),
        ("batch", "kickstart", True, 0),
    ]
    assert sorted(fake.calls) == sorted(
        [
            ["launchctl", "print", f"gui/{UID}/ai.hermes.gateway"],
            ["launchctl", "bootstrap", f"gui/{UID}", str(dirs["user"] / "ai.hermes.gateway.plist")],
            ["launchctl", "print", f"gui/{UID}/ai.hermes.gateway-work"],
            ["launchctl", "kickstart", "-k", f"gui/{UID}/ai.hermes.gateway-work"],
            ["launchctl", "print", "system/ai.hermes.gateway-batch"],
            ["launchctl", "kickstart", "-k", "system/ai.hermes.gateway-batch"],
        ]
    )
    assert labels_named(fake.calls) == {"ai.hermes.gateway", "ai.hermes.gateway-work", "ai.hermes.gateway-batch"}


def test_a_system_job_without_root_is_skipped_and_its_gateway_left_alone(root, dirs, fake):
    write_job(dirs, "system", "batch", root / "profiles" / "batch")
    write_job(dirs, "user", "work", root / "profiles" / "work")
    batch = fake.start("batch")
    fake.keep_alive(fake.start("work"))
    ours, foreign, skipped = LaunchdKind(euid=UID, agent_dirs=dirs).find(root)
    assert [u.name for u in ours] == ["ai.hermes.gateway-work"] and foreign == []
    ((label, reason),) = skipped
    assert label == "ai.hermes.gateway-batch" and "needs root" in reason
    (outcome,) = LaunchdKind(SHORT, runner=fake, uid=UID).restart(root, unit_targets(ours, live(root)), SHA)
    assert (outcome.profile, outcome.method, outcome.ok) == ("work", "drain", True)
    assert fake.calls == []
    answer = status(batch)
    assert (answer["pid"], answer["state"]) == (batch.pid, ops.RUNNING)


def test_plists_that_cannot_be_judged_are_skipped_with_their_reason(root, dirs):
    user = dirs["user"]
    (user / "ai.hermes.gateway-broken.plist").write_bytes(b"<plist>not a plist")
    job = plistlib.loads(launchd.render("nohome", root / "profiles" / "nohome", scope="user"))
    del job["EnvironmentVariables"]["HERMES_HOME"]
    write_plist(user / "ai.hermes.gateway-nohome.plist", job)
    write_job(dirs, "user", "work", root / "profiles" / "work", label="ai.hermes.gateway-alias")
    write_plist(user / "ai.hermes.gateway-list.plist", ["not", "a", "job"])
    (user / "ai.hermes.gateway-dir.plist").mkdir()
    ours, foreign, skipped = LaunchdKind(euid=0, agent_dirs=dirs).find(root)
    assert ours == [] and foreign == []
    reasons = dict(skipped)
    assert sorted(reasons) == [
        "ai.hermes.gateway-alias",
        "ai.hermes.gateway-broken",
        "ai.hermes.gateway-dir",
        "ai.hermes.gateway-list",
        "ai.hermes.gateway-nohome",
    ]
    assert "labels its job 'ai.hermes.gateway-work'" in reasons["ai.hermes.gateway-alias"]
    assert "not a valid plist" in reasons["ai.hermes.gateway-broken"]
    assert "cannot be read" in reasons["ai.hermes.gateway-dir"]
    assert "holds a list" in reasons["ai.hermes.gateway-list"]
    assert "sets no HERMES_HOME" in reasons["ai.hermes.gateway-nohome"]


def test_a_job_of_another_home_is_never_acted_on(root, dirs, tmp_path, fake):
    write_job(dirs, "user", "ops", tmp_path / "other-install" / "profiles" / "ops")
    _, foreign, _ = LaunchdKind(euid=0, agent_dirs=dirs).find(root)
    with pytest.raises(ValueError, match="ai.hermes.gateway-ops"):
        LaunchdKind(SHORT, runner=fake, uid=UID).restart(root, unit_targets(foreign, {}), SHA)
    assert fake.calls == []


# --- restarting ---------------------------------------------------------------------------------


def test_a_drained_gateway_that_launchd_brings_back_needs_no_kickstart(root, dirs, fake):
    write_job(dirs, "user", "work", root / "profiles" / "work")
    old = fake.start("work")
    fake.keep_alive(old)
    fake.loaded = {target("ai.hermes.gateway-work")}
    turn: dict = {}

    def one_turn() -> None:
        with SyncClient(old.endpoint.control) as client:
            turn.update(client.call(ops.TURN, {"text": "in flight", "seconds": 1.0}))

    in_flight = threading.Thread(target=one_turn)
    in_flight.start()
    wait_for(lambda: (read_state(old.home) or {}).get("active_turns") == 1, timeout=10, what="a turn in flight")
    ours, _, _ = LaunchdKind(euid=0, agent_dirs=dirs).find(root)
    (outcome,) = LaunchdKind(SHORT, runner=fake, uid=UID).restart(root, unit_targets(ours, live(root)), SHA)
    in_flight.join(timeout=10)
    assert (outcome.method, outcome.ok, outcome.reason) == ("drain", True, None)
    assert (outcome.old_pid, outcome.finished, outcome.cut) == (old.pid, 1, 0)
    assert turn["text"] == "in flight"  # the drain let it finish
    assert old.wait_exit() == exit_codes.PLANNED_RESTART
    new = fake.processes[-1]
    assert outcome.new_pid == new.pid != old.pid
    assert fake.calls == []


def test_no_fresh_process_after_the_drain_means_kickstart_k_then_verify(root, dirs, fake):
    write_job(dirs, "user", "work", root / "profiles" / "work")
    old = fake.start("work")  # nothing brings it back after the drain
    work = target("ai.hermes.gateway-work")
    fake.loaded = {work}
    fake.on = {work: lambda: fake.spawn("work")}
    ours, _, _ = LaunchdKind(euid=0, agent_dirs=dirs).find(root)
    (outcome,) = LaunchdKind(SHORT, runner=fake, uid=UID).restart(root, unit_targets(ours, live(root)), SHA)
    assert (outcome.method, outcome.ok, outcome.old_pid) == ("kickstart", True, old.pid)
    assert "after the drain no gateway answered" in outcome.reason and work in outcome.reason
    assert fake.calls == [["launchctl", "print", work], ["launchctl", "kickstart", "-k", work]]
    new = fake.processes[-1]
    assert outcome.new_pid == new.pid != old.pid
    assert status(new)["code_sha"] == SHA


def test_one_gateway_that_never_comes_back_fails_alone(root, dirs, fake):
    for profile in ("default", "work", "ops"):
        write_job(dirs, "user", profile, homes.profile_home(profile, root))
    fake.keep_alive(fake.start("default"))  # launchd brings it back after the drain
    fake.start("work")  # drained, and neither KeepAlive nor kickstart brings it back
    fake.loaded = {target(launchd.unit_name(p)) for p in ("default", "work", "ops")}
    fake.on = {target("ai.hermes.gateway-ops"): lambda: fake.spawn("ops")}  # not running: kickstarted
    ours, _, _ = LaunchdKind(euid=0, agent_dirs=dirs).find(root)
    kind = LaunchdKind(SHORT, runner=fake, uid=UID)
    outcomes = {o.profile: o for o in kind.restart(root, unit_targets(ours, live(root)), SHA)}
    assert {p: (o.method, o.ok) for p, o in outcomes.items()} == {
        "default": ("drain", True),
        "work": ("kickstart", False),
        "ops": ("kickstart", True),
    }
    assert "after the kickstart no gateway answered" in outcomes["work"].reason
    assert ["launchctl", "kickstart", "-k", target("ai.hermes.gateway-work")] in fake.calls
    assert ["launchctl", "kickstart", "-k", target("ai.hermes.gateway")] not in fake.calls


def test_a_gateway_back_on_other_code_fails(root, dirs, fake):
    write_job(dirs, "user", "work", root / "profiles" / "work")
    fake.keep_alive(fake.start("work"))
    fake.loaded = {target("ai.hermes.gateway-work")}
    ours, _, _ = LaunchdKind(euid=0, agent_dirs=dirs).find(root)
    (outcome,) = LaunchdKind(SHORT, runner=fake, uid=UID).restart(root, unit_targets(ours, live(root)), "0" * 40)
    assert (outcome.method, outcome.ok) == ("kickstart", False)
    assert f"came back on {SHA[:12]}, not the new code" in outcome.reason


@pytest.mark.skipif(shutil.which("launchctl") is not None, reason="launchctl exists here; this must not drive it")
def test_without_launchctl_the_failure_is_the_jobs_own_outcome(root, dirs):
    write_job(dirs, "user", "work", root / "profiles" / "work")
    ours, _, _ = LaunchdKind(euid=0, agent_dirs=dirs).find(root)
    (outcome,) = LaunchdKind(SHORT, uid=UID).restart(root, unit_targets(ours, {}), SHA)
    assert (outcome.method, outcome.ok, outcome.new_pid) == ("kickstart", False, None)
    assert "launchctl is not on PATH" in outcome.reason


def test_only_launchd_units_can_be_ours(root):
    unit = Unit(kind="systemd", name="ai.hermes.gateway", profile="default", home=root)
    assert not is_ours(root, unit)
    assert is_ours(root, Unit(kind="launchd", name="ai.hermes.gateway", profile="default", home=root))
