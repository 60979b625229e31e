"""``hermes skin list|show|set``: the CLI's skins, and which one this profile uses. A skin's
keys this CLI does not use are named in one warning line."""

from __future__ import annotations

from typing import Any

from hermes_cli import output
from hermes_cli import skin_engine as skins
from shared import config, files, homes


def cmd_list(args) -> int:
    home = homes.active_home()
    active, warning = skins.active_skin(home)
    rows = []
    for name in [*skins.builtin_names(), *skins.user_names(home)]:
        try:
            skin = skins.load_skin(name, home)
            rows.append(
                {
                    "name": name,
                    "description": skin.description,
                    "source": skin.source,
                    "active": name == active.name and active.source == skin.source,
                    "error": None,
                    "warning": skin.warning,
                }
            )
        except skins.HermesError as exc:
            rows.append(
                {
                    "name": name,
                    "description": "",
                    "source": "user",
                    "active": False,
                    "error": exc.message,
                    "warning": None,
                }
            )
    data = {"skins": rows, "active": active.name, "warning": warning or active.warning}
    output.emit(args, data, _list_text)
    return 0


def _list_text(data: dict[str, Any]) -> str:
    rows = [
        ("*" if r["active"] else "", r["name"], r["description"] or f"(broken: {r['error']})", r["source"])
        for r in data["skins"]
    ]
    text = output.table(("", "SKIN", "DESCRIPTION", "SOURCE"), rows)
    return text + (f"\nwarning: {data['warning']}" if data["warning"] else "")


def cmd_show(args) -> int:
    home = homes.active_home()
    skin = skins.load_skin(args.name, home) if args.name else skins.active_skin(home)[0]
    output.emit(args, skin.to_dict(), _show_text)
    return 0


def _show_text(data: dict[str, Any]) -> str:
    lines = [f"{data['name']}: {data['description']} ({data['source']})"]
    lines += [f"  colors.{k}: {v}" for k, v in data["colors"].items()]
    lines += [f"  spinner.{k}: {' '.join(map(str, v)) if v else '-'}" for k, v in data["spinner"].items()]
    lines += [f"  branding.{k}: {v}" for k, v in data["branding"].items()]
    lines.append(f"  tool_prefix: {data['tool_prefix']}  tool_emojis: {data['tool_emojis'] or '-'}")
    if data["ignored"]:
        lines.append(f"  ignored: {', '.join(data['ignored'])}")
    return "\n".join(lines)


def cmd_set(args) -> int:
    home = homes.active_home()
    skin = skins.load_skin(args.name, home)  # a missing or broken skin is refused before the config changes
    path = config.config_path(homes.ensure_home(home))  # a new user's home does not exist yet
    with files.locked(path):
        doc = config.load_document(home)
        display = doc.data.get("display")
        if not isinstance(display, dict):
            doc.data["display"] = display = {}
        display["skin"] = skin.name
        config.save_document(home, doc)
    data = {"skin": skin.name, "config": str(path), "warning": skin.warning}
    output.emit(args, data, _set_text)
    return 0


def _set_text(data: dict[str, Any]) -> str:
    text = f"skin set to {data['skin']} ({data['config']})"
    return text + (f"\nwarning: {data['warning']}" if data["warning"] else "")
