"""Structured logs of a real mesh: gateways under the embedded supervisord and the workers a
sign-in starts, all with ``HERMES_LOG_FORMAT=json``. Every line parses and names its process,
no secret the test made appears in any, and ``hermes logs gateway`` reads one profile's."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from nous import store
from shared.files import read_json
from shared.log_record import FIELDS
from shared.transport import curve_keys
from tests.support import mesh_roots
from tests.support.cli import HERMES
from tests.support.cli import hermes as run_hermes
from tests.support.logins import Hermes
from tests.support.processes import ROOT, python_env, wait_for
from tests.support.tcp import free_port_pair

pytestmark = pytest.mark.slow

WAIT = 30.0
PROVIDER_KEY = "sk-" + os.urandom(16).hex()  # a key the coder profile's gateway holds in its scope


class JsonHermes(Hermes):
    def env(self) -> dict[str, str]:
        return {**super().env(), "HERMES_LOG_FORMAT": "json"}


@pytest.fixture
def mesh():
    with mesh_roots.mesh_root("coder", "writer") as root:
        (root / "profiles" / "coder" / ".env").write_text(f"OPENAI_API_KEY={PROVIDER_KEY}\n")
        # writer's gateway on TCP: it holds its CURVE secret key, and every command the client's
        config = root / "config.yaml"
        with config.open("a") as out:
            out.write(f"\nmesh:\n  tcp:\n    gateway@writer: tcp://127.0.0.1:{free_port_pair()}\n")
        made = run_hermes("mesh", "keys", "init", "--profile", "writer", env=env_of(root))
        assert made.returncode == 0, made.stderr
        yield root


def env_of(root: Path) -> dict[str, str]:
    return python_env(HERMES_HOME=str(root), HERMES_LOG_FORMAT="json", HERMES_LOG_LEVEL="debug")


def serving_pid(root: Path, profile: str, *, not_pid: int | None = None) -> int | None:
    state = read_json(root / "profiles" / profile / "gateway_state.json", default=None)
    if state and state.get("gateway_state") == "running" and state.get("pid") != not_pid:
        return state["pid"]
    return None


def logs(root: Path, profile: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_hermes("logs", "gateway", "-p", profile, *extra, env=env_of(root))


def test_json_logs_carry_their_process_and_no_secret_and_read_back_by_profile(mesh, sim):
    up = run_hermes("mesh", "up", "--programs", "--profiles", "coder,writer", env=env_of(mesh), timeout=120)
    assert up.returncode == 0, up.stderr
    first = {
        p: wait_for(lambda p=p: serving_pid(mesh, p), timeout=WAIT, what=f"{p} to serve") for p in ("coder", "writer")
    }
    # A sign-in: the auth worker (started by it, as JSON too) holds the account's tokens.
    hermes = JsonHermes(mesh, sim)
    login = hermes.login()
    sim.approve(login.until("Code")["user_code"], "ada@example.com")
    assert login.finish()[0] == 0
    # A planned restart of coder: it logs the drain, and its next process its start.
    os.kill(first["coder"], signal.SIGUSR1)
    wait_for(lambda: serving_pid(mesh, "coder", not_pid=first["coder"]), timeout=WAIT, what="coder's restart")

    curve = {curve_keys.server_secret(mesh, "gateway@writer").decode(), curve_keys.client_secret(mesh).decode()}
    secrets = {PROVIDER_KEY, *_tokens(mesh, sim), *curve}
    lines = []
    for path in [*mesh.glob("logs/*.log"), *mesh.glob("logs/mesh/hermes-gateway-*.log")]:
        lines += [(path.name, line) for line in path.read_text().splitlines() if line.strip()]
    services = set()
    for name, line in lines:
        record = json.loads(line)  # every line a record, not a text line among them
        assert set(FIELDS) <= set(record), (name, line)
        assert record["pid"] > 0 and len(record["instance_id"]) == 32, line
        services.add(record["service"])
        if name.startswith("hermes-gateway-"):
            assert (record["service"], record["profile"]) == ("gateway", name.removeprefix("hermes-gateway-")[:-4])
        for secret in secrets:
            assert secret not in line, (name, line)
    assert {"gateway", "auth_worker"} <= services, services

    shown = logs(mesh, "coder", "--json")
    assert shown.returncode == 0, shown.stderr
    records = [json.loads(line) for line in shown.stdout.splitlines()]
    assert {r["profile"] for r in records} == {"coder"}
    assert {r["pid"] for r in records} == {first["coder"], serving_pid(mesh, "coder")}
    assert any(r["message"].startswith("SIGUSR1: draining") for r in records)
    text = logs(mesh, "writer", "--lines", "20")
    assert text.returncode == 0 and f"gateway[{first['writer']}] INFO starting: serving writer" in text.stdout
    for out in (shown.stdout, text.stdout):
        assert not any(secret in out for secret in secrets)


def _tokens(root: Path, sim) -> set[str]:
    found = set()
    for request in sim.requests("/api/oauth/token"):
        found |= {request["form"].get("refresh_token"), request["form"].get("device_code")}
    account = store.read_account(root) or {}
    found |= {account.get("access_token"), account.get("refresh_token")}
    found.discard(None)
    assert len(found) >= 3
    return found


def test_follow_shows_a_new_record_and_stops_on_ctrl_c(mesh):
    up = run_hermes("mesh", "up", "--programs", "--profiles", "coder,writer", env=env_of(mesh), timeout=120)
    assert up.returncode == 0, up.stderr
    pid = wait_for(lambda: serving_pid(mesh, "coder"), timeout=WAIT, what="coder to serve")
    follower = subprocess.Popen(
        [*HERMES, "logs", "gateway", "-p", "coder", "--follow", "--json"],
        cwd=ROOT,
        env=env_of(mesh),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue(maxsize=1000)
    threading.Thread(target=lambda: [lines.put(line) for line in follower.stdout], daemon=True).start()
    try:
        assert json.loads(lines.get(timeout=WAIT))["message"].startswith("starting: serving coder")
        os.kill(pid, signal.SIGUSR1)
        record = json.loads(lines.get(timeout=WAIT))
        assert (record["pid"], record["profile"]) == (pid, "coder")
        assert record["message"].startswith("SIGUSR1: draining"), record
    finally:
        follower.send_signal(signal.SIGINT)
        _, err = follower.communicate(timeout=WAIT)
    assert follower.returncode == 130 and "Traceback" not in err, err


def test_what_cannot_be_read_is_a_typed_error(mesh):
    up = run_hermes("mesh", "up", "--programs", "--profiles", "coder", env=env_of(mesh), timeout=120)
    assert up.returncode == 0, up.stderr
    wait_for(lambda: serving_pid(mesh, "coder"), timeout=WAIT, what="coder to serve")
    for profile, code in (("ghost", "profile_not_found"), ("writer", "no_gateway_logs")):
        done = logs(mesh, profile, "--json")
        assert done.returncode != 0 and json.loads(done.stdout)["error"]["code"] == code, done.stdout
    assert json.loads(logs(mesh, "writer", "--json").stdout)["error"]["detail"]["field"] == "supervisor"
    path = mesh / "logs" / "mesh" / "hermes-gateway-coder.log"
    path.write_text("")
    empty = json.loads(logs(mesh, "coder", "--json").stdout)["error"]
    assert (empty["code"], empty["detail"]["field"], empty["detail"]["path"]) == ("no_gateway_logs", "path", str(path))
