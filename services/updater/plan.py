"""The update plan: a read-only inventory of what ``hermes update`` would do.

Nothing here writes to disk: ``hermes update --plan`` prints the plan (``plan_text``) and
leaves the install, every home and the checkout's ``.git`` exactly as they were. The plan
is the install's kind (``install_kind``), where git would take it (``git_target``, asked
read-only), every profile, every live gateway, the runtimes of other homes left alone, and
the actions the update would take, among them whether it takes a snapshot (``takes_snapshot``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fleet import discovery
from services.updater.git import GitFailed
from services.updater.git_target import GIT_TIMEOUT, git_target
from services.updater.held import held_back, holds, read_held
from services.updater.install_kind import SYSTEM_PROBES, InstallKind, Probes, detect_install_kind, refusal
from services.updater.obligations import read_completion
from services.updater.rollback import local_target
from services.updater.rollback import target as rollback_target
from shared import homes
from shared.errors import HermesError
from shared.redaction import redact_text
from shared.version import __version__, code_sha

if TYPE_CHECKING:
    from services.updater.settings import UpdateSettings

BackupMode = Literal["quick", "full", "none"]
# The options an update run takes, as ``hermes update`` and the updater's own command line name them.
OPTIONS = (
    "branch",
    "backup",
    "no_backup",
    "no_canary",
    "max_parallel",
    "take_held",
    "rollback",
    "confirm_within",
    "confirm_expired",
)


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
    gateways: list[discovery.GatewayRecord]  # the live fleet, as discovery found it
    foreign: list[dict[str, Any]]  # runtimes of other homes on this machine: named, never touched
    backup: BackupMode
    owed_completion: str | None  # the update whose completion is owed (it runs even with no code change)
    snapshot: bool  # whether the run snapshots the profiles: ``takes_snapshot``
    actions: list[str]
    rollback: dict[str, Any] | None = None  # a rollback's {of, target, backup} (``rollback.target``)
    canary: dict[str, Any] | None = None  # {profile, window}, {skip: why}, None: the code does not move by git
    max_parallel: int | None = None  # the fleet restarts in health-gated waves of this many (0: one); None: ungated
    held: dict[str, Any] | None = None  # the target is a commit a gate rolled back (``held``): the code does not move
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
            "gateways": [record.to_dict() for record in self.gateways],
            "foreign": self.foreign,
            "backup": self.backup,
            "owed_completion": self.owed_completion,
            "snapshot": self.snapshot,
            "actions": self.actions,
            "rollback": self.rollback,
            "canary": self.canary,
            "max_parallel": self.max_parallel,
            "held": self.held,
        }


def update_options(args: object) -> dict[str, Any]:
    """The options of an update run, from the parsed command line of either process (only the
    updater's has ``confirm_expired``: a timer starts the run it marks)."""
    return {name: getattr(args, name, None) for name in OPTIONS}


def plan_update(root: Path, install_root: Path, options: Mapping[str, Any], settings: UpdateSettings) -> Plan:
    """The plan of an update run with ``options`` (``branch``, ``backup``, ``no_backup``,
    ``no_canary``) under the root's ``settings``: the one the updater follows and the one
    ``--plan`` shows."""
    backup: BackupMode = "none" if options.get("no_backup") else "full" if options.get("backup") else "quick"
    branch = options.get("branch") or settings.branch
    rollback = options.get("rollback")
    if rollback is not None:  # "": the newest update that moved the code
        return make_plan(root, install_root, backup=backup, rollback=rollback or None)
    off = "--no-canary" if options.get("no_canary") else None if settings.canary else "update.canary is false"
    wanted = options.get("max_parallel")
    return make_plan(
        root,
        install_root,
        branch=branch,
        backup=backup,
        archive_url=settings.archive_url,
        canary_off=off,
        max_parallel=None if off else wanted if isinstance(wanted, int) else settings.max_parallel,
        take_held=bool(options.get("take_held")),
    )


def availability(plan: Plan) -> tuple[bool | None, str]:
    """Whether ``plan`` finds newer code to install: True, False, or None when it cannot tell;
    and why, in words."""
    if not plan.install.in_place:
        return None, refusal(plan.install)
    git = plan.git
    if git is None:
        error = plan.git_error or {}
        return None, f"cannot read the update target: {error.get('message', 'git failed')}"
    if git["remote_sha"] is None:
        return None, f"origin has no branch {git['branch']}"
    if git["up_to_date"]:
        return False, f"already up to date on {git['branch']} ({short(git['remote_sha'])})"
    if plan.held is not None:
        return False, held_back(plan.held)
    return True, f"an update is available: {git['branch']} @ {short(git['remote_sha'])}"


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
    rollback: str | None | Literal[False] = False,
    canary_off: str | None = None,
    max_parallel: int | None = None,
    take_held: bool = False,
) -> Plan:
    """The read-only inventory of an update of ``install_root`` serving the homes under ``root``;
    with ``rollback`` (an update id, or None for the newest that moved the code), of a rollback,
    which asks only the local ``.git`` (a refusal raises ``RollbackRefused``)."""
    root = Path(root).absolute()
    install_root = Path(install_root).absolute()
    install = detect_install_kind(install_root, env=env, probes=probes)
    target: dict[str, Any] | None = None
    target_error: dict[str, Any] | None = None
    undo: dict[str, Any] | None = None
    if rollback is not False:
        from services.updater.receipt_store import ReceiptStore

        undo = rollback_target(install_root, install.kind, ReceiptStore(root).all()[0], rollback)
        target = local_target(install_root, undo["target"], timeout=git_timeout)
    elif install.kind == "git":
        try:
            target = git_target(install_root, branch, timeout=git_timeout)
        except GitFailed as exc:
            target_error = exc.to_dict()
    profiles = [{"name": name, "home": str(homes.profile_home(name, root))} for name in homes.list_profiles(root)]
    gateways = discovery.discover(root)
    foreign = discovery.scan_foreign(root) + _foreign_units(root)
    sha = code_sha(install_root)
    owed = _owed_completion(root)
    held = None if take_held or undo is not None else read_held(root)
    if not holds(held, target):
        held = None
    # A held commit is not moved to: the run changes files only for what is owed.
    snapshot = takes_snapshot(install, target, archive_url, owed) and (held is None or owed is not None)
    canary = None if held else canary_plan(target, undo, gateways, canary_off)
    if canary is None or undo is not None:
        max_parallel = None  # gated only where git moves the code forward: a failed gate is reverted
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
        owed_completion=owed,
        snapshot=snapshot,
        actions=(
            _held_actions(held, owed)
            if held is not None
            else _actions(
                install,
                target,
                target_error,
                profiles,
                gateways,
                backup,
                archive_url,
                owed,
                snapshot,
                undo,
                canary,
                max_parallel,
            )
        )
        + _leave_alone(foreign),
        rollback=undo,
        canary=canary,
        max_parallel=max_parallel,
        held=held,
    )


