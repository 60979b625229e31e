"""The install, update and uninstall transactions of the operator plugin in one Hermes home.

Each holds the target's lock (``<state>/integrations/hermes/<digest>.lock``, keyed like the
policy directory, outside the home) from its first step to its last, recovery included: a second
command on the same target is ``integration_busy`` at once, and a journal found while holding
the lock is one whose owner is gone.

Install and update: render into a stage, write the policy (keeping the old one aside), probe
the staged plugin in a fresh process of the Python beside the target Hermes, move the installed
plugin (at ``plugins/operators/pohunek``, or where an earlier installer put it,
``plugins/pohunek``) into a backup, swap the stage in at ``plugins/operators/pohunek``, enable
it through ``hermes plugins enable``, then pass the point of no return (the journal's ``phase``
becomes ``committed``) and remove the backups. The stage and the backup are each a directory
``pohunek`` inside a holder beside the plugin (``plugins/operators/.pohunek-stage-…/``): Hermes
looks no deeper than a category's own entries, so it never lists a second ``pohunek``.
Uninstall checks ownership from the marker and the installed bytes, disables the plugin through
Hermes, passes the point of no return, then removes only the managed files and the policy:
unmanaged files stay.

The journal (``<home>/plugins/.pohunek-journal.json``), written before the first change, says
how to finish: before the point of no return every change is undone (the plugin, the policy and
the enablement as they were), after it the removals are finished. Any failure, and any crash
(the next mutating command finds the journal), ends in one of the two. A journal of the format
before phases is read as ``prepared``; a journal without ``from`` (or ``root``) was written
before the category directory, and names the plugin and its siblings directly in ``plugins/``. Every path is reached through ``dirfd``: nothing is
written or removed through a link.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_cli.errors import ConfirmationRequired
from hermes_cli.operator.errors import IntegrationError
from hermes_cli.plugin_host import PLUGINS_DIR
from runtime_package import manifests
from shared import faults, files, homes
from shared.errors import HermesError
from shared.faults import pause_at
from shared.identity import ProcessIdentity, current_identity
from shared.locks import FileLock, LockHeld
from shared.operator.policy import Policy
from shared.version import version_line

from . import assets, hermes_bin, probe_client, registration, settings
from .dirfd import Dir, descend, unsafe
from .source import Source
from .target import CATEGORY, PLUGIN_NAME, POLICY_FILE, Target, policy_path

JOURNAL = ".pohunek-journal.json"
STAGE_PREFIX = ".pohunek-stage-"
BACKUP_PREFIX = ".pohunek-backup-"
POLICY_BACKUP = ".pohunek-backup"  # suffix of the kept-aside policy
INSTALL, UNINSTALL = "install", "uninstall"
PREPARED, COMMITTED = "prepared", "committed"
MAX_JOURNAL_BYTES = 64 * 1024
_LEGACY_FIELDS = {"stage", "backup", "had_plugin", "had_policy", "was_enabled", "policy_path"}
CURRENT = f"{CATEGORY}/{PLUGIN_NAME}"  # each root, relative to <home>/plugins
LEGACY = PLUGIN_NAME
ROOTS = (CURRENT, LEGACY)
_PHASED = _LEGACY_FIELDS | {"action", "phase", "owner"}
_UNINSTALL_FIELDS = {"action", "phase", "owner", "was_enabled", "policy_path", "assets"}
_FIELDS = {
    INSTALL: (_PHASED | {"from"}, _PHASED),  # this installer's, then the one before categories
    UNINSTALL: (_UNINSTALL_FIELDS | {"root"}, _UNINSTALL_FIELDS),
}
Spot = tuple[tuple[str, ...], str]  # a directory below <home>/plugins, and a name in it
_POLICY_BACKUP_NAME = POLICY_FILE + POLICY_BACKUP


class PluginRootUnmanaged(IntegrationError):
    code = "plugin_root_unmanaged"


class ProbeRejected(IntegrationError):
    code = "plugin_probe_rejected"


class JournalInvalid(IntegrationError):
    code = "integration_journal_invalid"


class IntegrationBusy(IntegrationError):
    code = "integration_busy"


@dataclass(frozen=True)
class Change:
    target: Target
    state: Path
    bin: str


def _confirm_modified() -> ConfirmationRequired:
    return ConfirmationRequired(
        "the installed plugin was modified: review it, then confirm with --confirm-modified",
        detail={"flag": "--confirm-modified"},
    )


@dataclass(frozen=True)
class Installed:
    rel: str  # CURRENT or LEGACY
    root: Path
    marker: assets.Marker


def found_roots(target: Target) -> list[str]:
    """Which of the plugin's places (``ROOTS``) hold anything."""
    return [rel for rel in ROOTS if os.path.lexists(target.home / PLUGINS_DIR / rel)]


