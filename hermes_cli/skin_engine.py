"""Skins: the CLI's colors, glyphs and words, built in or user-defined.

A skin is one dict with ``name``, ``description``, ``colors``, ``spinner``, ``branding``,
``tool_prefix`` and ``tool_emojis``. User skins live in ``<home>/skins/<name>.yaml`` with the
same keys; what a user skin leaves out comes from the built-in ``default``, and a user skin
named like a built-in replaces it, as in the Hermes Agent. ``display.skin`` in the profile's
config picks the active one. Keys this engine does not use (the Hermes Agent's skins carry
more colors, branding texts and banner art) are kept and ignored, named in one warning; the
keys it uses are checked. A skin that cannot be read never fails a command: ``active_skin``
falls back to ``default`` and says which file and key were wrong.
"""

from __future__ import annotations

import copy
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from hermes_cli.errors import CliError
from shared import config_text
from shared.errors import HermesError
from shared.layout import SKINS_DIR

DEFAULT = "default"
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
COLOR_RE = re.compile(r"#[0-9a-fA-F]{6}")
MAX_SKIN_BYTES = 64 * 1024
COLOR_KEYS = ("banner_border", "banner_title", "banner_accent", "banner_dim", "banner_text", "response_border")
SPINNER_KEYS = ("waiting_faces", "thinking_faces", "thinking_verbs", "wings")
BRANDING_KEYS = ("agent_name", "welcome", "response_label", "prompt_symbol")
TOP_KEYS = ("name", "description", "colors", "spinner", "branding", "tool_prefix", "tool_emojis")

_BUILTIN_SKINS: dict[str, dict[str, Any]] = {
    "default": {
        "name": "default",
        "description": "classic gold",
        "colors": {
            "banner_border": "#CD7F32",
            "banner_title": "#FFD700",
            "banner_accent": "#FFBF00",
            "banner_dim": "#B8860B",
            "banner_text": "#FFF8DC",
            "response_border": "#FFD700",
        },
        "spinner": {
            "waiting_faces": ["(｡◕‿◕｡)", "(◕‿◕✿)", "٩(◕‿◕｡)۶"],
            "thinking_faces": ["(◔_◔)", "(¬‿¬)", "(•̀ᴗ•́)و"],
            "thinking_verbs": ["pondering", "weaving", "musing"],
            "wings": [],
        },
        "branding": {
            "agent_name": "Hermes",
            "welcome": "Welcome to Hermes.",
            "response_label": "Hermes",
            "prompt_symbol": "❯",
        },
        "tool_prefix": "┊",
        "tool_emojis": {"terminal": "💻", "web": "🌐", "file": "📄", "update": "⬆"},
    },
    "ares": {
        "name": "ares",
        "description": "crimson and bronze, with its own wings",
        "colors": {
            "banner_border": "#8B0000",
            "banner_title": "#DC143C",
            "banner_accent": "#CD7F32",
            "banner_dim": "#6B2C1A",
            "banner_text": "#F5DEB3",
            "response_border": "#B22222",
        },
        "spinner": {
            "waiting_faces": ["⚔", "🛡"],
            "thinking_faces": ["(ง'̀-'́)ง", "ᕦ(ò_óˇ)ᕤ"],
            "thinking_verbs": ["forging", "marching", "striking"],
            "wings": [["⟪", "⟫"], ["⟨⚔", "⚔⟩"]],
        },
        "branding": {
            "agent_name": "Ares",
            "welcome": "Ares stands ready.",
            "response_label": "Ares",
            "prompt_symbol": "⚔",
        },
        "tool_prefix": "╎",
        "tool_emojis": {"terminal": "🗡", "web": "🏹", "file": "📜", "update": "🔥"},
    },
    "mono": {
        "name": "mono",
        "description": "grayscale",
        "colors": {
            "banner_border": "#808080",
            "banner_title": "#FFFFFF",
            "banner_accent": "#C0C0C0",
            "banner_dim": "#696969",
            "banner_text": "#DCDCDC",
            "response_border": "#A9A9A9",
        },
        "spinner": {
            "waiting_faces": ["·", "•", "●"],
            "thinking_faces": ["◐", "◓", "◑", "◒"],
            "thinking_verbs": ["thinking"],
            "wings": [],
        },
        "branding": {"agent_name": "Hermes", "welcome": "Hermes.", "response_label": "Hermes", "prompt_symbol": ">"},
        "tool_prefix": "|",
        "tool_emojis": {},
    },
    "slate": {
        "name": "slate",
        "description": "cool blue",
        "colors": {
            "banner_border": "#4682B4",
            "banner_title": "#87CEEB",
            "banner_accent": "#5F9EA0",
            "banner_dim": "#2F4F4F",
            "banner_text": "#E0FFFF",
            "response_border": "#6495ED",
        },
        "spinner": {
            "waiting_faces": ["◌", "○", "◎"],
            "thinking_faces": ["≋", "∿", "≈"],
            "thinking_verbs": ["charting", "sounding", "drifting"],
            "wings": [],
        },
        "branding": {
            "agent_name": "Hermes",
            "welcome": "Hermes, at your service.",
            "response_label": "Hermes",
            "prompt_symbol": "›",
        },
        "tool_prefix": "│",
        "tool_emojis": {"terminal": "🖥", "web": "🌊", "file": "🗂", "update": "⇡"},
    },
}


