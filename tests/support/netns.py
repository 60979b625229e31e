"""Two network namespaces joined by a veth pair: two hosts on one machine.

Names are unique per run (prefix ``hm-``), an existing namespace of that name refuses the
setup, and ``close`` always deletes what was made, including the ``/run/netns`` mount that
``ip netns add`` makes when there was none. ``unavailable`` says why the machine
cannot do it (not root, no ``ip``, namespaces refused), for a clean skip.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess

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


class TwoHosts:
    """Namespaces ``a`` and ``b`` with addresses ``address_a`` and ``address_b``, joined by the
    veth ends ``veth_a`` (in ``a``) and ``veth_b``."""

    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        self.a, self.b = f"{PREFIX}{tag}-a", f"{PREFIX}{tag}-b"
        self.address_a, self.address_b = "10.231.7.1", "10.231.7.2"
        self.veth_a, self.veth_b = f"{self.a[3:9]}a", f"{self.a[3:9]}b"
        self.made: list[str] = []
        self._had_netns_dir = os.path.lexists(NETNS_DIR)

    def open(self) -> str | None:
        """Make both hosts; the reason when the machine refused (nothing is left behind)."""
        clash = existing() & {self.a, self.b}
        if clash:
            raise RuntimeError(f"refusing to reuse existing network namespaces {sorted(clash)}")
        veth_a, veth_b = self.veth_a, self.veth_b
        steps = [
            ("netns", "add", self.a),
            ("netns", "add", self.b),
            ("link", "add", veth_a, "netns", self.a, "type", "veth", "peer", "name", veth_b, "netns", self.b),
            ("-n", self.a, "addr", "add", f"{self.address_a}/24", "dev", veth_a),
            ("-n", self.b, "addr", "add", f"{self.address_b}/24", "dev", veth_b),
            ("-n", self.a, "link", "set", veth_a, "up"),
            ("-n", self.b, "link", "set", veth_b, "up"),
            ("-n", self.a, "link", "set", "lo", "up"),
            ("-n", self.b, "link", "set", "lo", "up"),
        ]
        for step in steps:
            done = _ip(*step)
            if step[:2] == ("netns", "add") and done.returncode == 0:
                self.made.append(step[2])
            if done.returncode != 0:
                self.close()
                return f"`ip {' '.join(step)}` failed: {done.stderr.strip()}"
        return None

    def set_link(self, host: str, up: bool) -> None:
        """Bring ``host``'s end of the veth pair up or down: the cable between the hosts,
        plugged or cut (a down end takes the other's carrier with it)."""
        veth = self.veth_a if host == self.a else self.veth_b
        done = _ip("-n", host, "link", "set", veth, "up" if up else "down")
        if done.returncode != 0:
            raise RuntimeError(f"cannot set {veth} in {host} {'up' if up else 'down'}: {done.stderr.strip()}")

    def exec(self, host: str) -> list[str]:
        """The argv prefix that runs a command in namespace ``host``."""
        return ["ip", "netns", "exec", host]

    def stragglers(self) -> list[int]:
        """Every process still in either host, killed: a test ends what it started there, and
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