def installed(target: Target) -> Installed | None:
    """Our plugin, where it is; None when nothing is installed. A plugin that is not ours, or
    one in each place, is refused rather than overwritten."""
    found = found_roots(target)
    if not found:
        return None
    root = target.home / PLUGINS_DIR / found[0]
    marker = assets.read_marker(root) if root.is_dir() and not root.is_symlink() else None
    if marker is None or len(found) > 1:
        path = root if marker is None else target.home / PLUGINS_DIR / found[1]
        raise PluginRootUnmanaged(
            "a pohunek plugin this installer did not write is in the home: move it away first",
            detail={"path": str(path)},
        )
    return Installed(found[0], root, marker)


def is_modified(target: Target, found: Installed) -> bool:
    return found.marker.hermes_home != str(target.home) or assets.modified(found.root, found.marker)


def paths_safe(target: Target, state: Path) -> bool:
    """Whether each directory the installer goes through is a real directory or missing."""
    policy_dir = policy_path(state, target).parent
    plugins = target.home / PLUGINS_DIR
    chain = [plugins, plugins / CATEGORY, target.plugin_root, target.legacy_root]
    chain += [policy_dir.parent.parent, policy_dir.parent, policy_dir]
    for path in chain:
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                return False
        except FileNotFoundError:
            continue
    return True


@dataclass(frozen=True)
class _Places:
    """The open directories of one held transaction."""

    home: Dir
    integration: Dir  # <state>/integrations/hermes: the lock, and the policy directory in it
    policy_dir_name: str

    def plugins(self) -> Dir | None:
        return self.home.sub(PLUGINS_DIR)

    def policy_dir(self) -> Dir:
        made = self.integration.ensure(self.policy_dir_name)
        made.make_private()
        return made


@contextmanager
def held(change: Change) -> Iterator[_Places]:
    """The target's lock, held until the transaction ends, and its directories opened."""
    policy_dir = policy_path(change.state, change.target).parent
    if not os.path.lexists(change.state):
        homes.make_private_dirs(change.state)
    with ExitStack() as stack:
        # The state directory is the owner's setting, as the package registry takes it.
        state = stack.enter_context(Dir.root(change.state, follow=True))
        integration = stack.enter_context(Dir(os.dup(state.fd), state.path))
        for part in policy_dir.parent.relative_to(change.state).parts:
            integration = stack.enter_context(integration.ensure(part))
            integration.make_private()  # the integration's own directories, whoever made them
        lock = FileLock(Path(f"{policy_dir.name}.lock"), dir_fd=integration.fd)
        try:
            lock.acquire()
        except LockHeld as exc:
            pid = exc.holder.pid if exc.holder else None
            raise IntegrationBusy(
                f"another operator command (pid {pid or 'unknown'}) is changing this Hermes home: "
                "retry when it has finished",
                detail={"holder_pid": pid},
            ) from None
        except OSError:
            raise unsafe(integration.path / f"{policy_dir.name}.lock", "not a lock file") from None
        stack.callback(lock.release)
        home = stack.enter_context(Dir.root(change.target.home))
        yield _Places(home, integration, policy_dir.name)


