"""The update plan: a read-only inventory of what ``hermes update`` would do.

Nothing here writes to disk: ``hermes update --plan`` prints the plan and leaves the install,
every home and the checkout's ``.git`` exactly as they were. Git is asked only read-only
questions (``ls-remote``, never ``fetch``) with ``GIT_OPTIONAL_LOCKS=0`` so that ``git status``
does not refresh the index behind our back.

Only a git checkout is updated in place. Every other deployment kind is refused with the
command its own deployment model updates it by, instead of fighting that model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from services.updater.git import GitFailed, run
from shared import homes
from shared.gateways import discovery
from shared.redaction import redact_text
from shared.version import __version__, code_sha, code_stamp

if TYPE_CHECKING:
    from services.updater.settings import UpdateSettings

KindName = Literal["git", "pip", "docker", "nix", "apt", "unknown"]
BackupMode = Literal["quick", "full", "none"]

GIT_TIMEOUT = 15.0
DEFAULT_BRANCH = "main"
# A plan names the first few dirty paths; the count says how many there are in all.
DIRTY_LIST_MAX = 50

EXTERNAL_COMMANDS: dict[str, str] = {
    "docker": "docker compose pull && docker compose up -d",
    "nix": "nix profile upgrade hermes-mesh",
    "apt": "sudo apt-get update && sudo apt-get install --only-upgrade hermes-mesh",
    "pip": "pip install --upgrade hermes-mesh",
}


# --- install kind -----------------------------------------------------------------------------


@dataclass(frozen=True)
class InstallKind:
    kind: KindName
    in_place: bool
    external_command: str | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "in_place": self.in_place,
            "external_command": self.external_command,
            "reason": self.reason,
        }


def refusal(install: Mapping[str, Any]) -> str:
    """Why an install (``InstallKind.to_dict()``) is not updated here, and what to run instead."""
    instead = f": run `{install['external_command']}`" if install["external_command"] else f" ({install['reason']})"
    return f"{install['kind']} installs are not updated in place{instead}"


@dataclass(frozen=True)
class Probes:
    """Where the deployment markers live; tests point them at temp dirs."""

    dockerenv: Path = Path("/.dockerenv")
    nix_store: Path = Path("/nix/store")
    apt_roots: tuple[Path, ...] = (Path("/usr/lib/python3/dist-packages"),)


SYSTEM_PROBES = Probes()
_PACKAGE_DIRS = frozenset({"site-packages", "dist-packages"})


# Set by the mesh's container images (and by any deployment that wants to say what it is).
INSTALL_KIND_ENV = "HERMES_INSTALL_KIND"


def detect_install_kind(
    install_root: Path, *, env: Mapping[str, str] | None = None, probes: Probes = SYSTEM_PROBES
) -> InstallKind:
    """How the code at ``install_root`` was deployed, and so whether it may be updated in place."""
    env = os.environ if env is None else env
    root = Path(install_root).absolute()
    spellings = (root, Path(os.path.realpath(root)))

    # The mesh's own images say what they are; a deployment's word beats any guess.
    declared = env.get(INSTALL_KIND_ENV, "")
    if declared in EXTERNAL_COMMANDS:
        return _external(declared, f"{INSTALL_KIND_ENV}={declared}")
    if declared == "git" and (root / ".git").exists():
        return InstallKind("git", True, None, f"{INSTALL_KIND_ENV}=git, checkout at {root}")
    if any(_under(p, probes.nix_store) for p in spellings):
        return _external("nix", f"installed in the Nix store ({probes.nix_store}), which is read-only")
    if any(_under(p, apt_root) for p in spellings for apt_root in probes.apt_roots):
        return _external("apt", "installed by the system package manager")
    # A checkout is updated in place wherever it runs: a developer's container included.
    if (root / ".git").exists():  # a directory, or a gitdir file (worktree, submodule)
        return InstallKind("git", True, None, f"git checkout at {root}")
    if probes.dockerenv.exists() or env.get("container") == "docker":
        return _external("docker", "running in a Docker container: the image is the unit of update")
    if any(_PACKAGE_DIRS.intersection(p.parts) for p in spellings):
        return _external("pip", "installed as a Python package")
    return InstallKind(
        "unknown", False, None, f"{root} is neither a git checkout nor an installed package: reinstall it by hand"
    )


def _external(kind: KindName, reason: str) -> InstallKind:
    return InstallKind(kind, False, EXTERNAL_COMMANDS[kind], reason)


def _under(path: Path, base: Path) -> bool:
    return path.is_relative_to(base)


# --- git, read-only ---------------------------------------------------------------------------


def _git(root: Path, *args: str, timeout: float, ok: tuple[int, ...] = (0,)) -> tuple[int, str]:
    """``git -C root args``, read-only: (exit code, stdout). Other exit codes and timeouts raise GitFailed."""
    proc = run(root, args, stage="plan", timeout=timeout, ok=ok, read_only=True)
    return proc.returncode, proc.stdout


def git_target(install_root: Path, branch: str | None = None, *, timeout: float = GIT_TIMEOUT) -> dict[str, Any]:
    """Where a git update of ``install_root`` would go, asked without fetching anything.

    ``ahead``/``behind`` are known only when the remote commit is already present locally;
    without a fetch they are ``None``.
    """
    root = Path(install_root)
    code, out = _git(root, "symbolic-ref", "--short", "-q", "HEAD", timeout=timeout, ok=(0, 1))
    current = out.strip() if code == 0 else None  # 1: detached HEAD
    target = branch or current or DEFAULT_BRANCH
    code, out = _git(root, "rev-parse", "--verify", "-q", "HEAD", timeout=timeout, ok=(0, 1))
    head = out.strip() if code == 0 else None  # 1: no commit yet
    _, out = _git(root, "remote", "get-url", "origin", timeout=timeout)
    origin = out.strip()
    ref = f"refs/heads/{target}"
    _, out = _git(root, "ls-remote", "origin", ref, timeout=timeout)
    remote = _ls_remote_sha(out, ref)
    ahead, behind = _ahead_behind(root, head, remote, timeout)
    dirty, untracked = _worktree(root, timeout, stamped=code_stamp(root) is not None)
    running = code_sha(root)  # an archive update's stamp, else HEAD
    return {
        "current_branch": current,
        "branch": target,
        "head": head,
        "origin_url": origin,
        "remote_sha": remote,
        "up_to_date": remote is not None and remote in (head, running),
        "ahead": ahead,
        "behind": behind,
        "dirty": bool(dirty),
        "dirty_count": len(dirty),
        "dirty_paths": dirty[:DIRTY_LIST_MAX],
        "untracked_count": untracked,
    }


def _ls_remote_sha(out: str, ref: str) -> str | None:
    # ls-remote matches patterns by suffix; only the exact ref counts.
    for line in out.splitlines():
        sha, _, name = line.partition("\t")
        if name == ref:
            return sha
    return None


def _ahead_behind(root: Path, head: str | None, remote: str | None, timeout: float) -> tuple[int | None, int | None]:
    if head is None or remote is None:
        return None, None
    code, _ = _git(root, "cat-file", "-e", f"{remote}^{{commit}}", timeout=timeout, ok=(0, 1, 128))
    if code != 0:
        return None, None  # not fetched yet: unknowable without a fetch
    _, out = _git(root, "rev-list", "--left-right", "--count", f"{head}...{remote}", timeout=timeout)
    left, right = out.split()
    return int(left), int(right)


def _worktree(root: Path, timeout: float, *, stamped: bool = False) -> tuple[list[str], int]:
    """(tracked paths with changes, number of untracked files), from one ``-uall`` status.

    After an archive update (``stamped``) the index holds the swapped tree: only changes of
    the work tree against it are local."""
    _, out = _git(root, "status", "--porcelain=v1", "-z", "-uall", timeout=timeout)
    dirty: list[str] = []
    untracked = 0
    entries = iter(out.split("\0"))
    for entry in entries:
        if not entry:
            continue
        status, path = entry[:2], entry[3:]
        if status == "??":
            untracked += 1
            continue
        if "R" in status or "C" in status:
            next(entries, None)  # -z puts a rename's source path in an entry of its own
        if not stamped or status[1] != " ":
            dirty.append(path)
    return dirty, untracked


# --- the plan ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    root: Path
    install_root: Path
    install: InstallKind
    code_sha: str | None
    code_version: str
    git: dict[str, Any] | None  # git_target() of a git install
    git_error: dict[str, Any] | None  # GitFailed.to_dict() when the target could not be read
    profiles: list[dict[str, str]]
    gateways: list[dict[str, Any]]
    foreign: list[dict[str, Any]]  # runtimes of other homes on this machine: named, never touched
    backup: BackupMode
    actions: list[str]
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    @property
    def refused(self) -> bool:
        """Not updatable in place: the updater prints the external command and exits 2."""
        return not self.install.in_place

    def to_dict(self) -> dict[str, Any]:
        return {
            "created_at": self.created_at,
            "root": str(self.root),
            "install_root": str(self.install_root),
            "install": self.install.to_dict(),
            "refused": self.refused,
            "code": {"code_sha": self.code_sha, "code_version": self.code_version},
            "git": self.git,
            "git_error": self.git_error,
            "profiles": self.profiles,
            "gateways": self.gateways,
            "foreign": self.foreign,
            "backup": self.backup,
            "actions": self.actions,
        }


def plan_update(root: Path, install_root: Path, options: Mapping[str, Any], settings: UpdateSettings) -> Plan:
    """The plan of an update run with ``options`` (``branch``, ``backup``, ``no_backup``) under
    the root's ``settings``: the one the updater follows and the one ``--plan`` shows."""
    backup: BackupMode = "none" if options.get("no_backup") else "full" if options.get("backup") else "quick"
    branch = options.get("branch") or settings.branch
    return make_plan(root, install_root, branch=branch, backup=backup, archive_url=settings.archive_url)


