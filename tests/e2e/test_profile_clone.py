"""``hermes profile create NAME --clone-from SOURCE``, run as a real process: the new profile
starts with the source's config.yaml, .env, SOUL.md, skills and memories, and with nothing of
its life; a link planted in the source is never followed; a refused clone leaves nothing."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from hermes_cli.profile_clone import CLONED
from tests.support.cli import hermes, hermes_json

SECRET = "sk-clone-test-0123456789abcdef"


def seed(home: Path) -> None:
    """A lived-in profile home: what a clone takes, and what it must leave."""
    (home / "config.yaml").write_text("model: claude\ndisplay:\n  skin: ares\n")
    (home / ".env").write_text(f"OPENROUTER_API_KEY={SECRET}\n")
    os.chmod(home / ".env", 0o644)  # loose in the source: 0600 in the clone all the same
    (home / "SOUL.md").write_text("I am the source.\n")
    (home / "skills" / "deploy" / "scripts").mkdir(parents=True)
    (home / "skills" / "deploy" / "SKILL.md").write_text("---\nname: deploy\n---\n")
    script = home / "skills" / "deploy" / "scripts" / "run.sh"
    script.write_text("#!/bin/sh\n")
    os.chmod(script, 0o755)
    (home / "memories").mkdir()
    (home / "memories" / "MEMORY.md").write_text("remember\n")
    (home / "memories" / "USER.md").write_text("the owner\n")
    # Its life, which no clone takes.
    (home / "memories" / "scratch.md").write_text("not a memory a clone takes\n")
    (home / "chat_sessions").mkdir()
    (home / "chat_sessions" / "20261201_185301_ab12cd.json").write_text("{}")
    (home / "gateway_state.json").write_text('{"gateway_state": "running"}')
    (home / "gateway_starts.json").write_text("[]")
    (home / "auth.json").write_text("{}")
    (home / "state.db").write_bytes(b"SQLite format 3\x00")
    (home / "run").mkdir(mode=0o700, exist_ok=True)
    (home / "run" / "gateway.lock").write_text("1")
    (home / "logs").mkdir(exist_ok=True)
    (home / "logs" / "gateway.log").write_text("log\n")


def files_under(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("source", ["default", "work"])
def test_a_clone_has_the_sources_settings_and_identity_and_nothing_of_its_life(root, source):
    source_home = root if source == "default" else root / "profiles" / source
    if source != "default":
        assert hermes("profile", "create", source, home=root).returncode == 0
    seed(source_home)

    code, created = hermes_json("profile", "create", "coder", "--clone-from", source, home=root)
    assert code == 0, created
    home = root / "profiles" / "coder"
    assert created["cloned_from"] == {"name": source, "copied": list(CLONED), "skipped": []}
    assert files_under(home) == {
        name: content
        for name, content in files_under(source_home).items()
        if name in CLONED or name.startswith("skills/")
    }
    assert not (home / "chat_sessions").exists() and not (home / "memories" / "scratch.md").exists()
    assert sorted(os.listdir(home / "run")) == [] and sorted(os.listdir(home / "logs")) == []
    assert stat.S_IMODE((home / ".env").stat().st_mode) == 0o600
    assert stat.S_IMODE((home / "skills/deploy/scripts/run.sh").stat().st_mode) == 0o700  # still executable
    assert "coder" in [p["name"] for p in hermes_json("profile", "list", home=root)[1]["profiles"]]


def test_a_clone_never_prints_what_it_copied(root):
    seed(root)
    text = hermes("profile", "create", "coder", "--clone-from", "default", home=root)
    assert text.returncode == 0, text.stderr
    as_json = hermes("profile", "create", "coder2", "--clone-from", "default", "--json", home=root)
    for done in (text, as_json):
        assert SECRET not in done.stdout + done.stderr
    assert "cloned from default" in text.stdout


def test_a_link_planted_in_the_source_is_skipped_never_followed(root, short_dir):
    outside = short_dir / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "secret.txt").write_text("outside the source\n")
    (outside / "dir" / "SKILL.md").write_text("outside the source\n")
    (root / "config.yaml").symlink_to(outside / "secret.txt")
    (root / "skills" / "own").mkdir(parents=True)
    (root / "skills" / "own" / "SKILL.md").write_text("mine\n")
    (root / "skills" / "own" / "link.md").symlink_to(outside / "secret.txt")
    (root / "skills" / "borrowed").symlink_to(outside / "dir")
    (root / "memories").symlink_to(outside / "dir")  # a directory on the way to MEMORY.md
    os.mkfifo(root / "SOUL.md")  # not a plain file: skipped, and no read hangs on it

    code, created = hermes_json("profile", "create", "coder", "--clone-from", "default", home=root)
    assert code == 0, created
    assert created["cloned_from"]["copied"] == ["skills"]
    assert sorted(created["cloned_from"]["skipped"]) == sorted(
        ["config.yaml", "SOUL.md", "skills/borrowed", "skills/own/link.md", "memories"]
    )
    home = root / "profiles" / "coder"
    assert files_under(home) == {"skills/own/SKILL.md": b"mine\n"}
    assert not any(p.is_symlink() for p in home.rglob("*"))


def test_an_unknown_or_invalid_source_is_refused_naming_the_field_and_nothing_is_made(root):
    for source, code in (("nope", "profile_not_found"), ("No/pe", "invalid_profile_name")):
        status, refused = hermes_json("profile", "create", "coder", "--clone-from", source, home=root)
        assert status == 2 and refused["error"]["code"] == code, refused
        assert refused["error"]["detail"] == {"field": "--clone-from", "name": source}
        text = hermes("profile", "create", "coder", "--clone-from", source, home=root)
        assert text.returncode == 2 and len(text.stderr.splitlines()) == 1 and "--clone-from" in text.stderr
    assert not (root / "profiles").exists() or os.listdir(root / "profiles") == []


def test_an_existing_target_is_refused_naming_the_field_and_left_as_it_was(root):
    seed(root)
    assert hermes("profile", "create", "coder", home=root).returncode == 0
    home = root / "profiles" / "coder"
    (home / "config.yaml").write_text("model: mine\n")
    before = files_under(home)
    status, refused = hermes_json("profile", "create", "coder", "--clone-from", "default", home=root)
    assert status == 2 and refused["error"]["code"] == "profile_exists", refused
    assert refused["error"]["detail"] == {"field": "profile_name", "name": "coder"}
    assert files_under(home) == before
    assert sorted(os.listdir(root / "profiles")) == ["coder"]  # no half-made clone beside it


def test_the_old_spellings_still_create(root):
    assert hermes("profile", "create", "coder", "--json", home=root).returncode == 0
    done = hermes("-p", "coder", "profile", "create", "other", home=root)
    assert done.returncode == 0, done.stderr
    shown = json.loads(hermes("profile", "show", "other", "-p", "coder", "--json", home=root).stdout)
    assert shown["name"] == "other"