@dataclass(frozen=True)
class _Spots:
    """Where one install transaction's plugin directories are, each a ``Spot``."""

    stage: Spot  # the rendered plugin before it is swapped in
    backup: Spot  # the installed plugin once it is moved aside
    holders: tuple[Spot, ...]  # what is removed once the transaction ends
    old: Spot | None  # where the installed plugin was
    new: Spot  # where the rendered plugin goes


def _spot(rel: str) -> Spot:
    *parts, name = rel.split("/")
    return tuple(parts), name


def _spots(journal: dict[str, Any]) -> _Spots:
    stage, backup = journal["stage"], journal["backup"]
    if "from" not in journal:  # before the category directory: siblings of plugins/pohunek
        old = _spot(LEGACY) if journal["had_plugin"] else None
        return _Spots(((), stage), ((), backup), (((), stage), ((), backup)), old, _spot(LEGACY))
    holders = (((CATEGORY,), stage), ((CATEGORY,), backup))
    old = _spot(journal["from"]) if journal["from"] is not None else None
    return _Spots(((CATEGORY, stage), PLUGIN_NAME), ((CATEGORY, backup), PLUGIN_NAME), holders, old, _spot(CURRENT))


@contextmanager
def _at(plugins: Dir, spot: Spot, *, create: bool = False) -> Iterator[tuple[Dir | None, str]]:
    """The open directory of ``spot`` (None when a directory on the way is missing), and its name."""
    parts, name = spot
    here = descend(plugins, parts, create=create)
    try:
        yield here, name
    finally:
        if here is not None:
            here.close()


def _kind(plugins: Dir, spot: Spot) -> str | None:
    with _at(plugins, spot) as (here, name):
        return here.kind(name) if here is not None else None


def _remove(plugins: Dir, spot: Spot) -> None:
    with _at(plugins, spot) as (here, name):
        if here is not None:
            here.remove(name)


def _move(plugins: Dir, source: Spot, target: Spot) -> None:
    with _at(plugins, source) as (here, name), _at(plugins, target, create=True) as (there, new):
        assert here is not None and there is not None  # the source is there; the target made
        here.rename(name, there, new)


def apply(
    change: Change, source: Source, policy_over: Callable[[Path], Policy], *, confirm_modified: bool
) -> dict[str, Any] | None:
    """Install or replace the plugin from ``source`` with the policy ``policy_over`` makes of
    the installed policy file; what recovery did first."""
    target = change.target
    policy_file = policy_path(change.state, target)
    with held(change) as places:
        recovered = _recover(change, places)
        policy = policy_over(policy_file)  # read once recovery has put the policy back
        found = installed(target)
        if found is not None and is_modified(target, found) and not confirm_modified:
            raise _confirm_modified()
        rendered = manifests.render(source.files, source.operator, str(policy_file))
        new_marker = assets.Marker(
            str(target.home), str(policy_file), assets.asset_digests(rendered), source.provenance
        )
        with places.home.ensure(PLUGINS_DIR) as plugins, places.policy_dir() as policy_dir:
            token = secrets.token_hex(6)
            journal = {
                "action": INSTALL,
                "phase": PREPARED,
                "owner": current_identity().to_dict(),
                "stage": f"{STAGE_PREFIX}{token}",
                "backup": f"{BACKUP_PREFIX}{token}",
                "had_plugin": found is not None,
                "from": found.rel if found is not None else None,
                "had_policy": policy_dir.kind(POLICY_FILE) is not None,
                "was_enabled": _enabled(change),
                "policy_path": str(policy_file),
            }
            _write_journal(plugins, journal)
            try:
                _swap_in(change, plugins, policy_dir, journal, rendered, new_marker.to_bytes(version_line()), policy)
            except BaseException:
                _roll_back_apply(change, plugins, policy_dir, journal)
                raise
            _write_journal(plugins, {**journal, "phase": COMMITTED})
            _finish_apply(plugins, policy_dir, journal)
    return recovered