class SkinError(CliError):
    code = "skin_invalid"

    def __init__(self, path: Path | None, key: str | None, reason: str):
        where = f"{path or 'skin'}" + (f", key {key}" if key else "")
        super().__init__(f"skin {where} is invalid: {reason}", detail={"path": str(path) if path else None, "key": key})
        self.path, self.key, self.reason = path, key, reason


class SkinNotFound(CliError):
    code = "skin_not_found"


class Skin(NamedTuple):
    name: str
    description: str
    colors: dict[str, str]
    spinner: dict[str, list]
    branding: dict[str, str]
    tool_prefix: str
    tool_emojis: dict[str, str]
    source: str  # "builtin" or the user file's path
    # The keys this engine does not use, by dotted name, with their values: kept, never drawn.
    ignored: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            **{key: copy.deepcopy(getattr(self, key)) for key in (*TOP_KEYS, "source")},
            "ignored": sorted(self.ignored),
        }

    @property
    def warning(self) -> str | None:
        """The one line that names the keys this engine ignores, or None."""
        if not self.ignored:
            return None
        return f"skin {self.source}: keys this CLI does not use are ignored: {', '.join(sorted(self.ignored))}"

    def tool_emoji(self, tool: str) -> str:
        return self.tool_emojis.get(tool, "")


def builtin_names() -> list[str]:
    return list(_BUILTIN_SKINS)


def skins_dir(home: Path) -> Path:
    return Path(home) / SKINS_DIR


def user_names(home: Path) -> list[str]:
    """The user skins that are not built in (a user file named like a built-in replaces it)."""
    try:
        return sorted(
            p.stem for p in skins_dir(home).glob("*.yaml") if NAME_RE.fullmatch(p.stem) and p.stem not in _BUILTIN_SKINS
        )
    except OSError:
        return []


