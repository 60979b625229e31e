"""Where the Pohunek state lives, and the fault pause points' no-op default."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime_package.paths import integrations_dir, plugins_dir, pohunek_state, trust_anchor_path
from shared.faults import pause_at


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"POHUNEK_STATE_DIR": "/s", "XDG_STATE_HOME": "/x", "HOME": "/h"}, "/s"),
        ({"POHUNEK_STATE_DIR": "", "XDG_STATE_HOME": "/x", "HOME": "/h"}, "/x/pohunek"),
        ({"XDG_STATE_HOME": "relative", "HOME": "/h"}, "/h/.local/state/pohunek"),
        ({"HOME": "/h"}, "/h/.local/state/pohunek"),
    ],
)
def test_state_dir_choice(env, expected):
    assert pohunek_state(env) == Path(expected)


def test_paths_inside_the_state():
    state = Path("/s")
    assert plugins_dir(state) == Path("/s/plugins")
    assert integrations_dir(state) == Path("/s/integrations")
    assert trust_anchor_path(state, {}) == Path("/s/trust/anchor.json")
    assert trust_anchor_path(state, {"POHUNEK_TRUST_ANCHOR": "/t/a.json"}) == Path("/t/a.json")


def test_a_relative_override_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert pohunek_state({"POHUNEK_STATE_DIR": "st"}) == tmp_path / "st"


def test_pause_at_is_a_no_op_for_any_other_step(monkeypatch, capsys):
    monkeypatch.setenv("HERMES_FAULT_PAUSE_AT", "registry:recorded")
    pause_at("registry:staged")
    monkeypatch.delenv("HERMES_FAULT_PAUSE_AT")
    pause_at("registry:recorded")
    assert capsys.readouterr().err == ""