def _swap_in(
    change: Change,
    plugins: Dir,
    policy_dir: Dir,
    journal: dict[str, Any],
    rendered: dict[str, bytes],
    marker: bytes,
    policy: Policy,
) -> None:
    spots = _spots(journal)
    with _at(plugins, spots.stage, create=True) as (holder, name):
        assert holder is not None
        assets.write_tree(holder, name, rendered, marker)
    pause_at("operator:staged")
    if journal["had_policy"]:
        policy_dir.rename(POLICY_FILE, policy_dir, _POLICY_BACKUP_NAME)
    policy_dir.replace(POLICY_FILE, settings.encode(policy), files.SECRET_MODE)
    staged = change.target.home / PLUGINS_DIR / "/".join((*spots.stage[0], spots.stage[1]))
    result = probe_client.run_probe(change.bin, staged, Path(journal["policy_path"]))
    failed = [c for c in registration.checks(result, policy.access_mode) if c["status"] != "pass"]
    if failed:
        raise ProbeRejected(
            "the staged plugin did not load as it must in Hermes",
            detail={"checks": [c["code"] for c in failed]},
        )
    if spots.old is not None:
        _move(plugins, spots.old, spots.backup)
        pause_at("operator:backed_up")
    _move(plugins, spots.stage, spots.new)
    pause_at("operator:swapped")
    _switch(change, True)
    pause_at("operator:enabled")


def _finish_apply(plugins: Dir, policy_dir: Dir, journal: dict[str, Any]) -> None:
    """Past the point of no return: remove what the new plugin and policy replaced."""
    for holder in _spots(journal).holders:
        _remove(plugins, holder)
    policy_dir.remove(_POLICY_BACKUP_NAME)
    _close_journal(plugins)


def _roll_back_apply(change: Change, plugins: Dir, policy_dir: Dir, journal: dict[str, Any]) -> None:
    """Put the plugin, the policy and the enablement back as the journal found them."""
    spots = _spots(journal)
    _restore_enablement(change, journal["was_enabled"])
    _remove(plugins, spots.stage)
    if _kind(plugins, spots.backup) == "dir" and spots.old is not None:
        _remove(plugins, spots.new)
        _move(plugins, spots.backup, spots.old)
    else:
        _remove(plugins, spots.backup)  # nothing, or a link someone put at its name
        if spots.old is None:
            _remove(plugins, spots.new)
    for holder in spots.holders:
        _remove(plugins, holder)
    if not journal["had_policy"]:
        policy_dir.remove(POLICY_FILE)
    elif policy_dir.kind(_POLICY_BACKUP_NAME) is not None:
        policy_dir.rename(_POLICY_BACKUP_NAME, policy_dir, POLICY_FILE)
    _close_journal(plugins)


def uninstall(change: Change, *, confirm_modified: bool) -> tuple[bool, dict[str, Any] | None]:
    """Remove the managed plugin and its policy: whether anything was installed, and what
    recovery did first."""
    target = change.target
    with held(change) as places:
        recovered = _recover(change, places)
        found = installed(target)
        if found is None:
            _remove_policy(places)  # each removal is idempotent: a re-run finishes an interrupted one
            return False, recovered
        if is_modified(target, found) and not confirm_modified:
            raise _confirm_modified()
        with places.home.ensure(PLUGINS_DIR) as plugins:
            journal = {
                "action": UNINSTALL,
                "phase": PREPARED,
                "owner": current_identity().to_dict(),
                "was_enabled": _enabled(change),
                "policy_path": str(policy_path(change.state, target)),
                "assets": sorted(found.marker.assets),
                "root": found.rel,
            }
            _write_journal(plugins, journal)
            try:
                if journal["was_enabled"]:
                    _switch(change, False)
            except BaseException:
                _roll_back_uninstall(change, plugins, journal)
                raise
            _write_journal(plugins, {**journal, "phase": COMMITTED})
            _finish_uninstall(places, plugins, journal)
    return True, recovered


def _roll_back_uninstall(change: Change, plugins: Dir, journal: dict[str, Any]) -> None:
    _restore_enablement(change, journal["was_enabled"])
    _close_journal(plugins)


