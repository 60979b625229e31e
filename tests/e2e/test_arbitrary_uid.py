"""The Kubernetes form with an arbitrary uid (as OpenShift runs a container): processes of a uid
that owns nothing, of gid 0 and the pod's fsGroup, on a home that is a volume, each with the
keys its container gets.

The Secrets are what ``deploy/kubernetes/make-secrets.sh`` makes (run for real, with a stand-in
``kubectl`` that keeps what it is given); each container's key store is laid out from its
projected volume's ``items`` in ``deploy/kubernetes/root.yaml`` as the kubelet lays one out.
The home is as the pod has it (a new PVC: root's, 2777, of the fsGroup, with ``mesh/`` made
root's 0755 by the engine as the key store's mount point's parent). Each service runs its
container's command and serves CURVE TCP; its probe, the container's readiness probe, runs as
the same uid with the container's own probe key, which is not the install's.
The processes keep one capability, read and search (not write) over the host's files: this
machine's interpreter is under /root, which only root may enter.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared import homes
from shared.mesh_tcp import TCP_ENV
from shared.transport import curve_keys
from tests.support.kubelet_volume import lay_out_secret
from tests.support.processes import ROOT, python_env, wait_for
from tests.support.tcp import free_port_pair

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to run as another uid"
)

UID = 12345  # owns nothing on this host
START_BOUND = 60.0  # seconds; a loaded machine starts a service in a few
STOP_BOUND = 60.0
MANIFEST = ROOT / "deploy" / "kubernetes" / "root.yaml"
# A stand-in for kubectl: `create secret generic NAME --from-file=KEY=PATH ...` prints the Secret,
# `apply -f -` appends what it reads to $KUBECTL_OUT, one JSON document a line.
KUBECTL = """#!{python}
import base64, json, os, sys
args = sys.argv[1:]
if "create" in args:
    data = {{}}
    for arg in args:
        if arg.startswith("--from-file="):
            key, path = arg[len("--from-file="):].split("=", 1)
            data[key] = base64.b64encode(open(path, "rb").read()).decode()
    name = args[args.index("generic") + 1]
    print(json.dumps({{"kind": "Secret", "metadata": {{"name": name}}, "data": data}}))
elif "apply" in args:
    with open(os.environ["KUBECTL_OUT"], "a") as out:
        out.write(sys.stdin.read().strip() + "\\n")
"""


def as_pod(fs_group: int, *argv: str) -> list[str]:
    return [
        "setpriv",
        f"--reuid={UID}",
        "--regid=0",
        f"--groups={fs_group}",
        "--inh-caps=+dac_read_search",
        "--ambient-caps=+dac_read_search",
        *argv,
    ]


def made_secrets(base: Path) -> dict[str, dict[str, bytes]]:
    """Secret name -> key -> content, as make-secrets.sh makes them."""
    import base64

    (base / "bin").mkdir(parents=True)
    kubectl = base / "bin" / "kubectl"
    kubectl.write_text(KUBECTL.format(python=sys.executable))
    kubectl.chmod(0o755)
    out = base / "secrets.jsonl"
    env = python_env(
        HERMES_HOME=str(base / "operator"),
        KUBECTL_OUT=str(out),
        PATH=f"{base / 'bin'}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    )
    done = subprocess.run(
        ["bash", str(MANIFEST.parent / "make-secrets.sh"), "-n", "hermes"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    secrets = [json.loads(line) for line in out.read_text().splitlines() if line]
    return {s["metadata"]["name"]: {k: base64.b64decode(v) for k, v in s["data"].items()} for s in secrets}


def pod_of(workload: str) -> dict[str, Any]:
    docs = [doc for doc in yaml.safe_load_all(MANIFEST.read_text()) if doc]
    return next(d for d in docs if d["metadata"]["name"] == workload)["spec"]["template"]["spec"]


def pod_home(base: Path, pod: dict[str, Any]) -> Path:
    """A root home as the pod mounts it: a new PVC's root, owned by root and the fsGroup."""
    os.chmod(base, 0o755)
    home = base / "home"
    home.mkdir()
    os.chown(home, 0, pod["securityContext"]["fsGroup"])
    os.chmod(home, 0o2777)
    return home


