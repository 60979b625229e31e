"""Skins: the built-ins, user skins and their errors, and the painter."""

from __future__ import annotations

import io
import sys

import pytest

from hermes_cli import skin_engine as skins
from tests.support.skins import REAL_SKINS, escape, write_skin


@pytest.mark.parametrize("name", skins.builtin_names())
def test_every_builtin_skin_is_complete_and_valid(name, tmp_path):
    skin = skins.load_skin(name, tmp_path)
    assert (skin.name, skin.source) == (name, "builtin")
    assert set(skin.colors) == set(skins.COLOR_KEYS) and set(skin.branding) == set(skins.BRANDING_KEYS)
    assert skin.spinner["waiting_faces"] and skin.spinner["thinking_faces"] and skin.tool_prefix


def test_the_builtins_are_the_four_of_the_seed_and_look_different(tmp_path):
    assert skins.builtin_names() == ["default", "ares", "mono", "slate"]
    looks = {tuple(skins.load_skin(n, tmp_path).colors.values()) for n in skins.builtin_names()}
    assert len(looks) == 4
    assert skins.load_skin("ares", tmp_path).spinner["wings"]  # ares has its own wings


def test_a_partial_user_skin_inherits_the_rest_from_default(tmp_path):
    write_skin(tmp_path, "mine", "description: my own\ncolors:\n  banner_title: '#123456'\ntool_emojis:\n  git: '🌿'\n")
    skin = skins.load_skin("mine", tmp_path)
    default = skins.load_skin("default", tmp_path)
    assert (skin.name, skin.description, skin.colors["banner_title"]) == ("mine", "my own", "#123456")
    assert skin.colors["banner_border"] == default.colors["banner_border"]
    assert skin.branding == default.branding and skin.spinner == default.spinner
    assert skin.tool_emoji("git") == "🌿" and skin.tool_emoji("web") == default.tool_emoji("web")
    assert skins.user_names(tmp_path) == ["mine"]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("colors:\n  banner_title: red\n", "colors.banner_title"),
        ("colors:\n  sparkle: '#123456'\n  banner_title: '#12345'\n", "colors.banner_title"),
        ("spinner:\n  waiting_faces: []\n", "spinner.waiting_faces"),
        ("spinner:\n  wings: [['<']]\n", "spinner.wings"),
        ("branding:\n  welcome: 7\n", "branding.welcome"),
        ("branding:\n  goodbye: bye\n  prompt_symbol: ['>']\n", "branding.prompt_symbol"),
        ("colors: null\nbanner_logo: art\n", "colors"),
        ("tool_prefix: 'a very long prefix'\n", "tool_prefix"),
        ("- just\n- a list\n", None),
        ("colors: [unclosed\n", None),
    ],
)
def test_a_malformed_user_skin_names_its_file_and_key(tmp_path, text, key):
    path = write_skin(tmp_path, "broken", text)
    with pytest.raises(skins.SkinError) as info:
        skins.load_skin("broken", tmp_path)
    assert (info.value.path, info.value.key) == (path, key)
    assert str(path) in info.value.message


def test_keys_beyond_the_engines_are_kept_and_named_in_one_warning(tmp_path):
    path = write_skin(
        tmp_path,
        "mine",
        "colours:\n  banner_title: '#123456'\ncolors:\n  ui_ok: green\n  banner_dim: '#010203'\n"
        "branding:\n  goodbye: bye\nbanner_logo: '[bold]ART[/]'\n",
    )
    skin = skins.load_skin("mine", tmp_path)
    assert skin.colors["banner_dim"] == "#010203" and set(skin.colors) == set(skins.COLOR_KEYS)
    assert skin.ignored == {
        "colours": {"banner_title": "#123456"},
        "colors.ui_ok": "green",  # not one of ours: kept as it is, never checked nor drawn
        "branding.goodbye": "bye",
        "banner_logo": "[bold]ART[/]",
    }
    assert skin.warning == (
        f"skin {path}: keys this CLI does not use are ignored: banner_logo, branding.goodbye, colors.ui_ok, colours"
    )
    assert skin.to_dict()["ignored"] == ["banner_logo", "branding.goodbye", "colors.ui_ok", "colours"]
    (tmp_path / "config.yaml").write_text("display:\n  skin: mine\n")
    assert skins.active_skin(tmp_path) == (skin, None)  # used; its warning is the skin commands' to show
    assert skins.load_skin("slate", tmp_path).warning is None


REAL_SKIN_NAMES = sorted(p.stem for p in REAL_SKINS.glob("*.yaml"))


