"""systemd tools as real processes: ``systemd-analyze verify`` of the rendered unit, and the
systemctl client typing every outcome."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.supervisors import (
    commands,
    errors,
    systemd,
)
from fleet.supervisors.systemd import manager as systemd_manager
from tests.support.supervisors import SYSTEMD_RUNNING


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_systemd_analyze_verify_accepts_the_rendered_unit(tmp_path):
    # An interpreter whose path needs quoting and %-escaping; verify checks it is executable.
    bin_dir = tmp_path / "py dir %z"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.symlink_to(sys.executable)
    home = tmp_path / "home with space %z"  # %z is no specifier: unescaped, verify reports it
    unit = tmp_path / "units" / "hermes-gateway-work.service"
    unit.parent.mkdir()
    text = systemd.render("work", home, scope="system", python=str(python))
    unit.write_text(text)
    result = verify(unit)
    assert result.returncode == 0 and str(unit) not in result.stderr, result.stderr

    # The check has teeth: the same unit with % left unescaped is reported.
    bad = tmp_path / "bad" / "hermes-gateway-work.service"
    bad.parent.mkdir()
    bad.write_text(text.replace("%%", "%"))
    assert str(bad) in verify(bad).stderr


def verify(unit: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60
    )


@pytest.mark.skipif(
    SYSTEMD_RUNNING or shutil.which("systemctl") is None,
    reason="needs a systemctl client with no systemd running, so that no real manager is reached",
)
@pytest.mark.parametrize("scope", ["user", "system"])
def test_unreachable_manager_is_reported_as_unavailable(tmp_path, monkeypatch, scope):
    """The booted marker is pointed at a directory that exists, so the real systemctl runs
    and fails to reach a manager, as it does on a host whose manager is down."""
    marker = tmp_path / "systemd-system"
    marker.mkdir()
    monkeypatch.setattr(systemd_manager, "BOOTED_MARKER", marker)
    with pytest.raises(errors.SupervisorUnavailable) as raised:
        systemd.systemctl(scope, "daemon-reload", timeout=30)
    assert raised.value.detail["command"][0] == "systemctl"


def test_run_client_types_every_outcome():
    with pytest.raises(errors.SupervisorUnavailable):
        commands.run_client(["/nonexistent/systemctl", "start"], timeout=5)
    with pytest.raises(errors.SupervisorTimeout):
        commands.run_client([sys.executable, "-c", "import time; time.sleep(10)"], timeout=0.3)
    argv = [sys.executable, "-c", "import sys; sys.stderr.write('Unit x.service not found.'); sys.exit(5)"]
    error = commands.command_failed(argv, commands.run_client(argv, timeout=30))
    assert error.code == "supervisor_failed"
    assert error.detail["returncode"] == 5 and error.detail["stderr"] == "Unit x.service not found."
    assert "Unit x.service not found." in error.message
