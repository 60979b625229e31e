"""How commands print: one JSON document with ``--json``, aligned text otherwise.

Errors go to stderr as text, or to stdout as ``{"error": {code, message, detail?}}`` with
``--json`` so scripts read one document either way.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from hermes_cli.errors import CliError
from shared import exit_codes
from shared.errors import HermesError

# Errors that mean "the request was refused" (bad input, wrong state), not "it failed".
REFUSAL_CODES = frozenset(
    {
        "invalid_profile_name",
        "profile_not_found",
        "profile_exists",
        "profile_busy",
        "profile_reserved",
        "profile_rename_same_name",
        "profile_rename_unsupported",
        "confirmation_required",
        "endpoint_busy",
        "gateway_not_running",
        "update_in_progress",
        "confirm_nothing_pending",
        "confirm_too_late",
        "no_update_started",
        "not_supervised",
        "permission_denied",
        "unit_value_invalid",
        "unsupported_scope",
        "mesh_usage",
        "skin_not_found",
        "skin_invalid",
        "curve_key_invalid",
        "curve_key_unknown",
        "keys_usage",
        "grant_invalid",
        "unsafe_run_dir",
        "rollback_unknown_update",
        "rollback_commit_gone",
        "rollback_archive_invalid",
        "rollback_not_git",
        "gateway_running",
        "snapshot_unusable",
        "chat_flags_conflict",
        "chat_mode_unavailable",
        "plugin_not_found",
        "plugin_name_ambiguous",
        "plugin_exists",
        "plugin_source_invalid",
        "plugin_not_git",
        "plugin_path_unsafe",
        # the operator integration and its packages: refused, nothing changed
        "hermes_package_not_installed",
        "hermes_package_not_selected",
        "hermes_invalid_asset",
        "hermes_package_registry_unreadable",
        "hermes_invalid_policy",
        "hermes_target_invalid",
        "hermes_not_executable",
        "hermes_runtime_invalid",
        "hermes_version_unreadable",
        "hermes_version_unsupported",
        "agent_not_served",
        "integration_action_unsupported",
        "plugin_root_unmanaged",
        "ownership_marker_invalid",
        "integration_journal_invalid",
        "integration_busy",
        "integration_path_unsafe",
        "registry_busy",
        "plugin_store_unavailable",
        "package_registry_unreadable",
        "package_archive_invalid",
        "package_input_unreadable",
        "package_conflict",
        "package_not_authorized",
        "package_root_invalid",
        "plugin_selector_ambiguous",
        "plugin_not_installed",
        "plugin_disabled",
        "catalog_invalid",
        "catalog_rollback",
        "catalog_expired",
        "catalog_untrusted",
        "official_trust_unavailable",
        "usage_error",
    }
)


class UsageRefused(CliError):
    """A command line the grammar refuses, printed like any other refusal."""

    code = "usage_error"


def wants_json(args: Any) -> bool:
    return bool(getattr(args, "json", False))


def emit(args: Any, data: Any, text: Callable[[Any], str]) -> None:
    if wants_json(args):
        json.dump(data, sys.stdout, indent=2, sort_keys=False, default=str)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(text(data).rstrip("\n") + "\n")


def error(args: Any, exc: HermesError) -> int:
    if wants_json(args):
        # A command that prints JSON lines (``json_lines``) ends with its error on one line too.
        indent = None if getattr(args, "json_lines", False) else 2
        json.dump({"error": exc.to_dict()}, sys.stdout, indent=indent, default=str)
        sys.stdout.write("\n")
    else:
        print(f"hermes: {exc.message}", file=sys.stderr)
        hint = (exc.detail or {}).get("hint")
        if isinstance(hint, str) and hint:
            print(f"hermes: {hint}", file=sys.stderr)  # what to do about it, where an error says
    return exit_codes.REFUSED if exc.code in REFUSAL_CODES else exit_codes.FAILED


def aligned(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """The header and each row as one line of aligned columns, unpainted."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in cells]


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Aligned columns; on a terminal the header row takes the skin's title color."""
    lines = aligned(headers, rows)
    lines[0] = painter(sys.stdout).paint(lines[0], "banner_title")  # painted after padding: widths stay true
    return "\n".join(lines)


_painters: dict[int, Any] = {}


def painter(stream: TextIO):
    """The active skin's painter for ``stream`` (plain when it is no terminal or NO_COLOR is
    set). A skin that cannot be used is reported once, on stderr, and ``default`` used."""
    key = id(stream)
    if key not in _painters:
        from hermes_cli.skin_engine import Painter, active_skin
        from shared import homes

        skin, warning = active_skin(homes.active_home())
        if warning and not _painters:
            print(f"hermes: {warning}", file=sys.stderr)
        _painters[key] = Painter(skin, stream)
    return _painters[key]