def key_store(home: Path, pod: dict[str, Any], container: str, secrets: dict[str, dict[str, bytes]]) -> Path:
    """The container's key volume, laid out at the home's key store from its ``items``."""
    spec = next(c for c in pod["containers"] if c["name"] == container)
    mount = next(m for m in spec["volumeMounts"] if m["mountPath"].endswith("/mesh/curve"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])["projected"]
    files = {
        item["path"]: secrets[source["secret"]["name"]][item["key"]]
        for source in volume["sources"]
        for item in source["secret"]["items"]
    }
    (home / "mesh").mkdir(mode=0o755)  # the engine makes the mount point's parent: root's
    store = curve_keys.store(home)
    return lay_out_secret(store, files, fs_group=pod["securityContext"]["fsGroup"], default_mode=volume["defaultMode"])


def profile_of(spec: dict[str, Any]) -> str:
    command = spec["command"]
    return command[command.index("-p") + 1] if "-p" in command else homes.DEFAULT_PROFILE


def service_of(spec: dict[str, Any]) -> str:
    """The key name of the service a container runs: ``auth_worker``, ``gateway@coder``."""
    if spec["command"][0] == "python":
        return spec["command"][-1].removeprefix("services.")
    return "gateway" if profile_of(spec) == homes.DEFAULT_PROFILE else f"gateway@{profile_of(spec)}"


def container_env(home: Path, pod: dict[str, Any], container: str, port: int) -> dict[str, str]:
    spec = next(c for c in pod["containers"] if c["name"] == container)
    env = {item["name"]: item["value"] for item in spec["env"]}
    env.update(HERMES_HOME=str(home), HOME=str(home), **{TCP_ENV: f"{service_of(spec)}=tcp://127.0.0.1:{port}"})
    return python_env(**env)


def command_of(argv: list[str]) -> list[str]:
    """A container's argv (``hermes ...``, ``python -m ...``) as this checkout runs it."""
    if argv[0] == "hermes":
        return [sys.executable, "-m", "hermes_cli.main", *argv[1:]]
    return [sys.executable, *argv[1:]]


@pytest.mark.parametrize("container", ["gateway", "gateway-coder", "hook-reporter"])
def test_a_container_of_an_arbitrary_uid_serves_with_its_own_keys_from_a_volume_home(short_dir, container):
    pod = pod_of("hermes-root")
    fs_group = pod["securityContext"]["fsGroup"]
    secrets = made_secrets(short_dir / "made")
    home = pod_home(short_dir, pod)
    key_store(home, pod, container, secrets)
    spec = next(c for c in pod["containers"] if c["name"] == container)
    env = container_env(home, pod, container, free_port_pair())
    served = subprocess.Popen(
        as_pod(fs_group, *command_of(spec["command"])),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    probe = as_pod(fs_group, *command_of(spec["readinessProbe"]["exec"]["command"]))
    try:

        def healthy() -> bool:
            assert served.poll() is None, served.stderr.read() if served.stderr else ""
            checked = subprocess.run([*probe, "--json"], env=env, capture_output=True, text=True, timeout=60)
            return checked.returncode == 0 and json.loads(checked.stdout)["health"]["state"] == "healthy"

        # Healthy, not only answering: a gateway's probe turn is refused to a key not granted it.
        wait_for(healthy, timeout=START_BOUND, interval=0.5, what=f"{container}'s readiness probe to find it healthy")
        # The profile's home is profiles/NAME on the root home's volume: one install.
        run = os.lstat(homes.profile_home(profile_of(spec), home) / "run")
        assert (run.st_uid, stat.S_IMODE(run.st_mode)) == (UID, 0o700)  # made private by the process itself
        assert curve_keys.server_names(home) == [service_of(spec)]  # its own secret key, and no other
        probe_key = (curve_keys.store(home) / "client.key_secret").read_bytes().strip()
        assert probe_key != curve_keys.client_secret(short_dir / "made" / "operator")  # not the install's own
    finally:
        served.send_signal(signal.SIGTERM)
        served.wait(timeout=STOP_BOUND)
    assert served.returncode == 0


def test_the_images_own_home_is_refused_to_an_arbitrary_uid_with_a_typed_error(short_dir):
    """Why the pod's home is a volume: the image's home is its user's (10001), private."""
    os.chmod(short_dir, 0o755)
    home = short_dir / "home" / "hermes" / ".hermes"
    home.mkdir(parents=True)
    os.chown(home, 10001, 10001)
    os.chmod(home, 0o700)
    env = python_env(HERMES_HOME=str(home), HOME=str(home.parent))
    fs_group = pod_of("hermes-root")["securityContext"]["fsGroup"]
    done = subprocess.run(
        as_pod(fs_group, *command_of(["hermes", "gateway", "run"])), env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "Permission denied" in done.stderr
    assert "Traceback" not in done.stderr
