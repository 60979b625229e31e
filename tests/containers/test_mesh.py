"""The mesh of ``compose/compose.yml`` in real containers (podman-compose with the CI override,
every container in the host's network namespace, none on a bridge), driven from the host as an
operator would: the keys made once in a container and exchanged with the host's install, then
``hermes gateway status|drain``, a turn, a sign-in and CURVE refusals over TCP, a worker killed
with SIGKILL, every service's health check, a gateway whose loop is blocked killed by its own
check and restarted, and ``down`` leaving nothing. The tests run in file order: they share one
mesh."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from shared import homes
from shared.gateways import ops
from shared.protocol import HELLO, RemoteError
from shared.transport.call_rules import NO_RETRY
from shared.transport.sync_client import connect
from tests.support.cli import HERMES
from tests.support.podman_sandbox import refuse_bridges
from tests.support.processes import ROOT, python_env, wait_for

pytestmark = pytest.mark.containers

FILES = (ROOT / "compose" / "compose.yml", ROOT / "compose" / "compose.ci.yml")
PROJECT = "hmtier"
SERVICES = {"gateway": "gateway", "gateway@coder": "gateway-coder", "auth_worker": "auth-worker"}
SERVICES |= {"handoff_retry": "handoff-retry", "hook_reporter": "hook-reporter"}
UP_TIMEOUT = 60
PODMAN_LOST_EXEC = 125  # podman's own error: an exec session whose container ended under it
BLOCK = "gateway:turn:default"  # the default profile's gateway, in the container "gateway"
CHECKED = ("gateway", "gateway-coder", "auth-worker", "handoff-retry", "hook-reporter", "portal")
# What the host's key is granted: the turns, drains and sign-in these tests make from the host.
GRANTS = (
    "--grant",
    "gateway.turn",
    "--grant",
    "gateway.drain",
    "--grant",
    "auth_worker.sign_in",
    "--grant",
    "auth_worker.cancel",
)


def _free_port_pairs(count: int) -> list[int]:
    """``count`` control ports, each with its events port (the next one) free too."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            if port >= 65534:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
        ports.append(port)
    return ports


class Mesh:
    def __init__(self, sandbox, image: str, work: Path):
        ports = _free_port_pairs(len(SERVICES) + 1)
        self.sandbox = sandbox
        self.tcp = ",".join(f"{name}=tcp://127.0.0.1:{port}" for name, port in zip(SERVICES, ports, strict=False))
        self.portal = f"http://127.0.0.1:{ports[-1]}"
        self.compose_env = {
            "HERMES_IMAGE": image,
            "HERMES_CI_MESH_TCP": self.tcp,
            "HERMES_CI_PORTAL_PORT": str(ports[-1]),
            "HERMES_CI_FAULT_PAUSE_AT": BLOCK,  # on a caller's turn only: a probe turn never pauses
        }
        self.host = work / "host"
        self.host.mkdir(mode=0o700)

    def compose(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.sandbox.compose(PROJECT, FILES, *args, env=self.compose_env, check=check)

    def env(self, home: Path | None = None) -> dict[str, str]:
        return python_env(HERMES_HOME=str(home or self.host), HERMES_MESH_TCP=self.tcp, HERMES_PORTAL_URL=self.portal)

    def hermes(self, *args: str, home: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*HERMES, *args], capture_output=True, text=True, timeout=60, env=self.env(home))
        if check and done.returncode != 0:
            raise AssertionError(f"hermes {' '.join(args)}: exit {done.returncode}: {done.stderr}")
        return done

    def container(self, service: str) -> str:
        return f"{PROJECT}_{service}_1"

    def endpoint(self, key_name: str, home: Path | None = None) -> homes.Endpoint:
        root = home or self.host
        profile_home = homes.profile_home(key_name.partition("@")[2] or homes.DEFAULT_PROFILE, root)
        service = key_name.partition("@")[0]
        return homes.endpoint(profile_home, service, create=False, env={"HERMES_MESH_TCP": self.tcp})

    def hello(self, key_name: str, home: Path | None = None) -> dict:
        with connect(self.endpoint(key_name, home), retry=NO_RETRY) as client:
            return client.call(HELLO, timeout=5)

    def gateways(self) -> list[dict]:
        return json.loads(self.hermes("gateway", "status", "--json").stdout)["gateways"]

    def restarts(self, service: str) -> int:
        return int(self.sandbox.inspect(self.container(service))["RestartCount"])

    def exchange_keys(self) -> None:
        """The operator's steps: the mesh's keys made once in a container, its servers trusted
        here, this install's client key authorized there."""
        self.compose("--profile", "setup", "run", "--rm", "keys")
        shown = self.compose("--profile", "setup", "run", "--rm", "keys", "hermes", "mesh", "keys", "show", "--json")
        self.hermes("mesh", "keys", "init")
        self.hermes("profile", "create", "coder")
        document = self.host.parent / "mesh-keys.json"
        document.write_text(shown.stdout)
        self.hermes("mesh", "keys", "authorize", "--server", "--from", str(document))
        client = self.hermes("mesh", "keys", "show", "--client").stdout.strip()
        self.compose(
            "--profile",
            "setup",
            "run",
            "--rm",
            "keys",
            "hermes",
            "mesh",
            "keys",
            "authorize",
            "operator",
            client,
            *GRANTS,
        )


