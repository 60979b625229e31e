"""The install, update and uninstall transactions of the operator plugin in one Hermes home.

Each holds the target's lock (``<state>/integrations/hermes/<digest>.lock``, keyed like the
policy directory, outside the home) from its first step to its last, recovery included: a second
command on the same target is ``integration_busy`` at once, and a journal found while holding
the lock is one whose owner is gone.

Install and update: render into a stage sibling, write the policy (keeping the old one aside),
validate the staged plugin in a fresh process of the target Hermes, move the installed plugin
to a backup sibling, swap the stage in, enable it through ``hermes plugins enable``, then pass
the point of no return (the journal's ``phase`` becomes ``committed``) and remove the backups.
Uninstall checks ownership from the marker and the installed bytes, disables the plugin through
Hermes, passes the point of no return, then removes only the managed files and the policy:
unmanaged files stay.

The journal (``<home>/plugins/.pohunek-journal.json``), written before the first change, says
how to finish: before the point of no return every change is undone (the plugin, the policy and
the enablement as they were), after it the removals are finished. Any failure, and any crash
(the next mutating command finds the journal), ends in one of the two. A journal of the format
before phases is read as ``prepared``. Every path is reached through ``dirfd``: nothing is
written or removed through a link.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared import faults, files, homes, plugin_host
from shared.errors import HermesError
from shared.faults import pause_at
from shared.identity import ProcessIdentity, current_identity
from shared.locks import FileLock, LockHeld
from shared.operator import manifests
from shared.operator.policy import Policy
from shared.plugin_host import PLUGINS_DIR
from shared.version import version_line

from . import assets, hermes_bin, probe_client, registration, settings
from .dirfd import Dir, unsafe
from .source import Source
from .target import PLUGIN_NAME, POLICY_FILE, Target, policy_path

JOURNAL = ".pohunek-journal.json"
STAGE_PREFIX = ".pohunek-stage-"
BACKUP_PREFIX = ".pohunek-backup-"
POLICY_BACKUP = ".pohunek-backup"  # suffix of the kept-aside policy
INSTALL, UNINSTALL = "install", "uninstall"
PREPARED, COMMITTED = "prepared", "committed"
MAX_JOURNAL_BYTES = 64 * 1024
_LEGACY_FIELDS = {"stage", "backup", "had_plugin", "had_policy", "was_enabled", "policy_path"}
_FIELDS = {
    INSTALL: _LEGACY_FIELDS | {"action", "phase", "owner"},
    UNINSTALL: {"action", "phase", "owner", "was_enabled", "policy_path", "assets"},
}
_POLICY_BACKUP_NAME = POLICY_FILE + POLICY_BACKUP


class PluginRootUnmanaged(HermesError):
    code = "plugin_root_unmanaged"


class ProbeRejected(HermesError):
    code = "plugin_probe_rejected"


class JournalInvalid(HermesError):
    code = "integration_journal_invalid"


class IntegrationBusy(HermesError):
    code = "integration_busy"


@dataclass(frozen=True)
class Change:
    target: Target
    state: Path
    bin: str


def _confirm_modified() -> settings.ConfirmationRequired:
    return settings.ConfirmationRequired(
        "the installed plugin was modified: review it, then confirm with --confirm-modified",
        detail={"flag": "--confirm-modified"},
    )


def installed_marker(target: Target) -> assets.Marker | None:
    """The marker of our plugin, None when nothing is installed; a plugin root that is not ours
    is refused rather than overwritten."""
    root = target.plugin_root
    if not root.exists() and not root.is_symlink():
        return None
    marker = assets.read_marker(root) if root.is_dir() and not root.is_symlink() else None
    if marker is None:
        raise PluginRootUnmanaged(
            "a pohunek plugin this installer did not write is in the home: move it away first",
            detail={"path": str(root)},
        )
    return marker


def is_modified(target: Target, marker: assets.Marker) -> bool:
    return marker.hermes_home != str(target.home) or assets.modified(target.plugin_root, marker)


def paths_safe(target: Target, state: Path) -> bool:
    """Whether each directory the installer goes through is a real directory or missing."""
    policy_dir = policy_path(state, target).parent
    chain = (target.home / PLUGINS_DIR, target.plugin_root, policy_dir.parent.parent, policy_dir.parent, policy_dir)
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
        marker = installed_marker(target)
        if marker is not None and is_modified(target, marker) and not confirm_modified:
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
                "had_plugin": marker is not None,
                "had_policy": policy_dir.kind(POLICY_FILE) is not None,
                "was_enabled": _enabled(target),
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
    stage = journal["stage"]
    assets.write_tree(plugins, stage, rendered, marker)
    pause_at("operator:staged")
    if journal["had_policy"]:
        policy_dir.rename(POLICY_FILE, policy_dir, _POLICY_BACKUP_NAME)
    policy_dir.replace(POLICY_FILE, settings.encode(policy), files.SECRET_MODE)
    home = change.target.home
    result = probe_client.run_probe(change.bin, home / PLUGINS_DIR / stage, env=hermes_bin.env_for(home))
    failed = [c for c in registration.checks(result, policy.access_mode) if c["status"] != "pass"]
    if failed:
        raise ProbeRejected(
            "the staged plugin did not load as it must in Hermes",
            detail={"checks": [c["code"] for c in failed]},
        )
    if journal["had_plugin"]:
        plugins.rename(PLUGIN_NAME, plugins, journal["backup"])
        pause_at("operator:backed_up")
    plugins.rename(stage, plugins, PLUGIN_NAME)
    pause_at("operator:swapped")
    _switch(change, True)
    pause_at("operator:enabled")


def _finish_apply(plugins: Dir, policy_dir: Dir, journal: dict[str, Any]) -> None:
    """Past the point of no return: remove what the new plugin and policy replaced."""
    plugins.remove(journal["backup"])
    policy_dir.remove(_POLICY_BACKUP_NAME)
    _close_journal(plugins)


def _roll_back_apply(change: Change, plugins: Dir, policy_dir: Dir, journal: dict[str, Any]) -> None:
    """Put the plugin, the policy and the enablement back as the journal found them."""
    if _enabled(change.target) != journal["was_enabled"] and plugins.kind(PLUGIN_NAME) == "dir":
        # While the plugin it names is still there, so Hermes can switch it.
        _switch(change, journal["was_enabled"])
    plugins.remove(journal["stage"])
    if plugins.kind(journal["backup"]) == "dir":
        plugins.remove(PLUGIN_NAME)
        plugins.rename(journal["backup"], plugins, PLUGIN_NAME)
    else:
        plugins.remove(journal["backup"])  # nothing, or a link someone put at its name
        if not journal["had_plugin"]:
            plugins.remove(PLUGIN_NAME)
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
        marker = installed_marker(target)
        if marker is None:
            _remove_policy(places)  # each removal is idempotent: a re-run finishes an interrupted one
            return False, recovered
        if is_modified(target, marker) and not confirm_modified:
            raise _confirm_modified()
        with places.home.ensure(PLUGINS_DIR) as plugins:
            journal = {
                "action": UNINSTALL,
                "phase": PREPARED,
                "owner": current_identity().to_dict(),
                "was_enabled": _enabled(target),
                "policy_path": str(policy_path(change.state, target)),
                "assets": sorted(marker.assets),
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
    if journal["was_enabled"] and not _enabled(change.target) and plugins.kind(PLUGIN_NAME) == "dir":
        _switch(change, True)
    _close_journal(plugins)


def _finish_uninstall(places: _Places, plugins: Dir, journal: dict[str, Any]) -> None:
    """Past the point of no return: remove each managed file, then each managed directory left
    empty, then the policy. What is not the installer's stays; a link is removed as the link."""
    root = plugins.sub(PLUGIN_NAME) if plugins.kind(PLUGIN_NAME) == "dir" else None
    if root is not None:
        with root:
            directories = {
                "/".join(rel.split("/")[:depth]) for rel in journal["assets"] for depth in range(1, rel.count("/") + 1)
            }
            for rel in [*journal["assets"], assets.MARKER]:
                _in_managed_dir(root, rel, Dir.remove_entry)
            for rel in sorted(directories, key=lambda d: -d.count("/")):
                _in_managed_dir(root, rel, Dir.remove_empty_dir)
        plugins.remove_empty_dir(PLUGIN_NAME)
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
    fields = _FIELDS.get(action) if isinstance(action, str) else None
    if fields is None or set(journal) != fields or journal["phase"] not in (PREPARED, COMMITTED):
        return None
    if journal["policy_path"] != str(policy_file) or not isinstance(journal["was_enabled"], bool):
        return None
    if journal["action"] == UNINSTALL:
        listed = journal["assets"]
        return journal if isinstance(listed, list) and all(assets.safe_rel(rel) for rel in listed) else None
    flags_ok = isinstance(journal["had_plugin"], bool) and isinstance(journal["had_policy"], bool)
    siblings_ok = _sibling(journal["stage"], STAGE_PREFIX) and _sibling(journal["backup"], BACKUP_PREFIX)
    return journal if flags_ok and siblings_ok else None


def _identity(value: Any) -> bool:
    try:
        ProcessIdentity.from_dict(value)
    except ValueError:
        return False
    return isinstance(value, dict) and set(value) == {"pid", "start_time"}


def _sibling(name: Any, prefix: str) -> bool:
    return isinstance(name, str) and name.startswith(prefix) and "/" not in name and len(name) < 64


def _enabled(target: Target) -> bool:
    return PLUGIN_NAME in plugin_host.enabled_names(target.home)


def _switch(change: Change, enabled: bool) -> None:
    faults.step()  # the enablement is a change of the home like any other
    hermes_bin.switch_plugin(change.bin, change.target.home, PLUGIN_NAME, enabled)


def stale_siblings(target: Target) -> dict[str, list[str]]:
    plugins = target.plugin_root.parent
    try:
        names = sorted(os.listdir(plugins))
    except OSError:
        names = []
    return {
        "stage": [n for n in names if n.startswith(STAGE_PREFIX)],
        "backup": [n for n in names if n.startswith(BACKUP_PREFIX)],
        "journal": [n for n in names if n == JOURNAL],
    }
