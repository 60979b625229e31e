"""A private podman for the container tier: its configuration and storage in one temp dir, and
proof that the host is left as it was found.

Every podman call gets ``CONTAINERS_CONF`` and ``CONTAINERS_STORAGE_CONF`` pointing into the
work dir (``netns = "none"``: a container that names no network gets only ``lo``, so a mistake
cannot make a bridge; runc and cgroupfs; the ulimits root without CAP_SYS_RESOURCE can set), so
``podman system reset`` wipes only this sandbox's storage. What podman still writes outside it
(``libpod_parent`` cgroups, ``/var/lib/containers``) is removed on the way out when it was not
there before, and the host's network tables, links, ``ip_forward``, mounts and podman dirs are
compared with a snapshot taken on the way in: any difference fails the run.

A run killed before its cleanup cannot clean up, so the sandbox makes ``/var/lib/containers``
itself, with a record inside naming its process, its work dir and the cgroups that were there
before. The next run finds that record and, once that process is gone, removes exactly what the
killed run left; while it lives, the next run refuses. A directory without the record, or with
anything in it podman's private run does not write, is someone else's.
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

from shared.identity import ProcessIdentity, current_identity, is_alive
from tests.support.processes import ROOT

COMPOSE = ROOT / ".venv-containers" / "bin" / "podman-compose"
TOOLS = ("podman", "runc", "catatonit", "debootstrap", "docker-compose")
OPT_OUT = "HERMES_CONTAINER_TIER"
# Someone else's podman state: the sandbox refuses to run beside it rather than touch it.
FOREIGN_STATE: tuple[Path, ...] = (Path("/var/lib/containers"), Path("/run/libpod"))
RECORD = ".hermes-mesh-sandbox.json"
# All podman writes in STATE_DIR under the private configuration (no setting moves it).
PODMAN_WRITES = frozenset({"cache", "cache/blob-info-cache-v1.boltdb"})
WORK_PREFIX = "hm-podman-"
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


def _podman_cgroups(root: Path = CGROUP_ROOT) -> str:
    found = [str(p) for p in root.glob("**/libpod_parent*")]
    found += [str(p) for p in root.glob("**/machine.slice/libpod-*")]
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
        state_dir = FOREIGN_STATE[0]
        recover_interrupted_run(state_dir)
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
        self.work = Path(tempfile.mkdtemp(prefix=WORK_PREFIX))
        claim_state_dir(state_dir, self.work, self._had_cgroups)
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
        self.env = _private_env(self.work)
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
        return self.build(repo, tag).stdout.strip().splitlines()[-1]

    def build(self, repo: Path, tag: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``build_image``'s run of ``scripts/build-image.sh``, its output whole (progress on stderr)."""
        argv = ["bash", str(repo / "scripts" / "build-image.sh"), "--engine", "podman", "--debootstrap", "--tag", tag]
        return self._run(argv, timeout=BUILD_TIMEOUT, check=True, env=env)

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
        _reset_podman(self.work)
        _unmount_under(self.work)
        _remove_new_cgroups(self._had_cgroups)
        shutil.rmtree(self.work, ignore_errors=True)
        # Absent on the way in (or the sandbox refused): ours. The record goes last, so a kill
        # before this line leaves it for the next run to finish the job.
        for path in FOREIGN_STATE:
            shutil.rmtree(path, ignore_errors=True)


def claim_state_dir(state_dir: Path, work: Path, had_cgroups: set[str]) -> None:
    """Make ``state_dir`` before podman does, with the record of this run inside: built beside
    it and renamed, so the directory never exists without its record."""
    draft = Path(tempfile.mkdtemp(prefix=".hm-claim-", dir=state_dir.parent))
    record = {"owner": current_identity().to_dict(), "work": str(work), "cgroups": sorted(had_cgroups)}
    (draft / RECORD).write_text(json.dumps(record))
    draft.rename(state_dir)


def interrupted_run(state_dir: Path) -> dict[str, Any] | None:
    """The record of a killed run that ``state_dir`` holds; None when it is absent, has no
    record, holds anything podman's private run does not write (then it is not ours alone), or
    names a process still running (then the run is not over)."""
    try:
        record = json.loads((state_dir / RECORD).read_text())
    except (OSError, ValueError):
        return None
    found = {str(p.relative_to(state_dir)) for p in state_dir.rglob("*")} - {RECORD}
    if not found <= PODMAN_WRITES or not isinstance(record, dict):
        return None
    work, cgroups = record.get("work"), record.get("cgroups")
    if not isinstance(work, str) or not isinstance(cgroups, list):
        return None
    try:
        owner = ProcessIdentity.from_dict(record.get("owner") or {})
    except ValueError:
        return None
    return None if is_alive(owner) else record


def recover_interrupted_run(state_dir: Path, cgroup_root: Path = CGROUP_ROOT) -> bool:
    """Remove what a killed run left (its work dir, mounts, new cgroups and ``state_dir``);
    whether there was one."""
    for draft in state_dir.parent.glob(".hm-claim-*"):  # killed before the rename
        if {p.name for p in draft.iterdir()} <= {RECORD}:
            shutil.rmtree(draft)
    record = interrupted_run(state_dir)
    if record is None:
        return False
    work = Path(record["work"])
    # Only a sandbox work dir: the record is a file on the host, not a licence to delete anything.
    if work.parent == Path(tempfile.gettempdir()) and work.name.startswith(WORK_PREFIX):
        if (work / "storage.conf").is_file():  # its containers outlive it: conmon is their parent
            _reset_podman(work)
        _unmount_under(work)
        shutil.rmtree(work, ignore_errors=True)
    _remove_new_cgroups({str(c) for c in record["cgroups"]}, cgroup_root)
    shutil.rmtree(state_dir)
    return True


def _private_env(work: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CONTAINERS_CONF": str(work / "containers.conf"),
        "CONTAINERS_STORAGE_CONF": str(work / "storage.conf"),
    }


def _reset_podman(work: Path) -> None:
    """Remove every container, pod and image of the private podman in ``work``."""
    env = _private_env(work)

    def podman(*args: str, timeout: float = TIMEOUT) -> str:
        return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, env=env).stdout

    with contextlib.suppress(subprocess.TimeoutExpired, OSError):
        ids = podman("ps", "-aq").split()
        if ids:
            podman("rm", "-f", "-t", "0", *ids)
        podman("pod", "rm", "-f", "-a")
        podman("system", "reset", "-f", timeout=120)


def _unmount_under(work: Path) -> None:
    for line in sorted(Path("/proc/self/mountinfo").read_text().splitlines(), reverse=True):
        point = line.split()[4]
        if point.startswith(f"{work}/") or point == str(work):
            subprocess.run(["umount", "-l", point], capture_output=True, timeout=TIMEOUT)


def _remove_new_cgroups(had: set[str], root: Path = CGROUP_ROOT) -> None:
    # A cgroup goes with rmdir once its children are gone; one still in use stays (EBUSY).
    for cgroup in sorted(set(_podman_cgroups(root).splitlines()) - had, key=len, reverse=True):
        for parent, _dirs, _files in os.walk(cgroup, topdown=False):
            with contextlib.suppress(OSError):
                os.rmdir(parent)
