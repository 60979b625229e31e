"""Skins: the built-ins, user skins over ``default``, the error paths, and the commands."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from hermes_cli import skin_engine as skins
from shared import config
from tests.support.cli import HERMES, hermes
from tests.support.processes import ROOT, python_env


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


def write(home, name, text):
    (home / "skins").mkdir(exist_ok=True)
    path = home / "skins" / f"{name}.yaml"
    path.write_text(text)
    return path


def test_a_partial_user_skin_inherits_the_rest_from_default(tmp_path):
    write(tmp_path, "mine", "description: my own\ncolors:\n  banner_title: '#123456'\ntool_emojis:\n  git: '🌿'\n")
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
        ("colours:\n  banner_title: '#123456'\n", "colours"),
        ("colors:\n  sparkle: '#123456'\n", "colors.sparkle"),
        ("spinner:\n  waiting_faces: []\n", "spinner.waiting_faces"),
        ("spinner:\n  wings: [['<']]\n", "spinner.wings"),
        ("branding:\n  welcome: 7\n", "branding.welcome"),
        ("tool_prefix: 'a very long prefix'\n", "tool_prefix"),
        ("- just\n- a list\n", None),
        ("colors: [unclosed\n", None),
    ],
)
def test_a_malformed_user_skin_names_its_file_and_key(tmp_path, text, key):
    path = write(tmp_path, "broken", text)
    with pytest.raises(skins.SkinError) as info:
        skins.load_skin("broken", tmp_path)
    assert (info.value.path, info.value.key) == (path, key)
    assert str(path) in info.value.message


def test_the_active_skin_falls_back_to_default_and_says_why(tmp_path):
    assert skins.active_skin(tmp_path) == (skins.load_skin("default", tmp_path), None)
    (tmp_path / "config.yaml").write_text("display:\n  skin: slate\n")
    assert skins.active_skin(tmp_path)[0].name == "slate"
    write(tmp_path, "broken", "colors:\n  banner_title: red\n")
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


def test_skin_commands_list_show_and_set_and_refuse_a_broken_skin(tmp_path):
    (tmp_path / "config.yaml").write_text("# the operator's notes\nmodel:\n  provider: nous\n")
    write(tmp_path, "broken", "colors:\n  banner_title: red\n")
    listed = json.loads(hermes("skin", "list", "--json", home=tmp_path).stdout)
    assert [s["name"] for s in listed["skins"]] == ["default", "ares", "mono", "slate", "broken"]
    assert listed["active"] == "default" and "colors.banner_title" in listed["skins"][-1]["error"]
    assert hermes("skin", "set", "ares", home=tmp_path).returncode == 0
    assert config.load_config(tmp_path)["display"] == {"skin": "ares"}
    assert "# the operator's notes" in (tmp_path / "config.yaml").read_text()
    assert json.loads(hermes("skin", "show", "--json", home=tmp_path).stdout)["name"] == "ares"
    refused = hermes("skin", "set", "broken", home=tmp_path)
    assert refused.returncode == 2 and "broken.yaml, key colors.banner_title" in refused.stderr
    assert config.load_config(tmp_path)["display"] == {"skin": "ares"}  # unchanged


def on_a_terminal(home, *args, **env):
    """``hermes args`` with its stdout and stderr on a pseudo-terminal: what an operator sees."""
    import os
    import pty

    master, slave = pty.openpty()
    try:
        done = subprocess.run(
            [*HERMES, *args],
            cwd=ROOT,
            stdout=slave,
            stderr=slave,
            env=python_env(HERMES_HOME=str(home), **env),
            timeout=60,
        )
        os.close(slave)
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(master)
    return done.returncode, b"".join(chunks).decode(errors="replace")


def escape(color: str) -> str:
    red, green, blue = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"\033[38;2;{red};{green};{blue}m"


def test_setting_a_skin_visibly_changes_the_gateway_table(tmp_path):
    for name in ("ares", "mono"):
        assert hermes("skin", "set", name, home=tmp_path).returncode == 0
        code, seen = on_a_terminal(tmp_path, "gateway", "list")
        assert code == 0 and "PROFILE" in seen
        assert escape(skins.load_skin(name, tmp_path).colors["banner_title"]) in seen
    assert "\033[" not in on_a_terminal(tmp_path, "gateway", "list", NO_COLOR="1")[1]
    assert "\033[" not in hermes("gateway", "list", home=tmp_path).stdout  # a pipe gets plain text


def test_a_broken_skin_never_breaks_a_command(tmp_path):
    write(tmp_path, "broken", "colors:\n  banner_title: red\n")
    (tmp_path / "config.yaml").write_text("display:\n  skin: broken\n")
    code, seen = on_a_terminal(tmp_path, "gateway", "list")
    assert code == 0 and "PROFILE" in seen
    assert "broken.yaml, key colors.banner_title" in seen and "using the default skin" in seen
    assert escape(skins.load_skin("default", tmp_path).colors["banner_title"]) in seen


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
