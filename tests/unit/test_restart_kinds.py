"""The restart kinds' rules, without a process: which launchd jobs are the install's (exact
labels on this install's homes; a plist that cannot be judged is skipped with its reason), a
job of another home is never acted on, a kind whose manager is not here fails at once, and a
kind asks every target's drain before any waits for its gateway to come back."""

from __future__ import annotations

import contextlib
import plistlib
import shutil
import threading

import pytest

from fleet.discovery import GatewayRecord
from fleet.supervisors import Unit, launchd
from fleet.supervisors.systemd import manager as systemd_manager
from services.updater.restart import base
from services.updater.restart.base import Target, unit_targets
from services.updater.restart.launchd import LaunchdKind, is_ours
from services.updater.restart.systemd import SystemdKind
from services.updater.restart.unmanaged import UnmanagedKind
from shared.gateways import ops
from tests.support.launchd import SHA, SHORT, UID, mixed_fleet, write_job, write_plist

# --- which jobs are ours ----------------------------------------------------------------------


def test_only_exact_labels_on_this_installs_homes_are_ours(root, launchd_dirs, tmp_path):
    mixed_fleet(root, launchd_dirs, tmp_path)
    ours, foreign, skipped = LaunchdKind(euid=0, agent_dirs=launchd_dirs).find(root)
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
    assert label == "ai.hermes.gateway-work" and "same home" in reason and str(launchd_dirs["system"]) in reason
    assert ours[0].path == launchd_dirs["user"] / "ai.hermes.gateway.plist"


def test_plists_that_cannot_be_judged_are_skipped_with_their_reason(root, launchd_dirs):
    user = launchd_dirs["user"]
    (user / "ai.hermes.gateway-broken.plist").write_bytes(b"<plist>not a plist")
    job = plistlib.loads(launchd.render("nohome", root / "profiles" / "nohome", scope="user"))
    del job["EnvironmentVariables"]["HERMES_HOME"]
    write_plist(user / "ai.hermes.gateway-nohome.plist", job)
    write_job(launchd_dirs, "user", "work", root / "profiles" / "work", label="ai.hermes.gateway-alias")
    write_plist(user / "ai.hermes.gateway-list.plist", ["not", "a", "job"])
    (user / "ai.hermes.gateway-dir.plist").mkdir()
    ours, foreign, skipped = LaunchdKind(euid=0, agent_dirs=launchd_dirs).find(root)
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


def test_a_job_of_another_home_is_never_acted_on(root, launchd_dirs, tmp_path, fake_launchd):
    write_job(launchd_dirs, "user", "ops", tmp_path / "other-install" / "profiles" / "ops")
    _, foreign, _ = LaunchdKind(euid=0, agent_dirs=launchd_dirs).find(root)
    with pytest.raises(ValueError, match="ai.hermes.gateway-ops"):
        LaunchdKind(SHORT, runner=fake_launchd, uid=UID).restart(root, unit_targets(foreign, {}), SHA)
    assert fake_launchd.calls == []


@pytest.mark.skipif(shutil.which("launchctl") is not None, reason="launchctl exists here; this must not drive it")
def test_without_launchctl_the_failure_is_the_jobs_own_outcome(root, launchd_dirs):
    write_job(launchd_dirs, "user", "work", root / "profiles" / "work")
    ours, _, _ = LaunchdKind(euid=0, agent_dirs=launchd_dirs).find(root)
    (outcome,) = LaunchdKind(SHORT, uid=UID).restart(root, unit_targets(ours, {}), SHA)
    assert (outcome.method, outcome.ok, outcome.new_pid) == ("kickstart", False, None)
    assert "launchctl is not on PATH" in outcome.reason


def test_only_launchd_units_can_be_ours(root):
    unit = Unit(kind="systemd", name="ai.hermes.gateway", profile="default", home=root)
    assert not is_ours(root, unit)
    assert is_ours(root, Unit(kind="launchd", name="ai.hermes.gateway", profile="default", home=root))


# --- systemd ----------------------------------------------------------------------------------------


def test_without_systemd_both_managers_are_skipped_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(systemd_manager, "BOOTED_MARKER", tmp_path / "absent")
    ours, foreign, skipped = SystemdKind().find(tmp_path)
    assert (ours, foreign) == ([], [])
    assert [name for name, _ in skipped] == ["systemd user manager", "systemd system manager"]
    assert all("not running here" in reason or "not installed" in reason for _, reason in skipped)


# --- every target at once ---------------------------------------------------------------------

# More gateways than a kind ever restarted side by side before: it ran them in waves of eight.
FLEET = 12
# A bound, never reached when every drain is asked at once.
ALL_ASKED_WITHIN = 30.0


class _Probe:
    def call(self, op, args=None, *, timeout):
        return {"state": ops.RUNNING}


def test_every_drain_is_asked_before_any_gateway_is_waited_for(root, monkeypatch):
    asked: set[str] = set()
    all_asked = threading.Event()
    lock = threading.Lock()

    def drain(address, waits, *, reexec=False):
        with lock:
            asked.add(address)
            if len(asked) == FLEET:
                all_asked.set()
        return {"finished": [], "cut": []}

    def wait_for_fresh(gateway, address, expected_sha, waits, *, reexec, gave_up=None):
        # A come-back wait that ends before the last drain was asked is a wave.
        if not all_asked.wait(ALL_ASKED_WITHIN):
            return None, f"only {len(asked)} of {FLEET} drains were asked"
        return gateway.pid + 1000, None

    monkeypatch.setattr(base, "control_endpoint", lambda home: home.name)
    monkeypatch.setattr(base, "connect", lambda address, retry: contextlib.nullcontext(_Probe()))
    monkeypatch.setattr(base, "drain", drain)
    monkeypatch.setattr(base, "wait_for_fresh", wait_for_fresh)
    gateways = [
        GatewayRecord(f"p{n}", 100 + n, 1, ops.RUNNING, "o" * 40, "0.1", 0, "unmanaged", "socket", root / f"p{n}")
        for n in range(FLEET)
    ]
    outcomes = UnmanagedKind().restart(root, [Target(g.profile, gateway=g) for g in gateways], SHA)
    assert [(o.profile, o.ok, o.reason) for o in outcomes] == [(g.profile, True, None) for g in gateways]
    assert [o.new_pid for o in outcomes] == [g.pid + 1000 for g in gateways]