@pytest.mark.parametrize("name", REAL_SKIN_NAMES)
def test_a_skin_the_real_hermes_agent_ships_loads_with_its_extras_ignored(tmp_path, name):
    from ruamel.yaml import YAML

    text = (REAL_SKINS / f"{name}.yaml").read_text()
    real = YAML(typ="safe").load(text)
    write_skin(tmp_path, name, text)
    skin = skins.load_skin(name, tmp_path)
    default = skins.load_skin("default", tmp_path / "elsewhere")
    assert (skin.name, skin.source, skin.description) == (
        name,
        str(tmp_path / "skins" / f"{name}.yaml"),
        real["description"],
    )
    assert skin.colors == {key: real["colors"][key] for key in skins.COLOR_KEYS}
    assert skin.branding == {key: real["branding"][key] for key in skins.BRANDING_KEYS}
    assert skin.spinner == {**default.spinner, **real["spinner"]}  # an empty spinner is the default's
    extras = {f"{section}.{key}" for section in ("colors", "branding") for key in real[section]}
    extras -= {f"colors.{k}" for k in skins.COLOR_KEYS} | {f"branding.{k}" for k in skins.BRANDING_KEYS}
    extras |= set(real) - set(skins.TOP_KEYS)
    assert set(skin.ignored) == extras and "branding.goodbye" in extras
    assert skin.warning.count("\n") == 0 and all(key in skin.warning for key in extras)


def test_a_user_skin_named_like_a_builtin_replaces_it(tmp_path):
    path = write_skin(tmp_path, "ares", (REAL_SKINS / "ares.yaml").read_text())
    ares = skins.load_skin("ares", tmp_path)
    assert ares.source == str(path) and ares.colors["banner_title"] == "#C7A96B"
    assert ares.branding["agent_name"] == "Ares Agent"
    assert skins.load_skin("ares", tmp_path / "elsewhere").source == "builtin"
    assert skins.user_names(tmp_path) == []  # listed once, as the built-in's name
    (tmp_path / "config.yaml").write_text("display:\n  skin: ares\n")
    assert skins.active_skin(tmp_path)[0] == ares


def test_a_broken_user_default_falls_back_to_the_builtin_default(tmp_path):
    write_skin(tmp_path, "default", "colors:\n  banner_title: red\n")
    skin, warning = skins.active_skin(tmp_path)
    assert skin.source == "builtin" and "default.yaml, key colors.banner_title" in warning


def test_the_active_skin_falls_back_to_default_and_says_why(tmp_path):
    assert skins.active_skin(tmp_path) == (skins.load_skin("default", tmp_path), None)
    (tmp_path / "config.yaml").write_text("display:\n  skin: slate\n")
    assert skins.active_skin(tmp_path)[0].name == "slate"
    write_skin(tmp_path, "broken", "colors:\n  banner_title: red\n")
    (tmp_path / "config.yaml").write_text("display:\n  skin: broken\n")
    skin, warning = skins.active_skin(tmp_path)
    assert skin.name == "default" and "broken.yaml" in warning and "colors.banner_title" in warning
    (tmp_path / "config.yaml").write_text("display:\n  skin: nowhere\n")
    assert "no skin named 'nowhere'" in skins.active_skin(tmp_path)[1]


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_painter_uses_the_skins_colors_and_honours_no_color_and_pipes(tmp_path):
    ares = skins.load_skin("ares", tmp_path)
    assert skins.Painter(ares, Tty(), env={}).paint("title", "banner_title") == "\033[38;2;220;20;60mtitle\033[0m"
    assert skins.Painter(ares, Tty(), env={"NO_COLOR": "1"}).paint("title", "banner_title") == "title"
    assert skins.Painter(ares, io.StringIO(), env={}).paint("title", "banner_title") == "title"


@pytest.fixture
def wearing(tmp_path, monkeypatch):
    """Make ``name`` this home's skin, for surfaces rendered in this process."""
    from hermes_cli import output

    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    monkeypatch.delenv("NO_COLOR", raising=False)

    def wear(name):
        (tmp_path / "config.yaml").write_text(f"display:\n  skin: {name}\n")
        monkeypatch.setattr(output, "_painters", {})
        return skins.load_skin(name, tmp_path)

    return wear


@pytest.mark.parametrize("name", skins.builtin_names())
def test_every_builtin_skin_renders_every_surface(wearing, name, monkeypatch):
    from argparse import Namespace

    from hermes_cli import output
    from hermes_cli.commands.mesh import StartProgress
    from hermes_cli.commands.update import _Progress

    skin = wearing(name)
    screen = Tty()
    progress = _Progress(Namespace(json=False), stream=screen)
    progress.event({"seq": 0, "stage": "apply", "status": "start"})
    progress.event({"seq": 1, "stage": "apply", "status": "done", "detail": {"via": "git"}})
    shown = screen.getvalue()
    assert escape(skin.colors["banner_accent"]) + "apply" in shown
    assert skin.spinner["thinking_faces"][0] in shown  # the running stage wears the skin's face
    assert escape(skin.colors["banner_title"]) + "✓" in shown

    starting = Tty()
    StartProgress(starting)({"coder": "STARTING"}, 0.0)
    assert skin.spinner["waiting_faces"][0] in starting.getvalue()
    assert escape(skin.colors["banner_accent"]) + "coder" in starting.getvalue()

    monkeypatch.setattr(sys, "stdout", Tty())
    assert output.table(("PROFILE", "STATE"), [("coder", "running")]).startswith(escape(skin.colors["banner_title"]))