def _restore_enablement(change: Change, was_enabled: bool) -> None:
    """Switch the plugin back as it was, while it is still there so Hermes can. A Hermes that
    cannot say (its list broken, hung or flooding) is switched back without its word: the
    files are put back whatever it answers, and the command's own error is what it reports."""
    if not found_roots(change.target):
        return
    try:
        if _enabled(change) != was_enabled:
            _switch(change, was_enabled)
    except hermes_bin.HermesUnusable:
        with suppress(hermes_bin.HermesUnusable):
            hermes_bin.switch_command(change.bin, change.target.home, was_enabled)


def _finish_uninstall(places: _Places, plugins: Dir, journal: dict[str, Any]) -> None:
    """Past the point of no return: remove each managed file, then each managed directory left
    empty, then the policy. What is not the installer's stays; a link is removed as the link."""
    with _at(plugins, _spot(journal.get("root", LEGACY))) as (parent, name):
        root = parent.sub(name) if parent is not None and parent.kind(name) == "dir" else None
        if root is not None:
            with root:
                directories = {
                    "/".join(rel.split("/")[:depth])
                    for rel in journal["assets"]
                    for depth in range(1, rel.count("/") + 1)
                }
                for rel in [*journal["assets"], assets.MARKER]:
                    _in_managed_dir(root, rel, Dir.remove_entry)
                for rel in sorted(directories, key=lambda d: -d.count("/")):
                    _in_managed_dir(root, rel, Dir.remove_empty_dir)
        if parent is not None:
            parent.remove_empty_dir(name)
    _remove_policy(places)
    _close_journal(plugins)


def _in_managed_dir(root: Dir, rel: str, action: Callable[[Dir, str], None]) -> None:
    """``action(directory, name)`` for ``rel`` below ``root``, unless a directory on the way is
    missing or not a directory (a link there is removed as the link: it is not followed)."""
    *parts, name = rel.split("/")
    here = Dir(os.dup(root.fd), root.path)
    for part in parts:
        with here:
            kind = here.kind(part)
            if kind == "link":
                here.remove_entry(part)
            below = here.sub(part) if kind == "dir" else None
        if below is None:
            return
        here = below
    with here:
        action(here, name)


def _remove_policy(places: _Places) -> None:
    policy_dir = places.integration.sub(places.policy_dir_name)
    if policy_dir is None:
        return
    with policy_dir:
        policy_dir.remove_entry(POLICY_FILE)
        policy_dir.remove_entry(_POLICY_BACKUP_NAME)
    places.integration.remove_empty_dir(places.policy_dir_name)


def _recover(change: Change, places: _Places) -> dict[str, Any] | None:
    """Finish what an interrupted transaction left (its owner is gone: this one holds the lock):
    back before the point of no return, forward after it. None when there was nothing."""
    _sweep_policy_temps(places)
    plugins = places.plugins()
    if plugins is None:
        return None
    with plugins:
        plugins.sweep_temps(JOURNAL)  # a crash inside a journal write: its writer is gone too
        journal = _read_journal(plugins, policy_path(change.state, change.target))
        if journal is None:
            return None
        forward = journal["phase"] == COMMITTED
        if journal["action"] == UNINSTALL:
            if forward:
                _finish_uninstall(places, plugins, journal)
            else:
                _roll_back_uninstall(change, plugins, journal)
        else:
            with places.policy_dir() as policy_dir:
                if forward:
                    _finish_apply(plugins, policy_dir, journal)
                else:
                    _roll_back_apply(change, plugins, policy_dir, journal)
    return {
        "action": journal["action"],
        "phase": journal["phase"],
        "outcome": "rolled_forward" if forward else "rolled_back",
        "owner": journal["owner"],
    }


def _sweep_policy_temps(places: _Places) -> None:
    policy_dir = places.integration.sub(places.policy_dir_name)
    if policy_dir is not None:
        with policy_dir:
            policy_dir.sweep_temps(POLICY_FILE)


def _write_journal(plugins: Dir, journal: dict[str, Any]) -> None:
    data = json.dumps(journal, indent=2, sort_keys=True).encode() + b"\n"
    plugins.replace(JOURNAL, data, files.SECRET_MODE)


