"""A real systemd 252 system manager (and a user manager under it) in private namespaces, for
the systemd tier (``tests/systemd``), as the project's systemd sandbox design lays out.

Done carelessly, a second systemd damages the host: the stock ``sysinit.target`` empties the
host's ``/tmp``, and a manager started in the host's root cgroup moves every host process into
its own ``init.scope``. So everything the manager could touch is private, and each safeguard
is established before the next step or the sandbox is refused (``Refused``, a failure), never
run without it:

- a fresh cgroup below this process's own, in the cgroup2 hierarchy and (on a hybrid host) in
  the ``name=systemd`` v1 one, which the launcher joins before anything else;
- ``setsid unshare --pid --fork --mount-proc --uts --ipc --net --cgroup --propagation private
  --kill-child=SIGKILL``: killing the namespace's PID 1 kills everything in it;
- inside, before systemd: ``/`` made private again, tmpfs on ``/tmp``, ``/run``, ``/var/log``,
  ``/var/lib/systemd``; ``/proc/sys`` and ``/sys`` read-only (``fs.file-max`` and
  ``fs.nr_open`` are not namespaced); a cgroup2 of its own on ``/sys/fs/cgroup``; ``/etc``
  read-only with a directory of the work dir over ``/etc/systemd/system``;
- an exclusive unit path holding empty stand-ins for the stock targets, no generators, and
  journald without ``systemd-journald-dev-log.socket`` (which would make the host's ``/dev/log``).

The work dir (installs, homes, the private unit dirs) is on disk under a fresh
``mktemp -d -p /var/tmp``, since ``/tmp`` inside is not the host's; one on tmpfs is refused.
The project's own tree (its code and ``.venv``) is bound back at its path when it lies below
a dir the private mounts hide (a checkout in ``/tmp``).
Commands run inside through ``run``, which joins the nested cgroups and then ``nsenter``s,
only once it has checked that the target is systemd and that, inside, ``/etc/systemd/system``
is a mount point and ``/run/systemd/system`` exists.

``close`` stops the gateways (bounded), SIGKILLs the namespace's PID 1, waits (bounded) for
the nested cgroups to empty and removes them depth first, then fails if any process, cgroup or
mount of the sandbox is left, or if the host changed: the canary in the host's ``/tmp`` (same
inode, same mtime), ``/dev/log``, the host's unit dirs, ``fs.file-max`` and ``fs.nr_open``, its
mounts. A machine that cannot do this at all (not root, no namespaces, no systemd 252, no
writable cgroup2) makes ``unavailable`` say why, for one clean skip.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

SYSTEMD = Path("/lib/systemd/systemd")
SYSTEMD_VERSION = 252
STOCK_UNITS = Path("/lib/systemd/system")
WORK_BASE = Path("/var/tmp")
PROJECT = Path(__file__).resolve().parents[2]
BOOT_TARGET = "hermes-sandbox.target"
# Named as a real host names root's user manager: journald attributes a user unit's lines
# (``_SYSTEMD_USER_UNIT``) only below a ``user@UID.service``.
USER_MANAGER = "user@0.service"
CONTAINER = "hermes-sandbox"
# Inside the namespace: the private unit dirs of both managers, and the user manager's runtime dir.
UNITS_INSIDE = "/run/hermes-units"
USER_UNITS_INSIDE = "/run/hermes-user-units"
RUNTIME_DIR = "/run/user/0"
# The stock targets every unit with default dependencies needs: empty, so nothing is pulled in.
SYSTEM_STAND_INS = ("sysinit.target", "basic.target", "multi-user.target", "shutdown.target", "sockets.target")
USER_STAND_INS = ("basic.target", "default.target", "shutdown.target", "sockets.target", "exit.target")
STAND_IN = "[Unit]\nDefaultDependencies=no\n"
GATEWAYS = "hermes-gateway*"

BOOT_TIMEOUT = 30.0
STOP_TIMEOUT = 60.0
EMPTY_TIMEOUT = 20.0
PROBE_TIMEOUT = 20.0
# A command the guard refused to run inside exits with this.
GUARD_REFUSED = 125
# The host's other network namespaces (``ip netns add``, which other test runs use) are mounts
# of nsfs under here: not the sandbox's, and not a leak of it.
OTHER_MOUNTS = re.compile(r"^/run/netns/")
# tmpfs and ramfs, by statfs f_type: a work dir there would vanish under the private /tmp or /run.
RAM_FILESYSTEMS = frozenset({0x01021994, 0x858458F6})
PR_SET_PDEATHSIG = 1


class Unavailable(Exception):
    """The machine cannot run the sandbox at all (a precondition does not hold): skip."""


class Refused(AssertionError):
    """A safeguard could not be established, or the sandbox left something behind: fail."""


# --- preconditions -----------------------------------------------------------------------------


def unavailable() -> str | None:
    """Why this machine cannot run the sandbox, in one line; None when it can."""
    if os.geteuid() != 0:
        return "the systemd sandbox needs root"
    if not SYSTEMD.is_file():
        return f"no systemd binary at {SYSTEMD}"
    for tool in ("unshare", "nsenter", "setsid", "mountpoint", "systemctl"):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH"
    version = _run_bounded([str(SYSTEMD), "--version"]).stdout.split()
    if version[:2] != ["systemd", str(SYSTEMD_VERSION)]:
        return f"the systemd tier is held to systemd {SYSTEMD_VERSION}, not {' '.join(version[:2]) or 'unknown'}"
    probe = _run_bounded(["unshare", "--pid", "--fork", "--mount-proc", "--uts", "--ipc", "--net", "--cgroup", "true"])
    if probe.returncode != 0:
        return f"namespaces are not allowed here: {probe.stderr.strip()}"
    try:
        hierarchies = own_cgroups()
    except Refused as exc:
        return str(exc)
    try:
        probe_dir = hierarchies["cgroup2"] / f"hermes-probe-{os.getpid()}-{secrets.token_hex(4)}"
        probe_dir.mkdir()
        probe_dir.rmdir()
    except OSError as exc:
        return f"the cgroup2 hierarchy is not writable here: {exc}"
    return None


def _run_bounded(argv: Sequence[str], timeout: float = PROBE_TIMEOUT, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kwargs)


# --- cgroups ---------------------------------------------------------------------------------


def own_cgroups(pid: int | str = "self") -> dict[str, Path]:
    """The directories, in this process's mounts, of ``pid``'s own cgroups: ``cgroup2`` always,
    ``name=systemd`` on a hybrid host. Refused when the cgroup2 one is in no mounted hierarchy."""
    paths: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0":
            paths["cgroup2"] = path
        elif "name=systemd" in controllers.split(","):
            paths["name=systemd"] = path
    mounts: dict[str, tuple[str, str]] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, (fstype, _source, options) = left.split(), right.split()[:3]
        if fstype == "cgroup2":
            mounts.setdefault("cgroup2", (fields[3], fields[4]))
        elif fstype == "cgroup" and "name=systemd" in options.split(","):
            mounts.setdefault("name=systemd", (fields[3], fields[4]))
    if "cgroup2" not in paths or "cgroup2" not in mounts:
        raise Refused("no mounted cgroup2 hierarchy holds this process")
    found: dict[str, Path] = {}
    for name, (root, point) in mounts.items():
        path = paths.get(name)
        if path is None:
            continue
        relative = os.path.relpath(path, root)
        if relative.startswith(".."):
            raise Refused(f"this process's {name} cgroup {path} is outside its mount's root {root}")
        found[name] = Path(point) / relative if relative != "." else Path(point)
    return found


def _processes_in(tree: Path) -> list[int]:
    pids: list[int] = []
    for procs in tree.rglob("cgroup.procs"):
        with contextlib.suppress(OSError):
            pids += [int(word) for word in procs.read_text().split()]
    return pids


def _remove_tree(tree: Path) -> None:
    for directory in sorted((p for p in tree.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(FileNotFoundError):
            directory.rmdir()
    with contextlib.suppress(FileNotFoundError):
        tree.rmdir()


# --- the host, before and after ------------------------------------------------------------------


HOST_UNIT_DIRS = (
    Path("/etc/systemd/system"),
    Path("/etc/systemd/user"),
    Path("/run/systemd/system"),
    Path("/run/systemd/user"),
    Path.home() / ".config" / "systemd",
)
KNOBS = ("fs/file-max", "fs/nr_open")


def _tree_state(root: Path) -> dict[str, tuple]:
    if not root.exists() and not root.is_symlink():
        return {}
    state: dict[str, tuple] = {}
    for path in [root, *sorted(root.rglob("*"))]:
        info = path.lstat()
        target = os.readlink(path) if path.is_symlink() else None
        state[str(path)] = (info.st_mode, info.st_size, info.st_mtime_ns, target)
    return state


def _mounts() -> set[tuple[str, str, str]]:
    seen = set()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if not OTHER_MOUNTS.match(fields[4]):
            seen.add((fields[4], rest[0], rest[1]))
    return seen


@dataclass
class HostState:
    """What the sandbox must leave as it found it."""

    canary: tuple[int, int]
    dev_log: tuple | None
    unit_dirs: dict[str, dict[str, tuple]]
    knobs: dict[str, str]
    mounts: set[tuple[str, str, str]]

    @classmethod
    def take(cls, canary: Path) -> HostState:
        info = canary.stat()
        try:
            log = os.lstat("/dev/log")
            dev_log: tuple | None = (
                log.st_mode,
                log.st_ino,
                os.readlink("/dev/log") if os.path.islink("/dev/log") else "",
            )
        except FileNotFoundError:
            dev_log = None
        return cls(
            (info.st_ino, info.st_mtime_ns),
            dev_log,
            {str(d): _tree_state(d) for d in HOST_UNIT_DIRS},
            {knob: Path("/proc/sys", knob).read_text().strip() for knob in KNOBS},
            _mounts(),
        )

    def changes(self, after: HostState) -> list[str]:
        found = []
        if after.canary != self.canary:
            found.append(f"the canary in the host's /tmp changed: {self.canary} -> {after.canary}")
        if after.dev_log != self.dev_log:
            found.append(f"the host's /dev/log changed: {self.dev_log} -> {after.dev_log}")
        for directory, before in self.unit_dirs.items():
            if after.unit_dirs[directory] != before:
                changed = set(before.items()) ^ set(after.unit_dirs[directory].items())
                found.append(f"the host's unit dir {directory} changed: {sorted({p for p, _ in changed})}")
        if after.knobs != self.knobs:
            found.append(f"host kernel knobs changed: {self.knobs} -> {after.knobs}")
        if after.mounts - self.mounts:
            found.append(f"new host mounts: {sorted(after.mounts - self.mounts)}")
        return found


# --- inside the namespace --------------------------------------------------------------------------

# sh -c, as PID 1 of the new namespaces: every private mount first (set -e: one that fails
# stops here, before systemd), then systemd in its place. $1 is the work dir, $2 the project's
# tree (its code and .venv), which the commands under test run from.
INSIDE = f"""
set -eu
work=$1
project=$2
mount --make-rprivate /
# The tree under test stays visible where it is, even below a dir the tmpfs mounts hide.
mkdir "$work/project"
mount --rbind "$project" "$work/project"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run
mount -t tmpfs -o mode=0755 tmpfs /var/log
mount -t tmpfs -o mode=0755 tmpfs /var/lib/systemd
if [ ! -d "$project" ]; then mkdir -p "$project" && mount --rbind "$work/project" "$project"; fi
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
mount -o remount,bind,ro /sys
mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /sys/fs/cgroup
mount --bind /etc /etc
mount -o remount,bind,ro /etc
mount --bind "$work/etc-system" /etc/systemd/system
mkdir -p {UNITS_INSIDE} {USER_UNITS_INSIDE} {RUNTIME_DIR}
chmod 0700 {RUNTIME_DIR}
mkdir -p /run/systemd/journald.conf.d
printf '[Journal]\nStorage=volatile\nReadKMsg=no\n' > /run/systemd/journald.conf.d/sandbox.conf
cp "$work"/units/system/* {UNITS_INSIDE}/
cp "$work"/units/user/* {USER_UNITS_INSIDE}/
exec env -i container={CONTAINER} PATH=/usr/sbin:/usr/bin:/sbin:/bin \\
    SYSTEMD_UNIT_PATH={UNITS_INSIDE}:/etc/systemd/system \\
    SYSTEMD_GENERATOR_PATH= SYSTEMD_ENVIRONMENT_GENERATOR_PATH= \\
    {SYSTEMD} --system --unit={BOOT_TARGET} --show-status=false
"""

# sh -c on the host: join the nested cgroups ($1, and $2 unless empty), then exec the rest.
JOIN = 'echo $$ > "$1" && { [ -z "$2" ] || echo $$ > "$2"; } && shift 2 && exec "$@"'

# sh -c inside, after nsenter: the guard, then the command in directory $1.
GUARD = (
    "mountpoint -q /etc/systemd/system && [ -d /run/systemd/system ] || "
    f'{{ echo "refused: not inside the systemd sandbox" >&2; exit {GUARD_REFUSED}; }}; '
    'cd "$1" && shift && exec "$@"'
)


def _journald_service() -> str:
    # Without the dev-log socket (it makes the host's /dev/log) and the audit one.
    text = (STOCK_UNITS / "systemd-journald.service").read_text()
    return re.sub(r"(?m)^Sockets=.*$", "Sockets=systemd-journald.socket", text)


def system_units(work: Path) -> dict[str, str]:
    """The private system manager's own units: the stand-ins, journald, the user manager."""
    config, home = work / "config", work / "root"
    user_env = {
        "XDG_RUNTIME_DIR": RUNTIME_DIR,
        "XDG_CONFIG_HOME": str(config),
        "HOME": str(home),
        "SYSTEMD_UNIT_PATH": f"{USER_UNITS_INSIDE}:{config}/systemd/user",
        "SYSTEMD_GENERATOR_PATH": "",
        "SYSTEMD_ENVIRONMENT_GENERATOR_PATH": "",
    }
    return {
        **dict.fromkeys(SYSTEM_STAND_INS, STAND_IN),
        BOOT_TARGET: (
            "[Unit]\nDefaultDependencies=no\n"
            f"Wants=multi-user.target systemd-journald.socket systemd-journald.service {USER_MANAGER}\n"
        ),
        "systemd-journald.socket": (STOCK_UNITS / "systemd-journald.socket").read_text(),
        "systemd-journald.service": _journald_service(),
        USER_MANAGER: (
            "[Unit]\nDefaultDependencies=no\nAfter=systemd-journald.socket\n"
            "[Service]\nType=notify\n"
            f"ExecStart={SYSTEMD} --user --unit={BOOT_TARGET}\n"
            + "".join(f'Environment="{key}={value}"\n' for key, value in user_env.items())
        ),
    }


def user_units() -> dict[str, str]:
    return {**dict.fromkeys(USER_STAND_INS, STAND_IN), BOOT_TARGET: STAND_IN}


# --- the sandbox -----------------------------------------------------------------------------------


class Sandbox:
    """A private systemd system manager with a user manager under it; a context manager.

    ``work`` is its work dir on disk; ``config`` and ``home`` are the XDG_CONFIG_HOME and HOME
    every command inside gets (so a user-scope unit is written in the work dir, never in the
    host's ``~/.config``)."""

    def __init__(self, base: Path = WORK_BASE):
        self.base = base
        self.work: Path | None = None
        self.cgroups: dict[str, Path] = {}
        self.launcher: subprocess.Popen[bytes] | None = None
        self.pid = 0  # systemd's, as the host sees it
        self.pid_ns: int | None = None
        self.canary: Path | None = None
        self.before: HostState | None = None

    def __enter__(self) -> Sandbox:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def config(self) -> Path:
        assert self.work is not None
        return self.work / "config"

    @property
    def system_unit_dir(self) -> Path:
        """What the manager sees as ``/etc/systemd/system``, as the host sees it."""
        assert self.work is not None
        return self.work / "etc-system"

    @property
    def home(self) -> Path:
        assert self.work is not None
        return self.work / "root"

    # --- start ---

    def start(self) -> None:
        why = unavailable()
        if why is not None:
            raise Unavailable(why)
        fd, canary = tempfile.mkstemp(prefix="hermes-sandbox-canary-", dir="/tmp")
        os.write(fd, b"the systemd sandbox checks that this file outlives it\n")
        os.close(fd)
        self.canary = Path(canary)
        self.before = HostState.take(self.canary)
        self.work = Path(tempfile.mkdtemp(prefix="hermes-sysd.", dir=self.base))
        if _filesystem_type(self.work) in RAM_FILESYSTEMS:
            raise Refused(f"the work dir {self.work} is on tmpfs, which the sandbox's private mounts would hide")
        self._write_units()
        self._make_cgroups()
        self._launch()
        self._wait_booted()

    def _write_units(self) -> None:
        assert self.work is not None
        for directory in ("etc-system", "units/system", "units/user", "config/systemd/user", "root"):
            (self.work / directory).mkdir(parents=True)
        for scope, units in (("system", system_units(self.work)), ("user", user_units())):
            for name, text in units.items():
                (self.work / "units" / scope / name).write_text(text)

    def _make_cgroups(self) -> None:
        name = f"hermes-sandbox-{os.getpid()}-{secrets.token_hex(4)}"
        for hierarchy, parent in own_cgroups().items():
            nested = parent / name
            nested.mkdir()
            self.cgroups[hierarchy] = nested

    def _join_argv(self) -> list[str]:
        v1 = self.cgroups.get("name=systemd")
        return [
            "sh",
            "-c",
            JOIN,
            "sh",
            str(self.cgroups["cgroup2"] / "cgroup.procs"),
            str(v1 / "cgroup.procs") if v1 else "",
        ]

    def _launch(self) -> None:
        assert self.work is not None
        argv = [
            *self._join_argv(),
            "setsid",
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            "--uts",
            "--ipc",
            "--net",
            "--cgroup",
            "--propagation",
            "private",
            "--kill-child=SIGKILL",
            "--",
            "sh",
            "-c",
            INSIDE,
            "sh",
            str(self.work),
            str(PROJECT),
        ]
        with open(self.work / "manager.log", "ab") as log:
            self.launcher = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=_die_with_parent
            )

    def _wait_booted(self) -> None:
        assert self.launcher is not None
        deadline = time.monotonic() + BOOT_TIMEOUT
        while not self.pid:
            if self.launcher.poll() is not None:
                raise Refused(f"the sandbox exited ({self.launcher.returncode}) before systemd ran: {self._log_tail()}")
            if time.monotonic() > deadline:
                raise Refused(f"systemd did not start within {BOOT_TIMEOUT:g}s: {self._log_tail()}")
            with contextlib.suppress(OSError, ValueError):
                (child,) = Path(f"/proc/{self.launcher.pid}/task/{self.launcher.pid}/children").read_text().split()
                if os.readlink(f"/proc/{child}/exe") == os.path.realpath(SYSTEMD):
                    self.pid = int(child)
            time.sleep(0.02)
        self.pid_ns = os.stat(f"/proc/{self.pid}/ns/pid").st_ino
        nested = self.cgroups["cgroup2"]
        own = own_cgroups(self.pid)["cgroup2"]
        if nested not in (own, *own.parents):
            raise Refused(f"systemd runs in {own}, not below the sandbox's cgroup {nested}")
        while not Path(f"/proc/{self.pid}/root/run/systemd/system").is_dir():
            if time.monotonic() > deadline:
                raise Refused(f"systemd made no /run/systemd/system within {BOOT_TIMEOUT:g}s: {self._log_tail()}")
            time.sleep(0.02)
        for user in (False, True):
            while self.systemctl("is-active", BOOT_TARGET, user=user, check=False).stdout.strip() != "active":
                if time.monotonic() > deadline:
                    raise Refused(f"the {'user' if user else 'system'} manager did not boot within {BOOT_TIMEOUT:g}s")
                time.sleep(0.05)

    def _log_tail(self) -> str:
        assert self.work is not None
        with contextlib.suppress(OSError):
            return " | ".join((self.work / "manager.log").read_text(errors="replace").splitlines()[-5:])
        return ""

    # --- commands inside ---

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of a command inside: ``extra`` (default: this process's), with the
        user manager's runtime dir and the private config and home on top."""
        return {
            **(dict(os.environ) if extra is None else dict(extra)),
            "XDG_RUNTIME_DIR": RUNTIME_DIR,
            "XDG_CONFIG_HOME": str(self.config),
            "HOME": str(self.home),
        }

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | str = "/",
        timeout: float = 120,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """``argv`` inside the sandbox (in the nested cgroups, then every namespace of its
        systemd), with ``env(env)``: its exit code and output. Refused unless the target is still
        this sandbox's systemd; a command the guard inside refuses fails the caller."""
        if not self.pid or self.launcher is None or self.launcher.poll() is not None:
            raise Refused("the sandbox is not running")
        if os.readlink(f"/proc/{self.pid}/exe") != os.path.realpath(SYSTEMD) or (
            os.stat(f"/proc/{self.pid}/ns/pid").st_ino != self.pid_ns
        ):
            raise Refused(f"pid {self.pid} is no longer the sandbox's systemd")
        enter = ["nsenter", "-t", str(self.pid), "-m", "-p", "-u", "-i", "-n", "-C", "--"]
        done = subprocess.run(
            [*self._join_argv(), *enter, "sh", "-c", GUARD, "sh", str(cwd), *argv],
            env=self.env(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode == GUARD_REFUSED and done.stderr.startswith("refused:"):
            raise Refused(f"{done.stderr.strip()}: {list(argv)}")
        if check and done.returncode != 0:
            raise AssertionError(f"{list(argv)} exited {done.returncode} inside the sandbox: {done.stderr.strip()}")
        return done

    def systemctl(self, *args: str, user: bool = False, check: bool = True, timeout: float = 60):
        return self.run(["systemctl", *(["--user"] if user else []), *args], check=check, timeout=timeout)

    def show(self, unit: str, *properties: str, user: bool = False) -> dict[str, str]:
        arguments = [word for prop in properties for word in ("-p", prop)]
        shown = self.systemctl("show", *arguments, unit, user=user).stdout
        return dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)

    def cursor(self) -> str:
        """The journal's position now, for ``journal(after=...)``."""
        shown = self.run(["journalctl", "--no-pager", "--quiet", "-n", "0", "--show-cursor"]).stdout
        return shown.strip().removeprefix("-- cursor: ")

    def journal(self, unit: str, *, user: bool = False, after: str | None = None) -> list[str]:
        """The messages the unit's manager and processes logged about it, since ``after`` (a
        ``cursor``) when given: unit names repeat across tests, so pass one."""
        if after is None:
            which = ["--user-unit" if user else "--unit", unit]
            return self.run(["journalctl", "--no-pager", "-o", "cat", *which], check=False).stdout.splitlines()
        # Unfiltered: with a match, --after-cursor skips the first matching entry when the
        # cursor's own entry does not match.
        shown = self.run(["journalctl", "--no-pager", "-o", "json", f"--after-cursor={after}"]).stdout
        fields = ("USER_UNIT", "_SYSTEMD_USER_UNIT") if user else ("UNIT", "_SYSTEMD_UNIT")
        entries = [json.loads(line) for line in shown.splitlines() if line.strip()]
        return [str(e.get("MESSAGE")) for e in entries if any(e.get(field) == unit for field in fields)]

    # --- teardown ---

    def close(self) -> None:
        """Tear everything down, then fail if anything of the sandbox is left or the host changed."""
        problems: list[str] = []
        try:
            self._stop_gateways()
        finally:
            problems += self._kill()
            problems += self._remove_cgroups()
            problems += self._leftovers()
            if self.before is not None and self.canary is not None:
                problems += self.before.changes(HostState.take(self.canary))
            if self.work is not None:
                shutil.rmtree(self.work, ignore_errors=True)
            if self.canary is not None:
                self.canary.unlink(missing_ok=True)
            self.pid = 0
        if problems:
            raise Refused("the systemd sandbox left the host changed: " + "; ".join(problems))

    def _stop_gateways(self) -> None:
        if not self.pid or self.launcher is None or self.launcher.poll() is not None:
            return
        for user in (True, False):
            with contextlib.suppress(subprocess.TimeoutExpired, Refused, AssertionError, OSError):
                self.systemctl("stop", GATEWAYS, user=user, check=False, timeout=STOP_TIMEOUT)

    def _kill(self) -> list[str]:
        if self.launcher is None:
            return []
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        try:
            self.launcher.wait(timeout=EMPTY_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.launcher.kill()  # unshare itself: --kill-child takes its child with it
            self.launcher.wait(timeout=EMPTY_TIMEOUT)
            return [f"unshare (pid {self.launcher.pid}) did not exit once systemd was killed"]
        return []

    def _remove_cgroups(self) -> list[str]:
        problems = []
        for hierarchy, nested in self.cgroups.items():
            deadline = time.monotonic() + EMPTY_TIMEOUT
            while nested.exists() and _processes_in(nested) and time.monotonic() < deadline:
                time.sleep(0.05)
            if nested.exists() and _processes_in(nested):
                problems.append(f"processes {_processes_in(nested)} are still in {nested}")
                continue
            _remove_tree(nested)
            if nested.exists():
                problems.append(f"the {hierarchy} cgroup {nested} could not be removed")
        return problems

    def _leftovers(self) -> list[str]:
        if self.pid_ns is None:
            return []
        left = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.stat(entry / "ns" / "pid").st_ino == self.pid_ns:
                        left.append(int(entry.name))
        return [f"processes {left} are still in the sandbox's pid namespace"] if left else []


def _die_with_parent() -> None:
    # unshare is SIGKILLed if this test run dies without its teardown, and --kill-child then
    # takes the namespace with it: a sandbox never outlives the run that made it.
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def _filesystem_type(path: Path) -> int:
    done = _run_bounded(["stat", "-f", "-c", "%t", str(path)])
    return int(done.stdout.strip(), 16)


@contextlib.contextmanager
def sandbox() -> Iterator[Sandbox]:
    with Sandbox() as box:
        yield box


def main(argv: list[str]) -> int:
    """``python -m tests.support.systemd_sandbox [CMD...]``: boot, run CMD inside (default:
    ``systemctl list-units``), tear down, and check the host."""
    why = unavailable()
    if why is not None:
        print(f"skipped: {why}", file=sys.stderr)
        return 0
    with sandbox() as box:
        done = box.run(argv or ["systemctl", "list-units", "--all", "--no-pager"], check=False)
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
