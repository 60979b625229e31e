"""A private podman for the container tier: its configuration and storage in one temp dir, and
proof that the host is left as it was found.

Every podman call gets ``CONTAINERS_CONF`` and ``CONTAINERS_STORAGE_CONF`` pointing into the
work dir (``netns = "none"``: a container that names no network gets only ``lo``, so a mistake
cannot make a bridge; runc and cgroupfs; the ulimits root without CAP_SYS_RESOURCE can set), so
``podman system reset`` wipes only this sandbox's storage. What podman still writes outside it
(``libpod_parent`` cgroups, ``/var/lib/containers``) is removed on the way out when it was not
there before, and the host's network tables, links, ``ip_forward``, mounts and podman dirs are
compared with a snapshot taken on the way in: any difference fails the run.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from tests.support.processes import ROOT

COMPOSE = ROOT / ".venv-containers" / "bin" / "podman-compose"
TOOLS = ("podman", "runc", "catatonit", "debootstrap", "docker-compose")
OPT_OUT = "HERMES_CONTAINER_TIER"
# Someone else's podman state: the sandbox refuses to run beside it rather than touch it.
FOREIGN_STATE: tuple[Path, ...] = (Path("/var/lib/containers"), Path("/run/libpod"))
CGROUP_ROOT = Path("/sys/fs/cgroup")
# What podman may create on the host although every path of its own is in the work dir.
PODMAN_DIRS = ("/run/libpod", "/run/netns", "/var/lib/cni", "/etc/cni/net.d/cni.lock", "/var/lib/containers")
BRIDGELESS_MODES = ("none", "host")
BRIDGELESS_PREFIXES = ("container:", "ns:")
TIMEOUT = 60.0
BUILD_TIMEOUT = 600.0


class SandboxRefused(Exception):
    """The host is not in a state the sandbox can promise to restore."""


class SandboxLeak(Exception):
    """The host differs from how the sandbox found it."""


def unavailable() -> str | None:
    """Why this machine cannot run the container tier, in one line; None when it can."""
    if os.environ.get(OPT_OUT) == "0":
        return f"{OPT_OUT}=0"
    if os.geteuid() != 0:
        return "the private podman needs root"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if not COMPOSE.is_file():
        missing.append(str(COMPOSE.relative_to(ROOT)))
    if missing:
        return f"not installed: {', '.join(missing)} (scripts/container-setup.sh installs them)"
    return None


def _text(argv: Sequence[str]) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=TIMEOUT)
    except FileNotFoundError:
        return "(not installed)"
    return done.stdout if done.returncode == 0 else f"(exit {done.returncode})"


def _links() -> str:
    # Names and flags only: counters and qdisc state change by themselves.
    return "\n".join(sorted(" ".join(line.split()[1:3]) for line in _text(["ip", "-o", "link"]).splitlines()))


def _mounts() -> str:
    rows = set()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        after = fields.index("-")
        rows.add(f"{fields[4]} {fields[after + 1]}")
    return "\n".join(sorted(rows))


def _podman_cgroups() -> str:
    found = [str(p) for p in CGROUP_ROOT.glob("**/libpod_parent*")]
    found += [str(p) for p in CGROUP_ROOT.glob("**/machine.slice/libpod-*")]
    return "\n".join(sorted(found))


def host_state() -> dict[str, str]:
    """What a container run could change on this host, as text per aspect."""
    return {
        "links": _links(),
        "nft": _text(["nft", "list", "ruleset"]),
        "iptables": _text(["iptables-save"]) if shutil.which("iptables-save") else "",
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text().strip(),
        "mounts": _mounts(),
        "podman_dirs": "\n".join(f"{path} {os.path.lexists(path)}" for path in PODMAN_DIRS),
        "cgroups": _podman_cgroups(),
    }


def state_differences(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """One entry per aspect that differs (a few lines of unified diff); [] when equal."""
    found = []
    for aspect in sorted(set(before) | set(after)):
        old, new = before.get(aspect, ""), after.get(aspect, "")
        if old != new:
            diff = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
            found.append(f"{aspect}: " + " | ".join(list(diff)[2:12]))
    return found


def compose_config(files: Sequence[Path], env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The merged configuration of compose ``files``, as ``docker-compose config`` gives it."""
    argv = ["docker-compose", *(f"--file={f}" for f in files), "config"]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=TIMEOUT, env={"PATH": "/usr/bin:/bin", **(env or {})}
    )
    if done.returncode != 0:
        raise AssertionError(f"docker-compose config: exit {done.returncode}: {done.stderr[-2000:]}")
    return YAML(typ="safe").load(io.StringIO(done.stdout))


def refuse_bridges(files: Sequence[Path], env: Mapping[str, str] | None = None) -> None:
    """Refuse to bring up compose ``files`` when any service would get a bridge."""
    bridged = bridged_services(compose_config(files, env))
    if bridged:
        raise SandboxRefused(f"these services would get a bridge: {', '.join(bridged)}")


def _no_bridge(mode: str) -> bool:
    return mode in BRIDGELESS_MODES or mode.startswith(BRIDGELESS_PREFIXES)


