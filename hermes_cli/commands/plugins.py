"""``hermes plugins list|enable|disable``: the profile's Hermes plugins, and which may load.

Enabling is the supported way to turn a plugin on: it edits only ``plugins.enabled`` of the
profile's ``config.yaml``. ``list`` imports no plugin: it shows what is installed, whether it is
enabled and whether its manifest reads.
"""

from __future__ import annotations

from typing import Any

from hermes_cli import output
from shared import homes, plugin_host


def cmd_list(args) -> int:
    found = plugin_host.discover(homes.active_home())
    rows = [
        {
            "name": p.name,
            "version": p.version,
            "description": p.description,
            "enabled": p.enabled,
            "error": p.error,
            "path": str(p.path),
        }
        for p in found
    ]
    output.emit(args, {"plugins": rows}, _list_text)
    return 0


def _list_text(data: dict[str, Any]) -> str:
    if not data["plugins"]:
        return "no plugins installed (<home>/plugins/<name>/plugin.yaml)"
    rows = [
        (r["name"], r["version"] or "-", "enabled" if r["enabled"] else "disabled", r["error"] or r["description"])
        for r in data["plugins"]
    ]
    return output.table(("PLUGIN", "VERSION", "STATE", "DESCRIPTION"), rows)


def cmd_enable(args) -> int:
    return _set(args, True)


def cmd_disable(args) -> int:
    return _set(args, False)


def _set(args, enabled: bool) -> int:
    home = homes.active_home()
    if not any(p.name == args.name for p in plugin_host.discover(home)):
        raise plugin_host.PluginNotFound(
            f"no plugin {args.name!r} is installed in {home}/plugins", detail={"name": args.name}
        )
    changed = plugin_host.set_enabled(home, args.name, enabled)
    state = "enabled" if enabled else "disabled"
    data = {"name": args.name, "enabled": enabled, "changed": changed}
    output.emit(args, data, lambda d: f"plugin {d['name']} {state}" + ("" if d["changed"] else " already"))
    return 0
