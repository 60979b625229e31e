"""Where the installer writes a policy: every directory it makes on the way is 0700, whatever
the umask, and so are the integration's own directories when something else made them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hermes_cli.operator import settings
from hermes_cli.operator.target import Target, policy_path
from shared.operator import paths
from shared.operator.policy import Policy


@pytest.fixture
def loose_umask():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def policy() -> Policy:
    return settings.build(
        bounds={}, access_mode="manage", hosts=["local"], confirm_wildcard=False, endpoint="ipc:///x", installed=None
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_fresh_state_gets_only_private_directories(tmp_path, loose_umask):
    state = tmp_path / "fresh" / "pohunek"
    path = policy_path(state, Target("home", None, tmp_path / "home"))
    settings.write(path, policy())
    made = [state, *[p for p in state.rglob("*") if p.is_dir()]]
    assert {str(p.relative_to(tmp_path)): mode(p) for p in made} == {str(p.relative_to(tmp_path)): 0o700 for p in made}
    assert paths.integrations_dir(state) in made and len(made) == 4
    assert mode(path) == 0o600 and settings.read(path) == policy()


def test_the_integrations_own_directories_are_made_private_again(tmp_path, loose_umask):
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    path = policy_path(state, Target("home", None, tmp_path / "home"))
    path.parent.mkdir(parents=True, mode=0o755)
    settings.write(path, policy())
    assert [mode(p) for p in path.parents[:3]] == [0o700, 0o700, 0o700]
    assert mode(state) == 0o755  # the state is not the integration's to change
