"""Every gateway unit we generate, scored by the host's ``systemd-analyze security`` offline:
both scopes, the default profile and a named one, and a home too deep for its sockets (whose
unit may also write their fallback dir). An unhardened unit scores 9.6 ("UNSAFE")."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fleet.supervisors import systemd

ANALYZE = shutil.which("systemd-analyze")
pytestmark = pytest.mark.skipif(ANALYZE is None, reason="no systemd-analyze on this machine")

MOST_EXPOSED = 5.0
# --threshold counts tenths of the exposure level.
THRESHOLD = round(MOST_EXPOSED * 10)
OVERALL = re.compile(r"Overall exposure level for \S+: (\d+\.\d)")
HOMES = {
    "default": Path("/srv/hermes"),
    "work": Path("/srv/hermes/profiles/work"),
    "deep": Path("/srv") / ("x" * 100) / "profiles" / "deep",
}


@pytest.mark.parametrize("scope", ["system", "user"])
@pytest.mark.parametrize("profile", sorted(HOMES))
def test_every_generated_unit_scores_5_or_better(tmp_path, scope, profile):
    assert ANALYZE is not None
    path = tmp_path / systemd.unit_name(profile)
    path.write_text(systemd.render(profile, HOMES[profile], scope=scope))
    argv = [ANALYZE, "security", "--offline=yes", f"--threshold={THRESHOLD}", "--no-pager", str(path)]
    if scope == "user":
        argv.insert(2, "--user")
    # The user manager's lookup wants a runtime dir; a private one, since nothing is written there.
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env={"XDG_RUNTIME_DIR": str(runtime), "PATH": "/usr/bin:/bin"}
    )
    found = OVERALL.search(done.stdout)
    assert found, done.stdout + done.stderr
    print(f"{scope} {profile}: {found.group(1)}")
    assert float(found.group(1)) <= MOST_EXPOSED, done.stdout
    assert done.returncode == 0, done.stdout + done.stderr  # systemd's own verdict on the threshold