def takes_snapshot(
    install: InstallKind, target: dict[str, Any] | None, archive_url: str | None, owed_completion: str | None
) -> bool:
    """Whether the run snapshots the profiles: only when something will change them, that is when
    the code moves (git, or the archive when git cannot read the target) or an owed completion
    runs (it migrates every config). Restarting a stale gateway alone changes no file of value."""
    if not install.in_place:
        return False
    if target is None:
        return bool(archive_url)
    if target["remote_sha"] is None:
        return False  # the run stops at the plan
    return not target["up_to_date"] or owed_completion is not None


def canary_plan(
    target: dict[str, Any] | None,
    rollback: dict[str, Any] | None,
    gateways: list[discovery.GatewayRecord],
    off: str | None,
) -> dict[str, Any] | None:
    """What gates the tree's move: ``{profile}`` (the canary copies the first live
    gateway's profile, else the default's), ``{skip: why}``, or None when git does not move the
    code (the archive fallback is not gated: it runs when git cannot fetch the commit to stage)."""
    if target is None or target["remote_sha"] is None or target["up_to_date"]:
        return None
    if rollback is not None:
        return {"skip": "a rollback returns to code this install ran before"}
    if off is not None:
        return {"skip": off}
    return {"profile": gateways[0].profile if gateways else homes.DEFAULT_PROFILE}


