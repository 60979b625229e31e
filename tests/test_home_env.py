"""Which root home and profile ``$HERMES_HOME`` names (``shared.home_env``), and that finding
them costs a command's start-up nothing heavy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shared import home_env
from tests.support.processes import ROOT, python_env


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
    ],
)
def test_the_environment_names_a_root_and_a_profile(value, root, profile):
    env = {"HOME": "/home/op"} if value is None else {"HOME": "/home/op", "HERMES_HOME": value}
    assert home_env.resolve(env) == (Path(root), profile)
    assert home_env.root_home(env) == Path(root)


def test_resolving_the_root_imports_nothing_heavy():
    program = (
        "import json, sys; from shared import home_env; home_env.root_home(); "
        "print(json.dumps(sorted(m for m in ('dataclasses', 'hashlib', 'shared.homes') if m in sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, env=python_env(), timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
