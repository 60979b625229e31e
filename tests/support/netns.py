"""Network namespaces joined by veth pairs: hosts on one machine. ``TwoHosts``: two joined
by one cable; ``Star``: a home joined to two hosts, one cable each, so one host's cable is cut
while the other's stays.

Names are unique per run (prefix ``hm-``), an existing namespace of that name refuses the
setup, and ``close`` always deletes what was made, including the ``/run/netns`` mount that
``ip netns add`` makes when there was none. ``unavailable`` says why the machine
cannot do it (not root, no ``ip``, namespaces refused), for a clean skip.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from tests.support.processes import ROOT, read_state, wait_for

PREFIX = "hm-"
NETNS_DIR = "/run/netns"


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


def existing() -> set[str]:
    done = _ip("netns", "list")
    return {line.split()[0] for line in done.stdout.splitlines() if line.strip()}


def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is missing"
    return None


class _Namespaces:
    """Namespaces made by ``_make``'s steps; every one of them deleted by ``close``."""

    def __init__(self) -> None:
        self.tag = secrets.token_hex(3)
        self.made: list[str] = []
        self._had_netns_dir = os.path.lexists(NETNS_DIR)

    def open(self) -> str | None:
        """Make the namespaces: None, or why they could not be made."""
        raise NotImplementedError  # Not a HermesError: each kind of namespaces says how it is made

    def _make(self, names: set[str], steps: list[tuple[str, ...]]) -> str | None:
        clash = existing() & names
        if clash:
            raise RuntimeError(f"refusing to reuse existing network namespaces {sorted(clash)}")
        for step in steps:
            done = _ip(*step)
            if step[:2] == ("netns", "add") and done.returncode == 0:
                self.made.append(step[2])
            if done.returncode != 0:
                self.close()
                return f"`ip {' '.join(step)}` failed: {done.stderr.strip()}"
        return None

    def _set(self, host: str, veth: str, up: bool) -> None:
        done = _ip("-n", host, "link", "set", veth, "up" if up else "down")
        if done.returncode != 0:
            raise RuntimeError(f"cannot set {veth} in {host} {'up' if up else 'down'}: {done.stderr.strip()}")

    def exec(self, host: str) -> list[str]:
        """The argv prefix that runs a command in namespace ``host``."""
        return ["ip", "netns", "exec", host]

    def start_gateway(self, host: str, home: Path, env: dict[str, str], timeout: float = 30.0) -> subprocess.Popen:
        """A gateway of ``home`` started in namespace ``host``, once its state file says it
        runs; killed if it does not within ``timeout``. The caller stops it."""
        home.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(
            [*self.exec(host), sys.executable, "-m", "services.gateway"],
            cwd=ROOT,
            env={**env, "HERMES_HOME": str(home)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(
                lambda: proc.poll() is None and (read_state(home) or {}).get("gateway_state") == "running",
                timeout=timeout,
                what=f"the gateway of {home} in {host}",
            )
        except BaseException:
            proc.kill()
            proc.wait(timeout=10)
            raise
        return proc

    def stragglers(self) -> list[int]:
        """Every process still in any of them, killed: a test ends what it started there, and
        one it left would outlive the namespace's name."""
        left: list[int] = []
        for name in self.made:
            listed = _ip("netns", "pids", name)
            left += [int(pid) for pid in listed.stdout.split() if pid.isdigit()]
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return left

    def close(self) -> None:
        for name in self.made:
            _ip("netns", "del", name)  # takes the veth pair with it
        self.made.clear()
        if not self._had_netns_dir and not existing():
            subprocess.run(["umount", NETNS_DIR], capture_output=True, timeout=20)
            try:
                os.rmdir(NETNS_DIR)
            except OSError:
                pass  # still mounted or not empty: someone else's namespaces now


def _cable(
    one: str, veth_one: str, address_one: str, other: str, veth_other: str, address_other: str
) -> list[tuple[str, ...]]:
    """The steps that join namespaces ``one`` and ``other`` by a veth pair, each end addressed."""
    return [
        ("link", "add", veth_one, "netns", one, "type", "veth", "peer", "name", veth_other, "netns", other),
        ("-n", one, "addr", "add", f"{address_one}/24", "dev", veth_one),
        ("-n", other, "addr", "add", f"{address_other}/24", "dev", veth_other),
        ("-n", one, "link", "set", veth_one, "up"),
        ("-n", other, "link", "set", veth_other, "up"),
    ]


class TwoHosts(_Namespaces):
    """Namespaces ``a`` and ``b`` with addresses ``address_a`` and ``address_b``, joined by the
    veth ends ``veth_a`` (in ``a``) and ``veth_b``."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = f"{PREFIX}{self.tag}-a", f"{PREFIX}{self.tag}-b"
        self.address_a, self.address_b = "10.231.7.1", "10.231.7.2"
        self.veth_a, self.veth_b = f"{self.tag}a", f"{self.tag}b"

    def open(self) -> str | None:
        """Make both hosts; the reason when the machine refused (nothing is left behind)."""
        return self._make(
            {self.a, self.b},
            [
                ("netns", "add", self.a),
                ("netns", "add", self.b),
                *_cable(self.a, self.veth_a, self.address_a, self.b, self.veth_b, self.address_b),
                ("-n", self.a, "link", "set", "lo", "up"),
                ("-n", self.b, "link", "set", "lo", "up"),
            ],
        )

    def set_link(self, host: str, up: bool) -> None:
        """Bring ``host``'s end of the veth pair up or down: the cable between the hosts,
        plugged or cut (a down end takes the other's carrier with it)."""
        self._set(host, self.veth_a if host == self.a else self.veth_b, up)


class Star(_Namespaces):
    """Namespace ``home`` joined to hosts ``a`` (at ``address_a``) and ``b`` (``address_b``) by a
    cable each, on subnets of their own: ``home`` reaches both, and neither host the other."""

    def __init__(self) -> None:
        super().__init__()
        self.home, self.a, self.b = (f"{PREFIX}{self.tag}-{n}" for n in ("h", "a", "b"))
        self.address_a, self.address_b = "10.231.8.1", "10.231.9.1"
        self._veths = {self.a: f"{self.tag}a", self.b: f"{self.tag}b"}

    def open(self) -> str | None:
        """Make the home and both hosts; the reason when the machine refused (nothing is left)."""
        names = (self.home, self.a, self.b)
        steps: list[tuple[str, ...]] = [("netns", "add", name) for name in names]
        for host, address in ((self.a, self.address_a), (self.b, self.address_b)):
            home_end = address.rsplit(".", 1)[0] + ".254"
            steps += _cable(host, self._veths[host], address, self.home, self._veths[host] + "h", home_end)
        steps += [("-n", name, "link", "set", "lo", "up") for name in names]
        return self._make(set(names), steps)

    def set_link(self, host: str, up: bool) -> None:
        """Cut or plug the cable between ``host`` and the home (its end of it)."""
        self._set(host, self._veths[host], up)


N = TypeVar("N", bound=_Namespaces)


@contextlib.contextmanager
def opened(made: N) -> Iterator[N]:
    """``made``, opened, for a test: skipped where namespaces cannot be made; on the way out
    every namespace it made is deleted, and a namespace or a process left behind fails the test."""
    why = unavailable()
    if why:
        pytest.skip(why)
    try:
        why = made.open()
        if why:
            pytest.skip(f"cannot make network namespaces here: {why}")
        yield made
    finally:
        left = made.stragglers()
        names = set(made.made)
        made.close()
        assert not existing() & names, "network namespaces were left behind"
    assert not left, f"processes were left running in the namespaces: {left}"