def availability(plan: dict[str, Any]) -> tuple[bool | None, str]:
    """Whether ``plan`` finds newer code to install: True, False, or None when it cannot tell;
    and why, in words."""
    install = plan["install"]
    if not install["in_place"]:
        return None, refusal(install)
    git = plan.get("git")
    if git is None:
        error = plan.get("git_error") or {}
        return None, f"cannot read the update target: {error.get('message', 'git failed')}"
    if git["remote_sha"] is None:
        return None, f"origin has no branch {git['branch']}"
    if git["up_to_date"]:
        return False, f"already up to date on {git['branch']} ({_short(git['remote_sha'])})"
    return True, f"an update is available: {git['branch']} @ {_short(git['remote_sha'])}"


def make_plan(
    root: Path,
    install_root: Path,
    *,
    branch: str | None = None,
    backup: BackupMode = "quick",
    env: Mapping[str, str] | None = None,
    probes: Probes = SYSTEM_PROBES,
    git_timeout: float = GIT_TIMEOUT,
    archive_url: str | None = None,
) -> Plan:
    """The read-only inventory of an update of ``install_root`` serving the homes under ``root``."""
    root = Path(root).absolute()
    install_root = Path(install_root).absolute()
    install = detect_install_kind(install_root, env=env, probes=probes)
    target: dict[str, Any] | None = None
    target_error: dict[str, Any] | None = None
    if install.kind == "git":
        try:
            target = git_target(install_root, branch, timeout=git_timeout)
        except GitFailed as exc:
            target_error = exc.to_dict()
    profiles = [{"name": name, "home": str(homes.profile_home(name, root))} for name in homes.list_profiles(root)]
    gateways = [record.to_dict() for record in discovery.discover(root)]
    foreign = discovery.scan_foreign(root) + _foreign_units(root)
    sha = code_sha(install_root)
    return Plan(
        root=root,
        install_root=install_root,
        install=install,
        code_sha=sha,
        code_version=__version__,
        git=target,
        git_error=target_error,
        profiles=profiles,
        gateways=gateways,
        foreign=foreign,
        backup=backup,
        actions=_actions(install, target, target_error, profiles, gateways, backup, archive_url)
        + _leave_alone(foreign),
    )


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "?"


