"""The install, update and uninstall transactions of the operator plugin in one Hermes home.

Install and update: render into a stage sibling, write the policy (keeping the old one aside),
validate the staged plugin in a fresh process of the target Hermes, move the installed plugin
to a backup sibling, swap the stage in, enable it through ``hermes plugins enable``, and commit
by removing the backups. A journal (``<home>/plugins/.pohunek-journal.json``) written before the
first change says how to undo it: any failure, and any crash (the next mutating command finds
the journal), restores the plugin, the policy and the enablement as they were.

Uninstall checks ownership from the marker and the installed bytes, disables the plugin through
Hermes, then removes only the managed files and the policy: unmanaged files stay.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared import files, plugin_host
from shared.errors import HermesError
from shared.faults import pause_at
from shared.operator import manifests
from shared.operator.policy import Policy
from shared.version import version_line

from . import assets, hermes_bin, probe_client, registration, settings
from .source import Source
from .target import PLUGIN_NAME, Target, policy_path

JOURNAL = ".pohunek-journal.json"
STAGE_PREFIX = ".pohunek-stage-"
BACKUP_PREFIX = ".pohunek-backup-"
POLICY_BACKUP = ".pohunek-backup"  # suffix of the kept-aside policy
_JOURNAL_FIELDS = {"stage", "backup", "had_plugin", "had_policy", "was_enabled", "policy_path"}


class PluginRootUnmanaged(HermesError):
    code = "plugin_root_unmanaged"


class ProbeRejected(HermesError):
    code = "plugin_probe_rejected"


class JournalInvalid(HermesError):
    code = "integration_journal_invalid"


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


def apply(change: Change, source: Source, policy: Policy, *, confirm_modified: bool) -> None:
    """Install or replace the plugin from ``source`` with ``policy``."""
    target = change.target
    recover(change)
    marker = installed_marker(target)
    if marker is not None and is_modified(target, marker) and not confirm_modified:
        raise _confirm_modified()
    policy_file = policy_path(change.state, target)
    rendered = manifests.render(source.files, source.operator, str(policy_file))
    new_marker = assets.Marker(str(target.home), str(policy_file), assets.asset_digests(rendered), source.provenance)
    plugins = target.plugin_root.parent
    plugins.mkdir(parents=True, exist_ok=True, mode=files.PRIVATE_DIR_MODE)
    token = secrets.token_hex(6)
    journal = {
        "stage": f"{STAGE_PREFIX}{token}",
        "backup": f"{BACKUP_PREFIX}{token}",
        "had_plugin": marker is not None,
        "had_policy": policy_file.exists(),
        "was_enabled": PLUGIN_NAME in plugin_host.enabled_names(target.home),
        "policy_path": str(policy_file),
    }
    files.write_json_atomic(plugins / JOURNAL, journal, secret=True)
    try:
        _swap_in(change, journal, rendered, new_marker, policy)
    except BaseException:
        _rollback(change, journal)
        raise
    _commit(target, journal)


def _swap_in(
    change: Change, journal: dict[str, Any], rendered: dict[str, bytes], marker: assets.Marker, policy: Policy
) -> None:
    target, plugins = change.target, change.target.plugin_root.parent
    stage = plugins / journal["stage"]
    assets.write_tree(stage, rendered, marker.to_bytes(version_line()))
    pause_at("operator:staged")
    policy_file = Path(journal["policy_path"])
    if journal["had_policy"]:
        os.replace(policy_file, _policy_backup(policy_file))
    settings.write(policy_file, policy)
    result = probe_client.run_probe(change.bin, stage, env=hermes_bin.env_for(target.home))
    failed = [c for c in registration.checks(result, policy.access_mode) if c["status"] != "pass"]
    if failed:
        raise ProbeRejected(
            "the staged plugin did not load as it must in Hermes",
            detail={"checks": [c["code"] for c in failed]},
        )
    if journal["had_plugin"]:
        os.rename(target.plugin_root, plugins / journal["backup"])
        pause_at("operator:backed_up")
    os.rename(stage, target.plugin_root)
    pause_at("operator:swapped")
    hermes_bin.switch_plugin(change.bin, target.home, PLUGIN_NAME, True)
    pause_at("operator:enabled")


def _policy_backup(policy_file: Path) -> Path:
    return policy_file.with_name(policy_file.name + POLICY_BACKUP)


def _commit(target: Target, journal: dict[str, Any]) -> None:
    plugins = target.plugin_root.parent
    shutil.rmtree(plugins / journal["backup"], ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_policy_backup(Path(journal["policy_path"])))
    os.unlink(plugins / JOURNAL)


def _rollback(change: Change, journal: dict[str, Any]) -> None:
    """Put the plugin, the policy and the enablement back as the journal found them."""
    target = change.target
    plugins, root = target.plugin_root.parent, target.plugin_root
    backup = plugins / journal["backup"]
    enabled_now = PLUGIN_NAME in plugin_host.enabled_names(target.home)
    if enabled_now != journal["was_enabled"] and root.is_dir():
        # While the plugin it names is still there, so Hermes can switch it.
        hermes_bin.switch_plugin(change.bin, target.home, PLUGIN_NAME, journal["was_enabled"])
    shutil.rmtree(plugins / journal["stage"], ignore_errors=True)
    if backup.is_dir():
        shutil.rmtree(root, ignore_errors=True)
        os.rename(backup, root)
    elif not journal["had_plugin"]:
        shutil.rmtree(root, ignore_errors=True)
    policy_file = Path(journal["policy_path"])
    if _policy_backup(policy_file).exists():
        os.replace(_policy_backup(policy_file), policy_file)
    elif not journal["had_policy"]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(policy_file)
    os.unlink(plugins / JOURNAL)


def pending_journal(target: Target) -> dict[str, Any] | None:
    """The journal an interrupted transaction left, None when there is none."""
    path = target.plugin_root.parent / JOURNAL
    if not path.exists():
        return None
    try:
        journal = files.read_json(path)
    except files.StateFileCorrupt:
        journal = None
    names_ok = isinstance(journal, dict) and set(journal) == _JOURNAL_FIELDS
    if not names_ok or not _sibling(journal["stage"], STAGE_PREFIX) or not _sibling(journal["backup"], BACKUP_PREFIX):
        raise JournalInvalid(f"the integration journal {path} is not one this installer wrote: inspect it")
    if not isinstance(journal["policy_path"], str) or not os.path.isabs(journal["policy_path"]):
        raise JournalInvalid(f"the integration journal {path} names no policy path: inspect it")
    return journal


def _sibling(name: Any, prefix: str) -> bool:
    return isinstance(name, str) and name.startswith(prefix) and "/" not in name and len(name) < 64


def recover(change: Change) -> bool:
    """Undo what an interrupted transaction left; whether there was one."""
    journal = pending_journal(change.target)
    if journal is None:
        return False
    _rollback(change, journal)
    return True


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


def uninstall(change: Change, *, confirm_modified: bool) -> bool:
    """Remove the managed plugin and its policy; whether anything was installed."""
    target = change.target
    recover(change)
    marker = installed_marker(target)
    policy_file = policy_path(change.state, target)
    if marker is None:
        _remove_policy(policy_file)
        return False
    if is_modified(target, marker) and not confirm_modified:
        raise _confirm_modified()
    if PLUGIN_NAME in plugin_host.enabled_names(target.home):
        hermes_bin.switch_plugin(change.bin, target.home, PLUGIN_NAME, False)
    root = target.plugin_root
    for rel in [*marker.assets, assets.MARKER]:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            os.unlink(root / rel)
    for directory, _, _ in sorted(os.walk(root), key=lambda entry: -len(entry[0])):
        with contextlib.suppress(OSError):  # a directory with unmanaged files in it stays
            os.rmdir(directory)
    _remove_policy(policy_file)
    return True


def _remove_policy(policy_file: Path) -> None:
    for path in (policy_file, _policy_backup(policy_file)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    with contextlib.suppress(OSError):
        policy_file.parent.rmdir()
