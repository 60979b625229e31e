"""The real Hermes Agent's skins, as it ships and reads them, in this CLI's skin engine."""

from __future__ import annotations

import subprocess

from hermes_cli import skin_engine as skins
from tests.support.real_hermes import isolated_env
from tests.support.skins import real_builtins_as_files, write_skin


def test_every_builtin_skin_of_the_real_hermes_agent_loads_here(real_hermes_agent, tmp_path):
    files = real_builtins_as_files(real_hermes_agent)
    assert len(files) >= 9 and {"default", "ares", "mono", "slate"} <= set(files)
    refused = {}
    for name, text in files.items():
        path = write_skin(tmp_path, name, text)
        try:
            skin = skins.load_skin(name, tmp_path)
        except skins.HermesError as exc:
            refused[name] = exc.message
            continue
        if skin.source != str(path):
            refused[name] = f"{skin.source} answered instead of the file"
        elif skin.warning is None or "branding.goodbye" not in skin.warning:
            refused[name] = f"its extra keys were not named: {skin.warning}"
    assert refused == {}, f"{len(refused)} of {len(files)} refused"


# Run by the real interpreter in a home holding a user skin named like a built-in.
REAL_LOADS = """
from hermes_cli.skin_engine import load_skin
skin = load_skin("ares")
print(skin.description)
print(skin.colors["banner_title"])
"""


def test_the_real_hermes_agent_and_this_cli_both_prefer_the_users_file(real_hermes_agent, tmp_path):
    hermes_home = tmp_path / ".hermes"
    hermes_home.mkdir()
    write_skin(hermes_home, "ares", "name: ares\ndescription: my own ares\ncolors:\n  banner_title: '#123456'\n")
    done = subprocess.run(
        [str(real_hermes_agent.python), "-I", "-c", REAL_LOADS],
        env=isolated_env(tmp_path, hermes_home),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    ours = skins.load_skin("ares", hermes_home)
    assert done.stdout.split("\n")[:2] == [ours.description, ours.colors["banner_title"]] == ["my own ares", "#123456"]