def _close_journal(plugins: Dir) -> None:
    plugins.fsync()  # what the journal covered is durable before it goes
    plugins.remove_entry(JOURNAL)


def _read_journal(plugins: Dir, policy_file: Path) -> dict[str, Any] | None:
    path = plugins.path / JOURNAL
    try:
        raw = plugins.read(JOURNAL, MAX_JOURNAL_BYTES)
    except HermesError:
        raise JournalInvalid(f"the integration journal {path} is not a regular file: inspect it") from None
    if raw is None:
        return None
    journal = parse_journal(raw, policy_file)
    if journal is None:
        raise JournalInvalid(f"the integration journal {path} is not one this installer wrote: inspect it")
    return journal


def parse_journal(raw: bytes, policy_file: Path) -> dict[str, Any] | None:
    """The journal, None when it is not exactly one this installer writes for ``policy_file``.
    One without ``action``, ``phase`` and ``owner`` (the earlier format) is an install's,
    before the point of no return."""
    try:
        journal = json.loads(raw) if len(raw) <= MAX_JOURNAL_BYTES else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(journal, dict):
        return None
    if set(journal) == _LEGACY_FIELDS:
        journal = {**journal, "action": INSTALL, "phase": PREPARED, "owner": None}
    elif not _identity(journal.get("owner")):
        return None
    action = journal.get("action")
    shapes = _FIELDS.get(action) if isinstance(action, str) else None
    if shapes is None or set(journal) not in shapes or journal["phase"] not in (PREPARED, COMMITTED):
        return None
    if journal["policy_path"] != str(policy_file) or not isinstance(journal["was_enabled"], bool):
        return None
    if journal["action"] == UNINSTALL:
        listed = journal["assets"]
        assets_ok = isinstance(listed, list) and all(assets.safe_rel(rel) for rel in listed)
        return journal if assets_ok and journal.get("root", LEGACY) in ROOTS else None
    flags_ok = isinstance(journal["had_plugin"], bool) and isinstance(journal["had_policy"], bool)
    siblings_ok = _sibling(journal["stage"], STAGE_PREFIX) and _sibling(journal["backup"], BACKUP_PREFIX)
    moved = journal.get("from")
    from_ok = "from" not in journal or (moved in ROOTS if journal["had_plugin"] else moved is None)
    return journal if flags_ok and siblings_ok and from_ok else None


def _identity(value: Any) -> bool:
    try:
        ProcessIdentity.from_dict(value)
    except ValueError:
        return False
    return isinstance(value, dict) and set(value) == {"pid", "start_time"}


def _sibling(name: Any, prefix: str) -> bool:
    return isinstance(name, str) and name.startswith(prefix) and "/" not in name and len(name) < 64


def _enabled(change: Change) -> bool:
    """Whether Hermes lists the plugin as enabled (it lists no plugin that is not there)."""
    if not found_roots(change.target):
        return False
    return hermes_bin.plugin_state(change.bin, change.target.home) == hermes_bin.ENABLED


def _switch(change: Change, enabled: bool) -> None:
    faults.step()  # the enablement is a change of the home like any other
    hermes_bin.switch_plugin(change.bin, change.target.home, enabled)


def stale_siblings(target: Target) -> dict[str, list[str]]:
    """What an interrupted transaction left: stages and backups beside either place of the
    plugin (named from ``<home>/plugins``), and the journal."""
    plugins = target.home / PLUGINS_DIR
    names = []
    for directory, prefix in ((plugins, ""), (plugins / CATEGORY, f"{CATEGORY}/")):
        try:
            names += [prefix + name for name in sorted(os.listdir(directory))]
        except OSError:
            continue
    leaf = [(name, name.rsplit("/", 1)[-1]) for name in names]
    return {
        "stage": [n for n, last in leaf if last.startswith(STAGE_PREFIX)],
        "backup": [n for n, last in leaf if last.startswith(BACKUP_PREFIX)],
        "journal": [n for n in names if n == JOURNAL],
    }
