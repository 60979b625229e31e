"""One home, many hosts, with real processes: two other installs on this machine, each with its
own auth worker on a loopback CURVE TCP port, imported by one home as hosts ``a`` and ``b``.
The home signs ``a`` in on ``a``'s own worker against the portal simulator, ``auth status``
and ``doctor`` cover both hosts, and a host whose worker is killed is ``offline``, one that no
longer authorizes the home ``refused``; no token or device code reaches anything the home
shows, keeps or logs."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from nous import store
from services.auth_worker import ops
from shared import homes
from shared.locks import probe
from shared.mesh_tcp import TCP_ENV
from shared.transport.call_rules import NO_RETRY
from tests.support.cli import HERMES, hermes
from tests.support.logins import Hermes
from tests.support.processes import python_env, wait_for
from tests.support.tcp import free_port_pair
from tests.support.workers import stop_and_check_workers

GRANTS = ("--grant", "auth_worker.sign_in", "--grant", "auth_worker.cancel")
# The home's own portal, which nothing may ask: a host signs in against its own.
NOWHERE = "http://127.0.0.1:9"


class Host:
    """Another install with its auth worker on CURVE TCP, imported by ``home`` as ``name``."""

    def __init__(self, name: str, root: Path, home: Path, portal: str):
        self.name, self.root = name, root
        self.env = python_env(
            HERMES_HOME=str(root),
            HERMES_PORTAL_URL=portal,
            **{TCP_ENV: f"auth_worker=tcp://127.0.0.1:{free_port_pair()}"},
        )
        self.worker: subprocess.Popen[bytes] | None = None
        assert hermes("mesh", "keys", "init", env=self.env).returncode == 0
        shown = hermes("mesh", "keys", "show", "--json", env=self.env)
        assert shown.returncode == 0, shown.stderr
        document = root.parent / f"{name}.json"
        document.write_text(shown.stdout)
        imported = hermes("mesh", "keys", "import", "--host", name, "--address", "127.0.0.1", str(document), home=home)
        assert imported.returncode == 0, imported.stderr
        client = hermes("mesh", "keys", "show", "--client", home=home).stdout.strip()
        authorized = hermes("mesh", "keys", "authorize", "home", client, *GRANTS, env=self.env)
        assert authorized.returncode == 0, authorized.stderr

    def start(self) -> None:
        self.worker = subprocess.Popen(
            [*HERMES[:2], "services.auth_worker"], env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        lock = homes.endpoint(self.root, ops.SERVICE, create=False, env={}).lock_path
        wait_for(lambda: self.worker.poll() is not None or probe(lock).held, timeout=30, what=f"{self.name}'s worker")
        assert self.worker.poll() is None, self.worker.stderr.read().decode() if self.worker.stderr else ""
        # The worker starts its home's handoff retries: once they serve, a stop finds them.
        retries = homes.endpoint(self.root, "handoff_retry", create=False, env={}).lock_path
        wait_for(lambda: probe(retries).held, timeout=30, what=f"{self.name}'s handoff retries")

    def kill(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            self.worker.kill()
        if self.worker is not None:
            self.worker.wait(timeout=10)


@pytest.fixture
def hosts(short_dir, root, sim):
    assert hermes("mesh", "keys", "init", home=root).returncode == 0
    made = {name: Host(name, short_dir / name, root, sim.url) for name in ("a", "b")}
    try:
        for host in made.values():
            host.start()
        yield made
    finally:
        for host in made.values():
            host.kill()
            stop_and_check_workers(host.root)  # the handoff retries each worker started


def _rows(home: Hermes) -> dict[str, dict]:
    done = home.run("auth", "status", "nous", "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["signed_in"] is False  # the home's own install: never signed in here
    return {row["host"]: row for row in status["hosts"]}


def _doctor(home: Hermes) -> dict[str, dict]:
    done = home.run("doctor", "--json")
    checks = json.loads(done.stdout)["checks"]
    return {check["name"]: check for check in checks if check["name"].startswith("host ")}


def test_a_home_signs_each_host_in_on_its_own_worker_and_sees_every_host(root, sim, hosts):
    home = Hermes(root, sim, portal_url=NOWHERE)

    doctor = _doctor(home)
    assert set(doctor) == {"host a: auth_worker", "host b: auth_worker"}
    for check in doctor.values():
        assert (check["status"], check["detail"]["state"], check["detail"]["trusted"]) == ("ok", "ok", True), check

    login = home.login("--host", "a")
    code = login.until("Code")
    assert code["verification_uri_complete"].startswith(sim.url)  # the host's portal, not the home's
    sim.approve(code["user_code"], "ada@example.com", tier="pro")
    rc, done = login.finish()
    assert (rc, done["state"], done["email"]) == (0, "Completed", "ada@example.com"), login.stderr
    assert store.read_account(hosts["a"].root)["email"] == "ada@example.com"
    assert store.read_account(hosts["b"].root) is None
    assert store.read_account(root) is None  # signed in once, on the install that was asked

    rows = _rows(home)
    assert (rows["a"]["state"], rows["a"]["signed_in"], rows["a"]["account"]["email"]) == (
        "signed_in",
        True,
        "ada@example.com",
    )
    assert (rows["b"]["state"], rows["b"]["signed_in"]) == ("not_signed_in", False)
    text = home.run("auth", "status", "nous").stdout
    assert "host a: signed in as ada@example.com (pro tier)" in text
    assert "host b: not signed in: `hermes auth login nous --host b`" in text
    again = home.login("--host", "a")
    assert again.finish()[0] == 2  # AlreadySignedIn, said by a's worker

    hosts["b"].kill()
    rows = _rows(home)
    assert (rows["a"]["state"], rows["b"]["state"], rows["b"]["signed_in"]) == ("signed_in", "offline", None)
    assert rows["b"]["code"] == "timeout"
    doctor = _doctor(home)
    assert (doctor["host a: auth_worker"]["status"], doctor["host a: auth_worker"]["detail"]["state"]) == ("ok", "ok")
    offline = doctor["host b: auth_worker"]
    assert (offline["status"], offline["detail"]["state"], offline["detail"]["code"]) == ("warn", "offline", "timeout")
    gone = home.run("auth", "login", "nous", "--host", "b", "--no-browser", "--json")
    assert gone.returncode == 1
    assert json.loads(gone.stdout.splitlines()[-1])["error"]["code"] == "host_offline"

    revoked = hermes("mesh", "keys", "revoke", "home", env=hosts["a"].env)
    assert revoked.returncode == 0, revoked.stderr
    rows = _rows(home)
    assert (rows["a"]["state"], rows["a"]["code"]) == ("refused", "auth_failed")
    refused = _doctor(home)["host a: auth_worker"]
    assert (refused["status"], refused["detail"]["state"]) == ("fail", "refused")
    _assert_no_secret_shown(home, sim, hosts["a"])


def test_a_ctrl_c_cancels_on_the_host_and_its_status_answer_carries_no_secret(root, sim, hosts):
    """A Ctrl-C cancels the sign-in on the host's worker (the cancel the host granted); then
    the op ``auth status`` asks another host's worker, called as the home calls it."""
    from hermes_cli.service_client import connect
    from shared import mesh_hosts

    home = Hermes(root, sim, portal_url=NOWHERE)
    cancelled = home.login("--host", "b")
    code = cancelled.until("Code")
    cancelled.until("Waiting")
    cancelled.proc.send_signal(signal.SIGINT)
    rc, state = cancelled.finish()
    assert (rc, state["state"]) == (130, "Cancelled"), cancelled.stderr
    sim.approve(code["user_code"], "mallory@example.com")  # too late: the sign-in is gone
    assert store.read_account(hosts["b"].root) is None

    login = home.login("--host", "a")
    sim.approve(login.until("Code")["user_code"], "ada@example.com")
    assert login.finish()[0] == 0, login.stderr
    endpoint = mesh_hosts.endpoint(root, mesh_hosts.host(root, "a"), ops.SERVICE)
    with connect(endpoint, retry=NO_RETRY) as client:
        home.outputs.append(json.dumps(client.call(ops.STATUS, timeout=30)))
    home.run("auth", "status", "nous")
    home.run("auth", "status", "nous", "--json")
    _assert_no_secret_shown(home, sim, hosts["a"])


def _assert_no_secret_shown(home: Hermes, sim, host: Host) -> None:
    """Every token and device code of this test, searched for in every output the home got,
    every file it holds, and the host's logs."""
    secrets = set()
    for request in sim.requests("/api/oauth/token"):
        secrets |= {request["form"].get("refresh_token"), request["form"].get("device_code")}
    account = store.read_account(host.root)
    assert account is not None
    secrets |= {account["access_token"], account["refresh_token"]}
    secrets.discard(None)
    texts = list(home.outputs)
    files = [p for p in home.root.rglob("*") if p.is_file() and not p.name.endswith((".ctl", ".pub"))]
    files += list((host.root / "logs").glob("*.log"))
    texts += [path.read_text(errors="replace") for path in files]
    for text in texts:
        for secret in secrets:
            assert secret not in text
