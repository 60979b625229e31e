"""The profile an activity runs for: bound per task, read only from the scope, failing closed."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.gateway import dotenv, profile_scope
from services.gateway.profile_scope import Unscoped
from shared.config import ConfigError


def _home(tmp_path: Path, name: str, *, config: str = "", env: str | None = None) -> Path:
    home = tmp_path / name
    home.mkdir()
    if config:
        (home / "config.yaml").write_text(config)
    if env is not None:
        (home / ".env").write_text(env)
    return home


def test_a_scope_holds_its_home_config_and_secrets(tmp_path):
    home = _home(tmp_path, "coder", config="model: m1\n", env="OPENROUTER_API_KEY=sk-coder\n")
    scope = profile_scope.load("coder", home)
    assert (scope.profile, scope.home, scope.config["model"]) == ("coder", home, "m1")
    assert scope.secret("OPENROUTER_API_KEY") == "sk-coder"
    assert scope.secret("MISSING") is None
    assert "sk-coder" not in repr(scope)


def test_a_fingerprint_tells_values_apart_without_showing_them(tmp_path):
    one = profile_scope.load("a", _home(tmp_path, "a", env="K=value-one\n"))
    two = profile_scope.load("b", _home(tmp_path, "b", env="K=value-two\n"))
    same = profile_scope.load("c", _home(tmp_path, "c", env="K=value-one\n"))
    assert one.fingerprint("K") == same.fingerprint("K") != two.fingerprint("K")
    assert str(one.fingerprint("K")).startswith("sha256:") and "value" not in str(one.fingerprint("K"))
    assert one.fingerprint("NONE") is None


def test_only_a_scope_given_the_launch_environment_falls_back_to_it(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENROUTER_API_KEY", "from-the-process-environment")
    launch_env = {"OPENROUTER_API_KEY": "launch", "OTHER": "launch-other"}
    launch = profile_scope.load("default", _home(tmp_path, "d", env="OTHER=own\n"), launch_env=launch_env)
    served = profile_scope.load("coder", _home(tmp_path, "c"))
    assert launch.secret("OPENROUTER_API_KEY") == "launch"
    assert launch.secret("OTHER") == "own"  # the home's file wins over the environment
    # A miss in a profile that is not the launch profile is a miss: os.environ is never read.
    assert served.secret("OPENROUTER_API_KEY") is None


def test_unreadable_files_raise_typed_errors(tmp_path):
    with pytest.raises(ConfigError):
        profile_scope.load("a", _home(tmp_path, "a", config="model: [unclosed\n"))
    with pytest.raises(dotenv.DotenvInvalid):
        profile_scope.load("b", _home(tmp_path, "b", env="not a line\n"))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / ".env").write_bytes(b"K=\xff\n")
    with pytest.raises(dotenv.DotenvInvalid, match="not UTF-8"):
        profile_scope.load("c", tmp_path / "c")


def test_nothing_is_read_outside_a_bound_activity(tmp_path):
    scope = profile_scope.load("a", _home(tmp_path, "a"))
    with pytest.raises(Unscoped):
        profile_scope.current()
    with profile_scope.bound(scope):
        assert profile_scope.current() is scope
    with pytest.raises(Unscoped):
        profile_scope.current()