def bridged_services(config: Mapping[str, Any]) -> list[str]:
    """The services of a merged compose configuration (``config`` parsed) that would get a
    bridge: every one without a network_mode of none, host or another container's."""
    services = config.get("services") or {}
    return sorted(name for name, spec in services.items() if not _no_bridge(str((spec or {}).get("network_mode", ""))))


class PodmanSandbox:
    """A private podman in one temp dir (a context manager): refuses to start beside foreign
    podman state, and on the way out removes everything and fails on any change to the host."""

    def __init__(self) -> None:
        self.work = Path()
        self.env: dict[str, str] = {}
        self._before: dict[str, str] = {}
        self._had_cgroups: set[str] = set()

    def __enter__(self) -> PodmanSandbox:
        for path in FOREIGN_STATE:
            if os.path.lexists(path):
                raise SandboxRefused(f"{path} exists: another podman's state, which this tier must not touch")
        if (
            Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() != "0"
            or Path("/sys/class/net/cni-podman0").exists()
        ):
            raise SandboxRefused("the host already forwards or has podman's bridge: it could not be proven unchanged")
        self._before = host_state()
        self._had_cgroups = set(self._before["cgroups"].splitlines())
        self.work = Path(tempfile.mkdtemp(prefix="hm-podman-"))
        (self.work / "cni").mkdir()
        (self.work / "containers.conf").write_text(
            "[containers]\n"
            'default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n'
            'netns = "none"\n'
            "[engine]\n"
            'runtime = "runc"\n'
            'cgroup_manager = "cgroupfs"\n'
            'events_logger = "file"\n'
            f'tmp_dir = "{self.work / "libpod"}"\n'
            "[network]\n"
            f'network_config_dir = "{self.work / "cni"}"\n'
        )
        (self.work / "storage.conf").write_text(
            f'[storage]\ndriver = "overlay"\ngraphroot = "{self.work / "storage"}"\nrunroot = "{self.work / "run"}"\n'
        )
        self.env = {
            **os.environ,
            "CONTAINERS_CONF": str(self.work / "containers.conf"),
            "CONTAINERS_STORAGE_CONF": str(self.work / "storage.conf"),
        }
        return self

    def podman(self, *args: str, timeout: float = TIMEOUT, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self._run(["podman", *args], timeout=timeout, check=check)

    def compose(
        self,
        project: str,
        files: Sequence[Path],
        *args: str,
        env: Mapping[str, str] | None = None,
        timeout: float = 120.0,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        argv = [str(COMPOSE), "-p", project, *(f"-f={f}" for f in files), *args]
        return self._run(argv, timeout=timeout, check=check, env=env, cwd=Path(files[0]).parent)

    def _run(
        self,
        argv: list[str],
        *,
        timeout: float,
        check: bool,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env={**self.env, **(env or {})}, cwd=cwd
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv[:4])}... exit {done.returncode}: {done.stderr[-2000:]}")
        return done

    def build_image(self, repo: Path, tag: str = "localhost/hermes-mesh:test") -> str:
        """The image of ``repo``'s HEAD on a debootstrap base; its id."""
        argv = ["bash", str(repo / "scripts" / "build-image.sh"), "--engine", "podman", "--debootstrap", "--tag", tag]
        done = self._run(argv, timeout=BUILD_TIMEOUT, check=True)
        return done.stdout.strip().splitlines()[-1]

    def inspect(self, name: str) -> dict[str, Any]:
        return json.loads(self.podman("inspect", name).stdout)[0]

    def bridged(self) -> list[str]:
        """Containers whose network is not none, the host's or another container's: any that
        got a bridge."""
        names = self.podman("ps", "-a", "--format", "{{.Names}}").stdout.split()
        return [n for n in names if not _no_bridge(str(self.inspect(n)["HostConfig"]["NetworkMode"]))]

    def __exit__(self, *exc_info: object) -> None:
        try:
            self._remove_everything()
        finally:
            differences = state_differences(self._before, host_state())
        if differences:
            raise SandboxLeak("the container tier changed the host:\n" + "\n".join(differences))

    def _remove_everything(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            ids = self.podman("ps", "-aq", check=False).stdout.split()
            if ids:
                self.podman("rm", "-f", "-t", "0", *ids, check=False)
            self.podman("pod", "rm", "-f", "-a", check=False)
            self.podman("system", "reset", "-f", timeout=120, check=False)
        for line in sorted(Path("/proc/self/mountinfo").read_text().splitlines(), reverse=True):
            point = line.split()[4]
            if point.startswith(str(self.work)):
                subprocess.run(["umount", "-l", point], capture_output=True, timeout=TIMEOUT)
        for cgroup in sorted(set(_podman_cgroups().splitlines()) - self._had_cgroups, key=len, reverse=True):
            subprocess.run(
                ["find", cgroup, "-depth", "-type", "d", "-exec", "rmdir", "{}", ";"],
                capture_output=True,
                timeout=TIMEOUT,
            )
        for path in FOREIGN_STATE:  # absent on the way in (or the sandbox refused): ours
            shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(self.work, ignore_errors=True)