def _actions(
    install: InstallKind,
    target: dict[str, Any] | None,
    target_error: dict[str, Any] | None,
    profiles: list[dict[str, str]],
    gateways: list[dict[str, Any]],
    backup: BackupMode,
    archive_url: str | None,
) -> list[str]:
    if not install.in_place:
        run = f"; run instead: {install.external_command}" if install.external_command else ""
        return [f"refuse: a {install.kind} install is not updated in place ({install.reason}){run}"]
    if target is None:
        message = target_error["message"] if target_error else "unknown"
        if not archive_url:
            return [f"stop: cannot read the update target: {message}"]
        return [
            f"git cannot read the update target ({message}): try git again, and if it still fails, "
            f"install the branch's source archive from {redact_text(archive_url)} (refused if the tree is dirty)",
            _snapshot_action(profiles, backup),
            f"restart {len(gateways)} gateway(s), drain first, and verify each runs the archive's commit",
        ]
    if target["remote_sha"] is None:
        return [f"stop: origin has no branch {target['branch']!r}"]

    new = target["remote_sha"]
    moves = not target["up_to_date"]
    # After a code change every gateway is stale; without one, only those not running it.
    stale = gateways if moves else [g for g in gateways if g.get("code_sha") != new]
    if moves:
        actions = [f"fetch origin and fast-forward {target['branch']} {_short(target['head'])} → {_short(new)}"]
        if target["dirty"]:
            actions.append(f"stash local changes to {target['dirty_count']} tracked file(s) and restore them after")
    else:
        actions = [f"no code change: {target['branch']} is at origin's {_short(new)}"]
    if moves or stale:
        actions.append(_snapshot_action(profiles, backup))
    if stale:
        listed = ", ".join(f"{g['profile']} (pid {g['pid']}, {g['supervisor']})" for g in stale)
        actions.append(f"restart {len(stale)} gateway(s), drain first: {listed}")
        actions.append(f"verify every gateway runs {_short(new)}")
    elif not gateways:
        actions.append("no live gateway to restart")
    return actions


