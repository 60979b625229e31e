"""``hermes plugins install|update|remove``: plugins from a git repository (a local origin, no
network), staged and swapped in whole, removed without following a link."""

from __future__ import annotations

import json
import os

import pytest

from hermes_cli import plugin_host
from tests.support.cli import hermes
from tests.support.git_repos import commit, git

MANIFEST = "name: {name}\nversion: {version}\ndescription: a plugin from git\n"
ENTRY = "def register(ctx):\n    ctx.register_hook('pre_llm_call', lambda **kw: None)\n"


def origin(tmp_path, name="gitty", version="1.0"):
    repo = tmp_path / f"{name}-origin"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "__init__.py", ENTRY, "entry")
    commit(repo, "plugin.yaml", MANIFEST.format(name=name, version=version), "manifest")
    return repo


def listed(home):
    return {r["key"]: r for r in json.loads(hermes("plugins", "list", "--json", home=home).stdout)}


def test_install_update_and_remove_a_plugin_from_a_git_repository(tmp_path):
    home, repo = tmp_path / "home", origin(tmp_path)
    done = hermes("plugins", "install", str(repo), "--enable", home=home)
    assert done.returncode == 0, done.stderr
    assert "Plugin gitty installed." in done.stdout and "Plugin gitty enabled." in done.stdout
    record = listed(home)["gitty"]
    assert (record["status"], record["source"], record["version"]) == ("enabled", "git", "1.0")
    assert [p.name for p in plugin_host.PluginHost.load(home).plugins if p.loaded] == ["gitty"]

    commit(repo, "plugin.yaml", MANIFEST.format(name="gitty", version="1.1"), "a new version")
    updated = hermes("plugins", "update", "gitty", "--json", home=home)
    assert updated.returncode == 0, updated.stderr
    assert json.loads(updated.stdout)["commit"] == git(repo, "rev-parse", "HEAD")
    assert listed(home)["gitty"]["version"] == "1.1"

    again = hermes("plugins", "install", str(repo), "--json", home=home)
    assert again.returncode == 2 and json.loads(again.stdout)["error"]["code"] == "plugin_exists"
    assert hermes("plugins", "rm", "gitty", home=home).returncode == 0
    assert listed(home) == {}
    assert sorted(os.listdir(home / "plugins")) == [".install-journal.json.lock"]


def test_a_forced_install_swaps_the_plugin_whole(tmp_path):
    home, repo = tmp_path / "home", origin(tmp_path)
    assert hermes("plugins", "install", str(repo), home=home).returncode == 0
    commit(repo, "plugin.yaml", MANIFEST.format(name="gitty", version="2.0"), "two")
    assert hermes("plugins", "install", str(repo), "--force", home=home).returncode == 0
    assert listed(home)["gitty"]["version"] == "2.0"


@pytest.mark.parametrize("step", [1, 2, 3])
def test_a_forced_install_killed_midway_leaves_one_whole_plugin(tmp_path, step):
    home, repo = tmp_path / "home", origin(tmp_path)
    assert hermes("plugins", "install", str(repo), home=home).returncode == 0
    commit(repo, "plugin.yaml", MANIFEST.format(name="gitty", version="2.0"), "two")
    killed = hermes(
        "plugins", "install", str(repo), "--force", home=home, env_extra={"HERMES_FAULT_KILL_AT_STEP": str(step)}
    )
    assert killed.returncode == -9
    # The next change finishes or undoes it: the old plugin back, or the new one in place.
    assert hermes("plugins", "list", home=home).returncode == 0
    hermes("plugins", "update", "nothing-here", home=home)
    assert listed(home)["gitty"]["version"] == ("1.0" if step < 3 else "2.0")
    assert sorted(os.listdir(home / "plugins")) == [".install-journal.json.lock", "gitty"]


def test_a_source_that_holds_no_plugin_is_refused_and_nothing_stays(tmp_path):
    home, repo = tmp_path / "home", tmp_path / "empty"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "readme.txt", "no manifest\n", "first")
    refused = hermes("plugins", "install", str(repo), "--json", home=home)
    assert refused.returncode == 2 and json.loads(refused.stdout)["error"]["code"] == "plugin_source_invalid"
    unreachable = hermes("plugins", "install", "file:///nowhere/at/all", "--json", home=home)
    assert unreachable.returncode == 1 and json.loads(unreachable.stdout)["error"]["code"] == "plugin_fetch_failed"
    dashed = hermes("plugins", "install", "--", "--upload-pack=touch /tmp/x", "--json", home=home)
    assert dashed.returncode == 2 and "Traceback" not in dashed.stdout + dashed.stderr
    assert sorted(os.listdir(home / "plugins")) == [".install-journal.json.lock"]


def test_credentials_in_a_url_are_never_shown(tmp_path):
    done = hermes("plugins", "install", "https://user:s3cret-token@127.0.0.1:9/x.git", "--json", home=tmp_path)
    assert done.returncode == 1 and "s3cret-token" not in done.stdout + done.stderr


def test_remove_and_update_never_follow_a_link(tmp_path):
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    plugin = elsewhere / "linked"
    plugin.mkdir(parents=True)
    (plugin / "plugin.yaml").write_text("name: linked\n")
    (home / "plugins").mkdir(parents=True)
    (home / "plugins" / "linked").symlink_to(plugin)
    (home / "plugins" / "cat").symlink_to(elsewhere)  # a linked category
    for verb in ("remove", "update"):
        for name in ("linked", "cat/linked"):
            refused = hermes("plugins", verb, name, "--json", home=home)
            assert refused.returncode == 2, refused.stdout
            assert json.loads(refused.stdout)["error"]["code"] == "plugin_path_unsafe"
    assert (plugin / "plugin.yaml").is_file()


def test_update_refuses_a_plugin_that_is_not_a_git_checkout(tmp_path):
    (tmp_path / "plugins" / "plain").mkdir(parents=True)
    (tmp_path / "plugins" / "plain" / "plugin.yaml").write_text("name: plain\n")
    refused = hermes("plugins", "update", "plain", "--json", home=tmp_path)
    assert refused.returncode == 2 and json.loads(refused.stdout)["error"]["code"] == "plugin_not_git"