def load_skin(name: str, home: Path) -> Skin:
    """The skin ``name``: ``<home>/skins/<name>.yaml`` over the built-in ``default``, else the
    built-in of that name."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise SkinNotFound(f"{name!r} is not a skin name")
    path = skins_dir(home) / f"{name}.yaml"
    try:
        raw = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # no skins directory on the way: no user skin
        if name in _BUILTIN_SKINS:
            return _builtin(name)
        known = ", ".join([*_BUILTIN_SKINS, *user_names(home)])
        raise SkinNotFound(f"no skin named {name!r} (known: {known})", detail={"known": known}) from None
    except OSError as exc:
        raise SkinError(path, None, f"it cannot be read ({exc.strerror})") from None
    if len(raw) > MAX_SKIN_BYTES:
        raise SkinError(path, None, f"it is larger than {MAX_SKIN_BYTES} bytes")
    data = _parse(path, raw)
    return _checked(_merge(copy.deepcopy(_BUILTIN_SKINS[DEFAULT]), {**data, "name": name}), path, str(path))


def _builtin(name: str) -> Skin:
    return _checked(copy.deepcopy(_BUILTIN_SKINS[name]), None, "builtin")


def active_skin(home: Path) -> tuple[Skin, str | None]:
    """The skin ``display.skin`` names in ``home``'s config, and why it could not be used (then
    the skin is the built-in ``default``), or None. A bad skin never fails a command. The keys a
    usable skin carries beyond this engine's are its own ``warning``, for the ``skin`` commands
    to show: every other command wears it quietly."""
    try:
        named = config_text.mentions(home, b"skin")
    except OSError:
        named = True  # unreadable: the parser below says why, as a warning
    try:
        if not named:
            skin = load_skin(DEFAULT, home)
        else:
            from shared import config  # parsing costs a ruamel import: only for a config that names a skin

            name = config.get(config.load_config(home), "display.skin", DEFAULT) or DEFAULT
            skin = load_skin(str(name), home)
        return skin, None
    except HermesError as exc:
        return _builtin(DEFAULT), f"{exc.message}; using the default skin"


def _parse(path: Path, raw: bytes) -> dict[str, Any]:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        data = YAML(typ="safe").load(raw.decode("utf-8"))
    except (YAMLError, UnicodeDecodeError) as exc:
        raise SkinError(path, None, f"it is not valid YAML ({str(exc).splitlines()[0]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SkinError(path, None, "it must be a mapping of skin keys")
    return data


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict) and key != "tool_emojis":
            base[key] = _merge(base[key], value)
        elif key == "tool_emojis" and isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return base


def _checked(data: dict[str, Any], path: Path | None, source: str) -> Skin:
    ignored = {str(key): value for key, value in data.items() if key not in TOP_KEYS}
    _text(path, "description", data.get("description"), 200)
    colors = _section(path, "colors", data.get("colors"), COLOR_KEYS, ignored)
    for key, value in colors.items():
        if not isinstance(value, str) or not COLOR_RE.fullmatch(value):
            raise SkinError(path, f"colors.{key}", f"must be a #RRGGBB color, got {value!r}")
    spinner = _section(path, "spinner", data.get("spinner"), SPINNER_KEYS, ignored)
    for key in ("waiting_faces", "thinking_faces", "thinking_verbs"):
        value = spinner[key]
        if (
            not isinstance(value, list)
            or len(value) > 64
            or not all(isinstance(v, str) and 0 < len(v) <= 40 for v in value)
        ):
            raise SkinError(path, f"spinner.{key}", "must be a list of short strings")
    for key in ("waiting_faces", "thinking_faces"):
        if not spinner[key]:
            raise SkinError(path, f"spinner.{key}", "needs at least one face")
    wings = spinner["wings"]
    if not isinstance(wings, list) or not all(
        isinstance(w, list) and len(w) == 2 and all(isinstance(x, str) and len(x) <= 12 for x in w) for w in wings
    ):
        raise SkinError(path, "spinner.wings", "must be a list of [left, right] pairs")
    branding = _section(path, "branding", data.get("branding"), BRANDING_KEYS, ignored)
    for key, value in branding.items():
        _text(path, f"branding.{key}", value, 200)
    _text(path, "tool_prefix", data.get("tool_prefix"), 8)
    emojis = data.get("tool_emojis")
    if not isinstance(emojis, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and len(v) <= 8 for k, v in emojis.items()
    ):
        raise SkinError(path, "tool_emojis", "must map tool names to short glyphs")
    return Skin(
        data["name"], data["description"], colors, spinner, branding, data["tool_prefix"], emojis, source, ignored
    )


def _section(
    path: Path | None, name: str, value: Any, keys: tuple[str, ...], ignored: dict[str, Any]
) -> dict[str, Any]:
    """The section's keys this engine uses, all of them there; the others go to ``ignored``."""
    if not isinstance(value, dict):
        raise SkinError(path, name, "must be a mapping")
    ignored.update({f"{name}.{key}": extra for key, extra in value.items() if key not in keys})
    missing = [k for k in keys if k not in value]
    if missing:
        raise SkinError(path, f"{name}.{missing[0]}", "is missing")
    return {key: value[key] for key in keys}


def _text(path: Path | None, key: str, value: Any, limit: int) -> None:
    if not isinstance(value, str) or len(value) > limit or any(ord(c) < 32 for c in value):
        raise SkinError(path, key, f"must be text of at most {limit} characters on one line")


class Painter:
    """Colors text with a skin's colors, or not at all: ``NO_COLOR`` set, or not a terminal."""

    def __init__(self, skin: Skin, stream: TextIO | None = None, *, env: Mapping[str, str] | None = None):
        environ = os.environ if env is None else env
        stream = sys.stdout if stream is None else stream
        self.skin = skin
        self.enabled = not environ.get("NO_COLOR") and hasattr(stream, "isatty") and stream.isatty()

    def paint(self, text: str, color_key: str) -> str:
        if not self.enabled or not text:
            return text
        red, green, blue = (int(self.skin.colors[color_key][i : i + 2], 16) for i in (1, 3, 5))
        return f"\033[38;2;{red};{green};{blue}m{text}\033[0m"
