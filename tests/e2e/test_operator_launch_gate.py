"""The session daemon's launch gate with ``--packages``: a fresh hermes session runs only from
the selected, enabled, verified Hermes package; a running one stays controllable when the
package is disabled or altered under it."""

from __future__ import annotations

import pytest

from runtime_package import manifests
from shared.operator import protocol as p
from tests.support.processes import python_env
from tests.support.runtime_package import PackageKit
from tests.support.session_daemon import HOST, SessionDaemon

pytestmark = pytest.mark.slow


@pytest.fixture
def gate(root, short_dir, tmp_path):
    kit = PackageKit(tmp_path)
    daemon = SessionDaemon(
        short_dir, "--work-dir", str(root), "--packages", str(kit.state), env=python_env(HERMES_HOME=str(root))
    )
    yield kit, daemon
    daemon.stop()


def new(daemon, name: str, agent: str = "hermes") -> dict:
    return {"host": HOST, "agent": agent, "name": name, "cols": 100, "rows": 30}


def test_no_package_means_no_fresh_hermes_and_a_shell_still_runs(gate):
    kit, daemon = gate
    refused = daemon.error(p.SESSION_NEW, new(daemon, "h-1"))
    assert refused.code == "runtime_not_installed"
    assert daemon.call(p.SESSION_NEW, new(daemon, "s-1", agent="shell"))["state"] in ("starting", "running")


def test_the_selected_package_launches_and_a_disabled_or_altered_one_does_not(gate):
    kit, daemon = gate
    digest = kit.install_package()["digest"]
    running = daemon.call(p.SESSION_NEW, new(daemon, "h-1"))
    assert running["agent"] == "hermes"
    root = kit.state / "plugins" / "packages" / digest.removeprefix("sha256:") / "files"
    detect = root / "detect.toml"
    detect.write_bytes(detect.read_bytes() + b"\n# altered\n")
    refused = daemon.error(p.SESSION_NEW, new(daemon, "h-2"))
    assert refused.code == "runtime_incompatible"
    assert daemon.call(p.SESSION_INPUT, {"host": HOST, "session": running["id"], "text": "still here"})
    detect.write_bytes(detect.read_bytes().removesuffix(b"\n# altered\n"))
    assert kit.cli("operator", "package", "disable", manifests.PACKAGE_ID).returncode == 0
    assert daemon.error(p.SESSION_NEW, new(daemon, "h-3")).code == "runtime_not_installed"
    assert daemon.call(p.SESSION_INPUT, {"host": HOST, "session": running["id"], "text": "and here"})
