"""Where the installer keeps a target's lock and policy: every directory it makes on the way is
0700, whatever the umask, and so are the integration's own directories when something else
made them; the state directory itself is the owner's."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hermes_cli.operator import lifecycle
from hermes_cli.operator.target import Target, policy_path
from runtime_package import paths


@pytest.fixture
def loose_umask():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def opened(state: Path, home: Path) -> Path:
    """The target's transaction held once, its policy directory opened: the policy's path."""
    home.mkdir(mode=0o700, exist_ok=True)
    target = Target("home", None, home)
    with lifecycle.held(lifecycle.Change(target, state, "/bin/false")) as places, places.policy_dir():
        pass
    return policy_path(state, target)


def test_a_fresh_state_gets_only_private_directories(tmp_path, loose_umask):
    state = tmp_path / "fresh" / "pohunek"
    path = opened(state, tmp_path / "home")
    made = [state.parent, state, *[p for p in state.rglob("*") if p.is_dir()]]
    assert {str(p.relative_to(tmp_path)): mode(p) for p in made} == {str(p.relative_to(tmp_path)): 0o700 for p in made}
    assert paths.integrations_dir(state) in made and path.parent in made and len(made) == 5


def test_the_integrations_own_directories_are_made_private_again(tmp_path, loose_umask):
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    path = policy_path(state, Target("home", None, tmp_path / "home"))
    path.parent.mkdir(parents=True, mode=0o755)
    for made in path.parents[:3]:
        made.chmod(0o755)
    opened(state, tmp_path / "home")
    assert [mode(p) for p in path.parents[:3]] == [0o700, 0o700, 0o700]
    assert mode(state) == 0o755  # the state is not the integration's to change