@pytest.fixture(scope="module")
def mesh(sandbox, image, tmp_path_factory):
    mesh = Mesh(sandbox, image, tmp_path_factory.mktemp("mesh"))
    refuse_bridges(FILES, mesh.compose_env)
    try:
        mesh.exchange_keys()
        mesh.compose("up", "-d")
        wait_for(lambda: len(mesh.gateways()) == 2, timeout=UP_TIMEOUT, what="both gateways answering")
        yield mesh
    finally:
        mesh.compose("--profile", "setup", "down", "-v", "-t", "5", check=False)


def test_no_container_is_on_a_bridge(mesh):
    assert mesh.sandbox.bridged() == []
    modes = {c["Names"][0]: mesh.sandbox.inspect(c["Names"][0])["HostConfig"]["NetworkMode"] for c in _running(mesh)}
    assert set(modes.values()) == {"host"} and len(modes) == 6


def test_each_gateway_is_listed_once_with_the_image_commit(mesh):
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    found = mesh.gateways()
    assert [(g["profile"], g["source"], g["supervisor"], g["state"]) for g in found] == [
        ("default", "socket", "container", "running"),
        ("coder", "socket", "container", "running"),
    ]
    assert {g["code_sha"] for g in found} == {head}
    assert len({g["instance_id"] for g in found}) == 2


def test_a_turn_from_the_host_over_curve(mesh):
    with connect(mesh.endpoint("gateway@coder"), retry=NO_RETRY) as client:
        answer = client.call(ops.TURN, {"text": "hello from the host", "seconds": 0.2}, timeout=10)
    assert answer["text"] == "hello from the host" and answer["finished_at"] >= answer["started_at"]


def test_an_unknown_client_key_and_a_wrong_server_key_are_refused(mesh, tmp_path):
    stranger = tmp_path / "stranger"
    stranger.mkdir(mode=0o700)
    mesh.hermes("mesh", "keys", "init", home=stranger)
    mesh.hermes(
        "mesh", "keys", "authorize", "--server", "--from", str(mesh.host.parent / "mesh-keys.json"), home=stranger
    )
    with pytest.raises(RemoteError) as unknown:
        mesh.hello("gateway", home=stranger)
    assert unknown.value.code == "auth_failed"

    # The right client key, but trusting another key for the gateway than the one it holds.
    other = json.loads(mesh.hermes("mesh", "keys", "show", "--json", home=stranger).stdout)["services"]["gateway"]
    mesh.hermes("mesh", "keys", "authorize", "--server", "gateway", other)
    try:
        with pytest.raises(RemoteError) as wrong:
            mesh.hello("gateway")
        assert wrong.value.code == "server_key_mismatch"
    finally:
        trusted = json.loads((mesh.host.parent / "mesh-keys.json").read_text())["services"]["gateway"]
        mesh.hermes("mesh", "keys", "authorize", "--server", "gateway", trusted)
    assert mesh.hello("gateway")


def test_a_drain_exits_75_and_the_restart_policy_brings_it_back(mesh):
    before = {g["profile"]: g["instance_id"] for g in mesh.gateways()}
    drained = json.loads(mesh.hermes("-p", "coder", "gateway", "drain", "--deadline", "2", "--json").stdout)
    assert (drained["exit_code"], drained["exits"]) == (75, True)
    wait_for(lambda: mesh.restarts("gateway-coder") == 1, timeout=UP_TIMEOUT, what="the coder gateway restarted")
    after = wait_for(lambda: _if_both(mesh.gateways()), timeout=UP_TIMEOUT, what="both gateways back")
    assert after["default"] == before["default"] and after["coder"] != before["coder"]
    assert mesh.restarts("gateway") == 0


def test_a_worker_killed_with_sigkill_is_restarted(mesh):
    first = mesh.hello("handoff_retry")
    init = int(mesh.sandbox.inspect(mesh.container("handoff-retry"))["State"]["Pid"])
    worker = _only_child(init)
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: mesh.restarts("handoff-retry") == 1, timeout=UP_TIMEOUT, what="the worker restarted")
    again = wait_for(lambda: _answer(mesh, "handoff_retry"), timeout=UP_TIMEOUT, what="the new worker answering")
    assert again["pid"] != first["pid"] or again.get("instance_id") != first.get("instance_id")


