"""Which root home and profile ``$HERMES_HOME`` names (``shared.home_env``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared import home_env


@pytest.mark.parametrize(
    "value, root, profile",
    [
        (None, "/home/op/.hermes", "default"),
        ("", "/home/op/.hermes", "default"),
        ("/srv/hermes", "/srv/hermes", "default"),
        ("/srv/hermes/profiles/coder", "/srv/hermes", "coder"),
        ("/srv/hermes/profiles/coder/", "/srv/hermes", "coder"),
        ("/srv/hermes/profiles/default", "/srv/hermes/profiles/default", "default"),  # default is the root
        ("/srv/hermes/profiles/Coder", "/srv/hermes/profiles/Coder", "default"),  # not a profile name
        ("~", "/home/op", "default"),
        ("~/h/profiles/w-1", "/home/op/h", "w-1"),
        ("relative/profiles/x", str(Path("relative").absolute()), "x"),
        ("/srv/profiles", "/srv/profiles", "default"),
        ("/srv//hermes/./profiles/coder/", "/srv/hermes", "coder"),  # spelled as pathlib spells it
        ("/srv/x/../hermes", "/srv/x/../hermes", "default"),  # never resolved: a symlinked x counts
        ("//srv/hermes", "//srv/hermes", "default"),
        ("///srv/hermes/profiles/a", "/srv/hermes", "a"),
        ("./here/", str(Path("here").absolute()), "default"),
    ],
)
def test_the_environment_names_a_root_and_a_profile(value, root, profile):
    env = {"HOME": "/home/op"} if value is None else {"HOME": "/home/op", "HERMES_HOME": value}
    assert home_env.resolve(env) == (Path(root), profile)
    assert home_env.root_home(env) == Path(root)
    assert home_env.root_home_path(env) == str(Path(root))
