"""The mesh of ``compose/compose.yml`` in real containers (podman-compose with the CI override,
every container in the host's network namespace, none on a bridge), driven from the host as an
operator would: the keys made once in a container and exchanged with the host's install, then
``hermes gateway status|drain``, a turn, a sign-in and CURVE refusals over TCP, a worker killed
with SIGKILL, every service's health check, a gateway whose loop is blocked killed by its own
check and restarted, a stop that lets a turn finish, and ``down`` leaving nothing. The project is
one install (one id, one hook intake, one sign-in), and each container holds its own secret key
alone. The tests run in file order: they share one mesh."""

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

from services.hook_reporter.ops import STATUS as HOOK_STATUS
from shared import homes
from shared.gateways import ops
from shared.protocol import HELLO, RemoteError
from shared.transport.call_rules import NO_RETRY
from shared.transport.sync_client import connect
from tests.support.cli import HERMES
from tests.support.hook_reports import SESSION
from tests.support.podman_sandbox import refuse_bridges
from tests.support.processes import ROOT, python_env, wait_for

pytestmark = pytest.mark.containers

FILES = (ROOT / "compose" / "compose.yml", ROOT / "compose" / "compose.ci.yml")
PROJECT = "hmtier"
SERVICES = {"gateway": "gateway", "gateway@coder": "gateway-coder", "auth_worker": "auth-worker"}
SERVICES |= {"handoff_retry": "handoff-retry", "hook_reporter": "hook-reporter"}
CURVE = "/home/hermes/.hermes/mesh/curve"  # each service's own store, mounted from its own volume
# Each service's store, written by the keys job into the volume mounted at its key name.
EXPORT = 'for d in /home/hermes/export/*; do hermes mesh keys export --service "${d##*/}" --to "$d" || exit; done'
LONG_TURN = 8.0  # longer than the old SIGTERM drain (5 s), shorter than the grace compose gives
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


