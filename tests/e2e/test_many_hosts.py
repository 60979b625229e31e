"""One home, many hosts: a home in a network namespace of its own, joined by a cable each to
host A (gateways ``default`` and ``coder``) and host B (a ``coder`` too), each host a separate
install serving on CURVE TCP. The home imports both hosts' keys and is authorized on each; one
``hermes gateway status`` lists all three gateways, the two ``coder`` told apart by host; with
B's cable cut B's gateway is ``offline`` while A's run on, in ``gateway status`` and in the
fleet view, and ``running`` again once the cable is back."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from pathlib import Path

import pytest

from shared.mesh_tcp import TCP_ENV
from tests.support import netns
from tests.support.cli import HERMES, hermes
from tests.support.processes import ROOT, python_env, wait_for

# Run with the host tiers, one at a time (tests/support/parallel.py): `ip netns add` mounts on the host.
PORT = 7420
# Loose bounds for what takes a second or two: a machine under load is given its time.
START = 30.0
# A status with a host cut off answers within its one status bound (1 s) and the health probe
# of the gateways that answered (3 s at most): far less than this.
STATUS_RETURNS = 15.0
SHOWN = 30.0


@pytest.fixture
def star():
    with netns.opened(netns.Star()) as made:
        yield made


def _host(root: Path, tcp: str, client: str) -> dict[str, str]:
    """A host's install at ``root`` whose gateways bind as ``tcp`` says, with the home's client
    key ``client`` authorized to ask them and run a probe turn: its environment."""
    env = python_env(HERMES_HOME=str(root), **{TCP_ENV: tcp})
    assert hermes("mesh", "keys", "init", "--profile", "coder", env=env).returncode == 0
    done = hermes("mesh", "keys", "authorize", "home", client, "--grant", "gateway.turn", env=env)
    assert done.returncode == 0, done.stderr
    return env


def _import(home: Path, name: str, address: str, env: dict[str, str]) -> None:
    shown = hermes("mesh", "keys", "show", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    keys = home / f"{name}.json"
    keys.write_text(shown.stdout)
    done = hermes("mesh", "keys", "import", "--host", name, "--address", address, str(keys), home=home)
    assert done.returncode == 0, done.stderr


class _Top:
    """``hermes mesh top --json`` in the home: the latest row of each (host, profile)."""

    def __init__(self, star, env: dict[str, str]):
        self.proc = subprocess.Popen(
            [*star.exec(star.home), *HERMES, "mesh", "top", "--json"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.rows: dict[tuple[str, str], dict] = {}
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)

    def states(self) -> dict[tuple[str, str], str]:
        """The state of each other host's gateway, as the view last showed it."""
        while not self._lines.empty():
            line = json.loads(self._lines.get())
            if line["type"] == "gateway":
                self.rows[(line["host"], line["profile"])] = line
        return {key: row["state"] for key, row in self.rows.items() if key[0] != "local"}

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


def test_one_home_lists_every_hosts_gateways_and_a_cut_host_offline(star, short_dir):
    home, host_a, host_b = short_dir / "home", short_dir / "a", short_dir / "b"
    env_home = python_env(HERMES_HOME=str(home))
    assert hermes("mesh", "keys", "init", home=home).returncode == 0
    client = hermes("mesh", "keys", "show", "--client", home=home).stdout.strip()
    a, b = f"tcp://{star.address_a}", f"tcp://{star.address_b}"
    env_a = _host(host_a, f"gateway={a}:{PORT},gateway@coder={a}:{PORT + 2}", client)
    env_b = _host(host_b, f"gateway@coder={b}:{PORT}", client)
    _import(home, "a", star.address_a, env_a)
    _import(home, "b", star.address_b, env_b)
    started: list[subprocess.Popen] = []

    def gateway(ns: str, profile_home: Path, env: dict[str, str]) -> int:
        proc = star.start_gateway(ns, profile_home, env, timeout=START)
        started.append(proc)
        return proc.pid

    def status(*extra: str) -> tuple[subprocess.CompletedProcess[str], float]:
        began = time.monotonic()
        done = subprocess.run(
            [*star.exec(star.home), *HERMES, "gateway", *extra],
            cwd=ROOT,
            env=env_home,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done, time.monotonic() - began

    def listed() -> tuple[list[tuple[str, str, str, int | None]], float]:
        done, seconds = status("status", "--json")
        rows = json.loads(done.stdout)["gateways"]
        return [(g["host"], g["profile"], g["state"], g["pid"]) for g in rows], seconds

    top = None
    try:
        pids = {
            ("a", "default"): gateway(star.a, host_a, env_a),
            ("a", "coder"): gateway(star.a, host_a / "profiles" / "coder", env_a),
            ("b", "coder"): gateway(star.b, host_b / "profiles" / "coder", env_b),
        }
        running = [(host, profile, "running", pid) for (host, profile), pid in pids.items()]
        rows, seconds = listed()
        assert rows == running
        print(f"gateway status with both hosts up returned in {seconds:.2f} s")
        text = status("status")[0].stdout
        for name, host in (("a:default", "a"), ("a:coder", "a"), ("b:coder", "b")):
            assert any(line.split()[:2] == [name, host] for line in text.splitlines()), text
        listing = status("list")[0].stdout
        assert any(line.split()[:2] == ["b:coder", "b"] for line in listing.splitlines()), listing

        top = _Top(star, env_home)
        every_running = dict.fromkeys(pids, "running")
        wait_for(lambda: top.states() == every_running, timeout=SHOWN, what="the fleet view showing every host")

        star.set_link(star.b, up=False)
        cut = time.monotonic()
        wait_for(
            lambda: top.states() == {**every_running, ("b", "coder"): "offline"},
            timeout=SHOWN,
            what="the fleet view showing host B offline and host A running",
        )
        print(f"the fleet view showed host B offline {time.monotonic() - cut:.2f} s after the cut")
        rows, seconds = listed()
        assert rows == [*running[:2], ("b", "coder", "offline", None)]
        print(f"gateway status with host B cut off returned in {seconds:.2f} s")
        assert seconds < STATUS_RETURNS

        star.set_link(star.b, up=True)
        wait_for(lambda: listed()[0] == running, timeout=SHOWN, what="host B's gateway listed again")
        wait_for(lambda: top.states() == every_running, timeout=SHOWN, what="the fleet view showing host B back")
        assert all(proc.poll() is None for proc in started)
    finally:
        if top is not None:
            top.kill()
        for proc in started:
            proc.kill()
            proc.wait(timeout=10)