def test_every_service_passes_its_health_check(mesh):
    for service in CHECKED:
        done = mesh.sandbox.podman("healthcheck", "run", mesh.container(service), check=False)
        assert done.returncode == 0, (service, done.stdout, done.stderr)
        assert _health(mesh, service) == "healthy", service


def test_a_gateway_whose_loop_is_blocked_is_killed_by_its_check_and_restarted(mesh):
    before = {g["profile"]: g["instance_id"] for g in mesh.gateways()}
    restarts = {service: mesh.restarts(service) for service in ("gateway", "gateway-coder")}
    with ThreadPoolExecutor(1) as pool:
        turn = pool.submit(_turn, mesh, "gateway")
        wait_for(lambda: f"paused {BLOCK}" in _logs(mesh, "gateway"), timeout=UP_TIMEOUT, what="its loop blocked")
        checks = [mesh.sandbox.podman("healthcheck", "run", mesh.container("gateway"), check=False) for _ in "123"]
        # The third check kills the container's gateway, and podman may lose that exec's own exit
        # with the container (125, "unable to find event"): what it did is checked below.
        codes = [c.returncode for c in checks]
        assert codes[:2] == [1, 1] and codes[2] in (1, PODMAN_LOST_EXEC), [c.stdout + c.stderr for c in checks]
        assert turn.result(timeout=UP_TIMEOUT) != "answered"  # its gateway died inside the turn
    wait_for(lambda: mesh.restarts("gateway") == restarts["gateway"] + 1, timeout=UP_TIMEOUT, what="it restarted")
    after = wait_for(lambda: _if_both(mesh.gateways()), timeout=UP_TIMEOUT, what="both gateways back")
    assert after["default"] != before["default"] and after["coder"] == before["coder"]
    assert mesh.restarts("gateway-coder") == restarts["gateway-coder"]
    wait_for(
        lambda: mesh.sandbox.podman("healthcheck", "run", mesh.container("gateway"), check=False).returncode == 0,
        timeout=UP_TIMEOUT,
        what="healthy again",
    )


def test_the_auth_worker_signs_in_against_the_portal_container(mesh):
    login = subprocess.Popen(
        [*HERMES, "auth", "login", "nous", "--no-browser", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=mesh.env(),
    )
    try:
        assert login.stdout is not None
        code = json.loads(login.stdout.readline())
        assert code["state"] == "Code" and code["verification_uri"].startswith(mesh.portal)
        approved = httpx.post(
            f"{mesh.portal}/_sim/device/approve",
            json={"user_code": code["user_code"], "email": "ada@example.com", "tier": "pro"},
            timeout=10,
        )
        assert approved.status_code == 200
        out, _ = login.communicate(timeout=60)
    finally:
        if login.poll() is None:
            login.kill()
            login.communicate(timeout=10)
    assert login.returncode == 0
    assert json.loads(out.strip().splitlines()[-1])["state"] == "Completed"
    status = mesh.sandbox.podman("exec", mesh.container("auth-worker"), "hermes", "auth", "status", "nous", "--json")
    assert json.loads(status.stdout)["email"] == "ada@example.com"


def test_an_update_inside_a_container_names_the_compose_command(mesh):
    done = mesh.sandbox.podman("exec", mesh.container("gateway"), "hermes", "update", "--json", check=False)
    assert done.returncode == 2
    assert "podman-compose pull && podman-compose up -d" in done.stdout + done.stderr


def test_down_leaves_no_container_volume_or_pod(mesh):
    mesh.compose("--profile", "setup", "down", "-v", "-t", "5")
    for what in (("ps", "-aq"), ("volume", "ls", "-q"), ("pod", "ps", "-q")):
        assert mesh.sandbox.podman(*what).stdout.split() == [], what


def _running(mesh) -> list[dict]:
    return json.loads(mesh.sandbox.podman("ps", "--format", "json").stdout)


def _if_both(gateways: list[dict]) -> dict[str, str] | None:
    found = {g["profile"]: g["instance_id"] for g in gateways if g["state"] == "running"}
    return found if len(found) == 2 else None


def _answer(mesh, key_name: str) -> dict | None:
    try:
        return mesh.hello(key_name)
    except RemoteError:
        return None


def _health(mesh, service: str) -> str:
    state = mesh.sandbox.inspect(mesh.container(service))["State"]
    return str((state.get("Health") or state.get("Healthcheck") or {}).get("Status"))


def _logs(mesh, service: str) -> str:
    done = mesh.sandbox.podman("logs", mesh.container(service), check=False)
    return done.stdout + done.stderr


def _turn(mesh, key_name: str) -> str:
    """A caller's turn; the code it failed with, or "answered"."""
    try:
        with connect(mesh.endpoint(key_name), retry=NO_RETRY) as client:
            client.call(ops.TURN, {"text": "hold the loop"}, timeout=UP_TIMEOUT)
    except RemoteError as exc:
        return exc.code
    return "answered"


def _only_child(pid: int) -> int:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])
