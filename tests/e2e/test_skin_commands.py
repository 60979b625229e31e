"""``hermes skin`` and skinned output as real commands, through a pipe and on a terminal."""

from __future__ import annotations

import json
import subprocess

from hermes_cli import skin_engine as skins
from shared import config
from tests.support.cli import HERMES, hermes
from tests.support.processes import ROOT, python_env
from tests.support.skins import REAL_SKINS, escape, write_skin


def test_skin_commands_list_show_and_set_and_refuse_a_broken_skin(tmp_path):
    (tmp_path / "config.yaml").write_text("# the operator's notes\nmodel:\n  provider: nous\n")
    write_skin(tmp_path, "broken", "colors:\n  banner_title: red\n")
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


def test_setting_a_skin_visibly_changes_the_gateway_table(tmp_path):
    for name in ("ares", "mono"):
        assert hermes("skin", "set", name, home=tmp_path).returncode == 0
        code, seen = on_a_terminal(tmp_path, "gateway", "list")
        assert code == 0 and "PROFILE" in seen
        assert escape(skins.load_skin(name, tmp_path).colors["banner_title"]) in seen
    assert "\033[" not in on_a_terminal(tmp_path, "gateway", "list", NO_COLOR="1")[1]
    assert "\033[" not in hermes("gateway", "list", home=tmp_path).stdout  # a pipe gets plain text


def test_a_broken_skin_never_breaks_a_command(tmp_path):
    write_skin(tmp_path, "broken", "colors:\n  banner_title: red\n")
    (tmp_path / "config.yaml").write_text("display:\n  skin: broken\n")
    code, seen = on_a_terminal(tmp_path, "gateway", "list")
    assert code == 0 and "PROFILE" in seen
    assert "broken.yaml, key colors.banner_title" in seen and "using the default skin" in seen
    assert escape(skins.load_skin("default", tmp_path).colors["banner_title"]) in seen


def test_a_real_hermes_skin_named_like_a_builtin_is_listed_and_set_with_a_warning_and_worn_quietly(tmp_path):
    path = write_skin(tmp_path, "ares", (REAL_SKINS / "ares.yaml").read_text())
    listed = json.loads(hermes("skin", "list", "--json", home=tmp_path).stdout)
    ares = next(row for row in listed["skins"] if row["name"] == "ares")
    assert [s["name"] for s in listed["skins"]] == ["default", "ares", "mono", "slate"]
    assert (ares["source"], ares["error"]) == (str(path), None) and "banner_logo" in ares["warning"]
    chosen = hermes("skin", "set", "ares", home=tmp_path)
    assert chosen.returncode == 0 and "banner_logo" in chosen.stdout
    code, seen = on_a_terminal(tmp_path, "gateway", "list")
    assert code == 0 and escape("#C7A96B") in seen  # the file's banner_title, not the built-in's
    assert "keys this CLI does not use are ignored" not in seen  # the skin commands said it; others wear it quietly