def _owed_completion(root: Path) -> str | None:
    """The update whose completion is owed; an unreadable obligation counts as owed, as the
    run treats it."""
    try:
        owed = read_completion(root)
    except HermesError:
        return "unknown"
    return None if owed is None else owed["update_id"]


def short(sha: str | None) -> str:
    return sha[:12] if sha else "?"


def _actions(
    install: InstallKind,
    target: dict[str, Any] | None,
    target_error: dict[str, Any] | None,
    profiles: list[dict[str, str]],
    gateways: list[discovery.GatewayRecord],
    backup: BackupMode,
    archive_url: str | None,
    owed: str | None,
    snapshot: bool,
    rollback: dict[str, Any] | None = None,
    canary: dict[str, Any] | None = None,
    max_parallel: int | None = None,
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
    stale = gateways if moves else [g for g in gateways if g.code_sha != new]
    if rollback is not None:
        actions = [_rollback_action(target, rollback)]
    elif moves:
        actions = [f"fetch origin and fast-forward {target['branch']} {short(target['head'])} → {short(new)}"]
        if target["dirty"]:
            actions.append(f"stash local changes to {target['dirty_count']} tracked file(s) and restore them after")
    else:
        actions = [f"no code change: {target['branch']} is at origin's {short(new)}"]
    if snapshot:
        actions.append(_snapshot_action(profiles, backup))
    if canary is not None:
        actions.append(_canary_action(new, canary))
    if rollback is not None and rollback["backup"] and moves:
        actions.append(f"restore the root home from {rollback['backup']['path']} (what it does not hold is kept)")
    if owed is not None and not moves:
        actions.append(f"run the completion owed by update {owed} (dependencies, config migrations)")
    actions += _gates_action(max_parallel)
    if stale:
        listed = ", ".join(f"{g.profile} (pid {g.pid}, {g.supervisor})" for g in stale)
        actions.append(f"restart {len(stale)} gateway(s), drain first: {listed}")
        actions.append(f"verify every gateway runs {short(new)}")
    elif not gateways:
        actions.append("no live gateway to restart")
    return actions


def _held_actions(held: dict[str, Any], owed: str | None) -> list[str]:
    actions = [f"hold: {held_back(held)}"]
    if owed is not None:
        actions.append(f"run the completion owed by update {owed}, on the code as it is")
    return actions + ["restart the gateways owed a restart onto the code as it is, and verify the fleet"]


def _canary_action(new: str, canary: dict[str, Any]) -> str:
    if "skip" in canary:
        return f"no canary ({canary['skip']}): the tree moves without a probe turn of {short(new)} first"
    return (
        f"canary, before the tree moves: {short(new)}, staged apart, serves a probe turn on a scratch copy of "
        f"profile {canary['profile']}'s config; if it fails, nothing moves"
    )


def _gates_action(max_parallel: int | None) -> list[str]:
    if max_parallel is None:
        return []
    waves = f"waves of {max_parallel}" if max_parallel else "one wave of every gateway"
    return [
        f"gate the restart: {waves}, each healthy (a probe turn on the new commit) before the next; "
        "a wave that fails rolls the tree and the gateways it moved back"
    ]


def _rollback_action(target: dict[str, Any], rollback: dict[str, Any]) -> str:
    where = f"roll {target['branch']} back {short(target['head'])} → {short(target['remote_sha'])}"
    if target["up_to_date"]:
        where = f"no code change: {target['branch']} is at {short(target['remote_sha'])} already"
    return f"{where}, where update {rollback['of']} started (local commit, no fetch)"


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
