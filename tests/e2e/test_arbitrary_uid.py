"""The Kubernetes form with an arbitrary uid (as OpenShift runs a container): a process of a uid
that owns nothing, of gid 0 and the pod's fsGroup, on a home that is a volume, with its keys in
a Secret as the kubelet mounts one.

The home is laid out as the pod has it (an emptyDir or a new PVC: root's, 2777, of the fsGroup,
with ``mesh/`` made root's 0755 by the engine as the Secret's mount point's parent) and the
gateway serves CURVE TCP from it; its health check, the pod's probe, runs as the same uid.
The processes keep one capability, read and search (not write) over the host's files: this
machine's interpreter is under /root, which only root may enter.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
from pathlib import Path

import pytest

from shared.mesh_tcp import TCP_ENV
from shared.transport import curve_keys
from tests.support.cli import HERMES
from tests.support.kubelet_volume import lay_out_secret
from tests.support.processes import python_env, wait_for
from tests.support.tcp import free_port_pair

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to run as another uid"
)

UID = 12345  # owns nothing on this host
FS_GROUP = 2000
START_BOUND = 60.0  # seconds; a loaded machine starts a gateway in a few
STOP_BOUND = 60.0


def as_pod(*argv: str) -> list[str]:
    return [
        "setpriv",
        f"--reuid={UID}",
        "--regid=0",
        f"--groups={FS_GROUP}",
        "--inh-caps=+dac_read_search",
        "--ambient-caps=+dac_read_search",
        *argv,
    ]


def pod_home(base: Path) -> Path:
    """A root home as the pod mounts it, keyed by a Secret holding what the gateway's pod gets."""
    os.chmod(base, 0o755)
    home = base / "home"
    home.mkdir()
    os.chown(home, 0, FS_GROUP)
    os.chmod(home, 0o2777)
    (home / "mesh").mkdir(mode=0o755)
    curve_keys.init(base / "scratch", ["gateway"])
    scratch = curve_keys.store(base / "scratch")
    wanted = ("server/gateway.key_secret", "client.key_secret", "servers/gateway.key", "authorized/local.key")
    lay_out_secret(curve_keys.store(home), {item: (scratch / item).read_bytes() for item in wanted}, fs_group=FS_GROUP)
    shutil.rmtree(base / "scratch")
    return home


def pod_env(home: Path, port: int) -> dict[str, str]:
    return python_env(HERMES_HOME=str(home), HOME=str(home), **{TCP_ENV: f"gateway=tcp://127.0.0.1:{port}"})


def test_a_gateway_of_an_arbitrary_uid_serves_from_a_volume_home_with_secret_keys(short_dir):
    home = pod_home(short_dir)
    env = pod_env(home, free_port_pair())
    gateway = subprocess.Popen(
        as_pod(*HERMES, "gateway", "run"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:

        def healthy() -> bool:
            assert gateway.poll() is None, gateway.stderr.read() if gateway.stderr else ""
            probe = subprocess.run(as_pod(*HERMES, "gateway", "health"), env=env, capture_output=True, timeout=60)
            return probe.returncode == 0

        wait_for(healthy, timeout=START_BOUND, interval=0.5, what="the gateway's probe to pass")
        run = os.lstat(home / "run")
        assert (run.st_uid, stat.S_IMODE(run.st_mode)) == (UID, 0o700)  # made private by the process itself
        state = os.lstat(home / "gateway_state.json")
        assert state.st_uid == UID
    finally:
        gateway.send_signal(signal.SIGTERM)
        gateway.wait(timeout=STOP_BOUND)
    assert gateway.returncode == 0


def test_the_images_own_home_is_refused_to_an_arbitrary_uid_with_a_typed_error(short_dir):
    """Why the pod's home is a volume: the image's home is its user's (10001), private."""
    os.chmod(short_dir, 0o755)
    home = short_dir / "home" / "hermes" / ".hermes"
    home.mkdir(parents=True)
    os.chown(home, 10001, 10001)
    os.chmod(home, 0o700)
    done = subprocess.run(
        as_pod(*HERMES, "gateway", "run"),
        env=pod_env(home, free_port_pair()),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "Permission denied" in done.stderr
    assert "Traceback" not in done.stderr
