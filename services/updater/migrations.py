"""Versioned migrations of every home's ``config.yaml``, run by the completion in the NEW code.

The top-level ``config_version`` (an int; a file without it is version 0) says which schema a
file is written in. ``MIGRATIONS[n]`` takes a version-n document to n+1 by editing the
round-trip mapping in place (comments and key order survive) and returns notes for the
operator. A home is all or nothing: every step runs on one in-memory document, which is written
once, atomically, at the end; a step that raises leaves the file exactly as it was. A file of a
NEWER version than this code knows (a rollback after a newer release migrated it) is left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap

from services.updater.errors import UpdateError
from shared import homes
from shared.config import add_key, eol_comment, load_document, remove_key, replace_value, save_document
from shared.errors import failure_reason

VERSION_KEY = "config_version"

# The 0 -> 1 move: flat legacy key -> key inside the ``update:`` mapping.
LEGACY_UPDATE_KEYS = (("update_branch", "branch"), ("update_archive_url", "archive_url"))
UPDATE_SECTION = "update"
# Where a legacy value that lost to an existing nested one is kept, under the same nested name.
CONFLICTS = "legacy_conflicts"

MIGRATED, CURRENT, ABSENT, NEWER, FAILED = "migrated", "current", "absent", "newer", "failed"


class MigrationFailed(UpdateError):
    code = "config_migration_failed"


@dataclass(frozen=True)
class MigrationOutcome:
    home: Path
    from_version: int | None  # None: no file, or no readable version
    to_version: int | None  # the version the file is at afterwards
    applied: list[str]
    status: str  # migrated, current, absent, newer or failed
    reason: str | None = None
    notes: list[str] = field(default_factory=list)  # what the operator should know, e.g. a conflict

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "home": str(self.home)}


def nest_update_keys(data: CommentedMap) -> list[str]:
    """0 -> 1: ``update_branch``/``update_archive_url`` become ``update.branch``/``update.archive_url``.

    A value already under ``update:`` wins; the flat one, when it differs, is kept as
    ``update.legacy_conflicts.<name>`` (with a comment saying so) and reported in a note.
    A new ``update:`` mapping takes the place of the first flat key.
    """
    present = [(flat, nested) for flat, nested in LEGACY_UPDATE_KEYS if flat in data]
    if not present:
        return []
    existing = data.get(UPDATE_SECTION)
    if existing is not None and not isinstance(existing, CommentedMap):  # a round-trip mapping is one
        raise MigrationFailed(f"{UPDATE_SECTION} holds a {type(existing).__name__}, not a mapping")
    section = CommentedMap() if existing is None else existing
    notes = []
    for flat, nested in present:
        value = data[flat]
        if isinstance(value, (dict, list)):
            kind = "mapping" if isinstance(value, dict) else "list"
            raise MigrationFailed(f"{flat} holds a {kind}, not a value for {UPDATE_SECTION}.{nested}")
        if nested not in section:
            add_key(section, nested, value, eol_comment(data, flat))
        elif section[nested] != value:
            notes.append(_keep_conflict(section, flat, nested, value))
    # Placed only once filled, so that the comment lines after the flat keys follow the mapping.
    if existing is None and UPDATE_SECTION in data:  # an empty "update:"
        replace_value(data, UPDATE_SECTION, section)
    elif existing is None:
        data.insert(list(data).index(present[0][0]), UPDATE_SECTION, section)
    for flat, _ in present:
        remove_key(data, flat)
    return notes


def _keep_conflict(section: CommentedMap, flat: str, nested: str, value: Any) -> str:
    conflicts = section.get(CONFLICTS)
    if conflicts is not None and (not isinstance(conflicts, CommentedMap) or nested in conflicts):
        where = f"{UPDATE_SECTION}.{CONFLICTS}.{nested}"
        raise MigrationFailed(f"{flat} conflicts with {UPDATE_SECTION}.{nested}, and {where} is taken")
    why = f"was {flat}; {UPDATE_SECTION}.{nested} was already set and wins"
    if conflicts is None:  # added only once filled, like the update mapping
        conflicts = CommentedMap()
        add_key(conflicts, nested, value, why)
        add_key(section, CONFLICTS, conflicts)
    else:
        add_key(conflicts, nested, value, why)
    return (
        f"{flat}={value!r} conflicts with {UPDATE_SECTION}.{nested}={section[nested]!r}: "
        f"kept {UPDATE_SECTION}.{nested}; the flat value is now {UPDATE_SECTION}.{CONFLICTS}.{nested}"
    )


# MIGRATIONS[n] takes a version-n document to n+1, in place, and returns notes for the operator.
Migration = Callable[[CommentedMap], list[str]]
MIGRATIONS: list[Migration] = [nest_update_keys]
CONFIG_VERSION = len(MIGRATIONS)


def migrate_all(root: Path) -> list[MigrationOutcome]:
    """Every home of the install, the root first; one home's failure is its own outcome only."""
    return [migrate_home(homes.profile_home(name, root)) for name in homes.list_profiles(root)]


def migrate_home(home: Path) -> MigrationOutcome:
    """Bring ``home``'s config.yaml to ``CONFIG_VERSION``. Never raises: a failure is the outcome,
    and the file is then exactly as it was."""
    home = Path(home)
    version = None
    try:
        doc = load_document(home)
        if not doc.exists:
            return MigrationOutcome(home, None, None, [], ABSENT, "no config.yaml")
        version = _version(doc.data)
        if version > CONFIG_VERSION:
            why = f"{VERSION_KEY} {version} is newer than this release knows ({CONFIG_VERSION}); left as it is"
            return MigrationOutcome(home, version, version, [], NEWER, why)
        if version == CONFIG_VERSION:
            return MigrationOutcome(home, version, version, [], CURRENT)
        applied, notes = _migrate(doc.data, version)
        save_document(home, doc)
    except Exception as exc:  # isolation: whatever breaks is this home's outcome, not the caller's
        return MigrationOutcome(home, version, version, [], FAILED, failure_reason(exc))
    return MigrationOutcome(home, version, CONFIG_VERSION, applied, MIGRATED, notes=notes)


def _version(data: CommentedMap) -> int:
    version = data.get(VERSION_KEY, 0)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise MigrationFailed(f"{VERSION_KEY} is {version!r}, not a non-negative integer")
    return int(version)


def _migrate(data: CommentedMap, version: int) -> tuple[list[str], list[str]]:
    if VERSION_KEY not in data:
        data.insert(0, VERSION_KEY, version)  # at the top, where a schema version is looked for
    applied: list[str] = []
    notes: list[str] = []
    for n in range(version, CONFIG_VERSION):
        step = MIGRATIONS[n]
        name = f"{n}->{n + 1} {step.__name__}"
        try:
            notes += step(data)
        except Exception as exc:
            raise MigrationFailed(f"migration {name}: {failure_reason(exc)}") from exc
        data[VERSION_KEY] = n + 1
        applied.append(name)
    return applied, notes
