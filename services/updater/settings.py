"""The update's settings: the ``update:`` section of the ROOT home's ``config.yaml``.

    update:
      branch: main                      # default: the branch checked out
      archive_url: https://…/{branch}.zip   # where to fall back to when git fails; none: no fallback
      preserved_nested: [web/node_modules, web/dist]   # build outputs the archive swap carries
      min_healthy: 10                   # seconds a gateway runs without a restart before it is healthy
      step_timeout: 600                 # seconds each step of the completion may take
      canary: true                      # the canary before the tree moves, the gates after it
      max_parallel: 0                   # gateways restarted per gated wave; 0: all in one wave

Every value is checked here, at the boundary: a wrong type or an unsafe path is a
``ConfigError`` naming the file and the key, and the update stops before touching anything.
A file whose text never names ``update`` holds none of them and is not parsed: the updater
does not pay for ruamel there (the completion's migrations read every home's file).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from fleet.health import MAX_MIN_HEALTHY, MAX_PARALLEL, MIN_HEALTHY_SECONDS
from services.updater.apply_archive import PRESERVED_NESTED
from services.updater.archive import ArchiveFailed, archive_url
from shared import config_text
from shared.errors import HermesError
from shared.layout import CONFIG_FILE

# Long enough for a dependency sync and for a restart whose gateways finish their turns first.
STEP_TIMEOUT = 600.0
MAX_STEP_TIMEOUT = 86400.0


@dataclass(frozen=True)
class UpdateSettings:
    branch: str | None = None
    archive_url: str | None = None
    preserved_nested: tuple[str, ...] = PRESERVED_NESTED
    min_healthy: float = MIN_HEALTHY_SECONDS
    step_timeout: float = STEP_TIMEOUT
    canary: bool = True
    max_parallel: int = 0


def load_settings(root: Path) -> UpdateSettings:
    path = Path(root) / CONFIG_FILE
    try:
        if not config_text.mentions(root, b"update"):
            return UpdateSettings()
    except OSError as exc:
        raise _invalid(path, None, f"cannot read it: {exc.strerror or exc}") from None
    # Imported here, not at the top: parsing needs ruamel (see the module's doc).
    from shared.config import get, load_config

    section = get(load_config(root), "update", {})
    if not isinstance(section, dict):
        raise _invalid(path, "update", "must be a mapping")
    return UpdateSettings(
        branch=_text(path, section, "branch"),
        archive_url=_url(path, section),
        preserved_nested=_paths(path, section),
        min_healthy=_seconds(path, section, "min_healthy", MIN_HEALTHY_SECONDS, 0, MAX_MIN_HEALTHY),
        step_timeout=_seconds(path, section, "step_timeout", STEP_TIMEOUT, 1, MAX_STEP_TIMEOUT),
        canary=_flag(path, section, "canary", True),
        max_parallel=_count(path, section, "max_parallel", 0, MAX_PARALLEL),
    )


def _text(path: Path, section: dict[str, Any], key: str) -> str | None:
    value = section.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise _invalid(path, f"update.{key}", "must be a non-empty string")
    return value


def _seconds(path: Path, section: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise _invalid(path, f"update.{key}", f"must be seconds from {low:g} to {high:g}")
    return float(value)


def _flag(path: Path, section: dict[str, Any], key: str, default: bool) -> bool:
    value = section.get(key, default)
    if not isinstance(value, bool):
        raise _invalid(path, f"update.{key}", "must be true or false")
    return value


def _count(path: Path, section: dict[str, Any], key: str, default: int, high: int) -> int:
    value = section.get(key, default)
    if type(value) is not int or not 0 <= value <= high:
        raise _invalid(path, f"update.{key}", f"must be a whole number from 0 to {high}")
    return value


def _url(path: Path, section: dict[str, Any]) -> str | None:
    value = _text(path, section, "archive_url")
    if value is not None:
        try:
            archive_url(value, "main")
        except ArchiveFailed as exc:
            raise _invalid(path, "update.archive_url", exc.message) from None
    return value


def _paths(path: Path, section: dict[str, Any]) -> tuple[str, ...]:
    value = section.get("preserved_nested")
    if value is None:
        return PRESERVED_NESTED
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _invalid(path, "update.preserved_nested", "must be a list of relative paths")
    for item in value:
        parts = PurePosixPath(item).parts
        if item.startswith("/") or ".." in parts or ".git" in parts or len(parts) < 2:
            raise _invalid(
                path, "update.preserved_nested", f"{item!r} must be a path inside a top-level directory of the tree"
            )
    return tuple(value)


def _invalid(path: Path, key: str | None, reason: str) -> HermesError:
    """The ``ConfigError`` for ``key`` of the file at ``path``."""
    from shared.config import ConfigError  # with the parser: see the module's doc

    return ConfigError(path, key, reason)