def free_port_pairs(count: int) -> list[int]:
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
        ports = free_port_pairs(len(SERVICES) + 1)
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
        self.compose("--profile", "setup", "run", "--rm", "keys", "sh", "-c", EXPORT)

    def exec(self, service: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.sandbox.podman("exec", self.container(service), *argv, check=check)


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


def test_the_project_is_one_install(mesh):
    found = {g["profile"]: g["install_id"] for g in mesh.gateways()}
    workers = {key: mesh.hello(key).get("install_id") for key in ("auth_worker", "handoff_retry", "hook_reporter")}
    assert set(found) == {"default", "coder"} and None not in found.values()
    assert set(found.values()) == set(workers.values()), (found, workers)


def test_a_hook_from_the_coder_gateways_container_reaches_the_one_intake(mesh):
    before = _hook_status(mesh)["received"]
    report = (
        "from shared import hooks; hooks.prepare(10_000); "
        "import sys; sys.exit(0 if hooks.report_activity('working') else 1)"
    )
    sent = mesh.exec("gateway-coder", "env", f"POHUNEK_SESSION_ID={SESSION}", "python", "-c", report, check=False)
    assert sent.returncode == 0, sent.stderr  # the coder container's client found the intake and sent
    wait_for(lambda: _hook_status(mesh)["received"] > before, timeout=UP_TIMEOUT, what="the report taken")
    assert _hook_status(mesh)["received"] > before  # the root home's reporter took it


def test_each_container_holds_its_own_secret_key_and_no_client_key(mesh):
    for key_name, service in SERVICES.items():
        found = mesh.exec(service, "find", "/home/hermes", "-name", "*key_secret").stdout.split()
        assert found == [f"{CURVE}/server/{key_name}.key_secret"], (service, found)


def test_a_services_own_key_cannot_turn_or_drain_a_gateway(mesh):
    """From inside the hook reporter's container, with every secret key it holds, a turn and a
    drain of the gateway are refused; the host's operator key still turns it (the turn above)."""
    gateway = json.loads((mesh.host.parent / "mesh-keys.json").read_text())["services"]["gateway"]
    script = """
import json, pathlib, sys, tempfile
from services.hook_reporter.ops import STATUS as HOOK_STATUS
from shared import homes
from shared.gateways import ops
from shared.protocol import RemoteError
from shared.transport import curve_keys
from shared.transport.call_rules import NO_RETRY
from shared.transport.sync_client import connect
store, server_key = pathlib.Path(sys.argv[1]), sys.argv[2].encode()
codes = {}
for held in sorted(store.rglob("*key_secret")):
    root = pathlib.Path(tempfile.mkdtemp()) / "home"
    curve_keys.init(root, [])  # a home of its own, its client key then replaced by the held one
    (curve_keys.store(root) / "client.key_secret").write_bytes(held.read_bytes())
    curve_keys.add_public(root, "servers", "gateway", server_key)
    endpoint = homes.endpoint(homes.profile_home("default", root), "gateway", create=False)
    for spec, args in ((ops.TURN, {"text": "from a service", "seconds": 0.1}), (ops.DRAIN, {"deadline": 1.0})):
        try:
            with connect(endpoint, retry=NO_RETRY) as client:
                client.call(spec, args, timeout=10)
            codes[f"{held.name} {spec.name}"] = "accepted"
        except RemoteError as exc:
            codes[f"{held.name} {spec.name}"] = exc.code
print(json.dumps(codes))
"""
    done = mesh.exec("hook-reporter", "python", "-c", script, CURVE, gateway)
    codes = json.loads(done.stdout)
    print("from the hook reporter's container:", codes)
    assert set(codes) == {"hook_reporter.key_secret turn", "hook_reporter.key_secret drain"}
    assert set(codes.values()) <= {"op_not_granted", "auth_failed"}, codes


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
    # One sign-in per install: the default profile's and the coder profile's gateways see it.
    for service, profile in (("auth-worker", "default"), ("gateway", "default"), ("gateway-coder", "coder")):
        status = mesh.exec(service, "hermes", "-p", profile, "auth", "status", "nous", "--json")
        assert json.loads(status.stdout)["email"] == "ada@example.com", service


def test_an_update_inside_a_container_names_the_compose_command(mesh):
    done = mesh.sandbox.podman("exec", mesh.container("gateway"), "hermes", "update", "--json", check=False)
    assert done.returncode == 2
    assert "podman-compose pull && podman-compose up -d" in done.stdout + done.stderr


def test_a_stop_lets_a_turn_in_flight_finish(mesh):
    """``compose stop`` sends SIGTERM and gives stop_grace_period; the gateway drains for
    HERMES_STOP_GRACE, under it: a turn longer than the old fixed 5 s finishes, the caller gets
    its answer and the container exits 0."""
    with ThreadPoolExecutor(1) as pool:
        turn = pool.submit(_long_turn, mesh, "gateway@coder")
        wait_for(lambda: _active(mesh, "coder") == 1, timeout=UP_TIMEOUT, what="the turn in flight")
        mesh.compose("stop", "gateway-coder")
        answer = turn.result(timeout=UP_TIMEOUT)
    assert answer.get("text") == "a long turn", answer
    state = mesh.sandbox.inspect(mesh.container("gateway-coder"))["State"]
    assert (state["Status"], state["ExitCode"]) == ("exited", 0)


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


def _long_turn(mesh, key_name: str) -> dict:
    """A caller's turn of ``LONG_TURN`` seconds: its answer, or the code it failed with."""
    try:
        with connect(mesh.endpoint(key_name), retry=NO_RETRY) as client:
            return client.call(ops.TURN, {"text": "a long turn", "seconds": LONG_TURN}, timeout=UP_TIMEOUT)
    except RemoteError as exc:
        return {"code": exc.code}


def _active(mesh, profile: str) -> int | None:
    return next((g["active_turns"] for g in mesh.gateways() if g["profile"] == profile), None)


def _hook_status(mesh) -> dict:
    with connect(mesh.endpoint("hook_reporter"), retry=NO_RETRY) as client:
        return client.call(HOOK_STATUS, timeout=5)


def _only_child(pid: int) -> int:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])