def _foreign_units(root: Path) -> list[dict[str, Any]]:
    """systemd units and launchd jobs named like ours that run on another home."""
    from services.updater.restart import foreign_units

    return [
        {"kind": kind, "name": u.name, "pid": None, "home": str(u.home), "scope": u.scope}
        for kind, u in foreign_units(root)
    ]


def _leave_alone(foreign: list[dict[str, Any]]) -> list[str]:
    if not foreign:
        return []
    listed = ", ".join(f"{f['name']} on {f['home']}" for f in foreign)
    return [f"leave alone {len(foreign)} gateway(s) of other homes: {listed}"]


def _snapshot_action(profiles: list[dict[str, str]], backup: BackupMode) -> str:
    if backup == "none":
        return "no snapshot (--no-backup): the receipt records that none was taken"
    quick = f"snapshot config, auth and state files of all {len(profiles)} profile(s) into their state-snapshots/"
    return quick + (" and archive the whole root home into backups/" if backup == "full" else "")


# --- text -------------------------------------------------------------------------------------


def render_plan(plan: Plan) -> str:
    """The text of ``hermes update --plan``."""
    lines = ["Update plan (read-only: nothing was changed)", ""]
    how = "updated in place" if plan.install.in_place else "not updated in place"
    lines.append(f"  install   {plan.install.kind} at {plan.install_root} ({how})")
    lines.append(f"  code      {plan.code_version} @ {_short(plan.code_sha)}")
    if plan.git is not None:
        lines.extend(_target_lines(plan.git))
    elif plan.git_error is not None:
        lines.append(f"  target    unknown: {plan.git_error['message']}")
    lines.append(f"  profiles  {len(plan.profiles)}")
    lines.extend(f"    {p['name']:<16} {p['home']}" for p in plan.profiles)
    lines.append(f"  gateways  {len(plan.gateways)} live")
    for g in plan.gateways:
        version = f"{g['code_version'] or '?'} @ {_short(g['code_sha'])}"
        lines.append(
            f"    {g['profile']:<16} pid {g['pid']:<8} {g['state']:<9} {g['supervisor']:<12} {version}  ({g['source']})"
        )
    if plan.foreign:
        lines.append(f"  foreign   {len(plan.foreign)} of other homes (never drained or restarted)")
        lines.extend(f"    {f['kind']:<9} {f['name']:<24} {f['home']}" for f in plan.foreign)
    lines.append("")
    lines.append("Would:" if not plan.refused else "Refused:")
    lines.extend(f"  {i}. {action}" for i, action in enumerate(plan.actions, 1))
    return "\n".join(lines) + "\n"


def _target_lines(target: dict[str, Any]) -> list[str]:
    where = f"origin/{target['branch']} @ {_short(target['remote_sha'])}"
    if target["up_to_date"]:
        status = "up to date"
    elif target["behind"] is not None:
        status = f"{target['behind']} behind, {target['ahead']} ahead"
    else:
        status = "differs (ahead/behind unknown without a fetch)"
    tree = f"{target['dirty_count']} modified tracked file(s)" if target["dirty"] else "clean"
    return [
        f"  target    {where}: {status}  [{target['origin_url']}]",
        f"  tree      {tree}, {target['untracked_count']} untracked file(s)",
    ]
