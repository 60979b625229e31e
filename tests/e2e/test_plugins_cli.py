"""``hermes plugins list|enable|disable`` as real commands on a home with plugins in it."""

from __future__ import annotations

import json

from hermes_cli import plugin_host
from tests.support.cli import hermes


def add(home, name, manifest=None):
    directory = home / "plugins" / name
    directory.mkdir(parents=True)
    (directory / "plugin.yaml").write_text(manifest or f"name: {name}\nversion: 2.0\ndescription: the {name} plugin\n")
    (directory / "__init__.py").write_text("raise SystemExit('list and enable import nothing')\n")


def test_list_enable_and_disable_edit_only_the_plugin_lists(tmp_path):
    (tmp_path / "config.yaml").write_text("# the owner's notes\nmodel: hermes-4  # chosen\n")
    add(tmp_path, "alpha")
    add(tmp_path, "broken", manifest="name: [unclosed\n")
    listed = json.loads(hermes("plugins", "list", "--json", home=tmp_path).stdout)
    assert [(p["name"], p["version"], p["status"], p["source"], p["error"]) for p in listed] == [
        ("alpha", "2.0", "not enabled", "user", None),
        ("broken", "", "not enabled", "user", "manifest_invalid"),
    ]
    enabled = hermes("plugins", "enable", "alpha", "--json", home=tmp_path)
    assert enabled.returncode == 0
    assert json.loads(enabled.stdout) == {
        "name": "alpha",
        "key": "alpha",
        "enabled": True,
        "changed": True,
        "allow_tool_override": None,
    }
    again = hermes("plugins", "enable", "alpha", home=tmp_path)
    assert again.returncode == 0 and again.stdout == "Plugin 'alpha' is already enabled.\n"
    assert plugin_host.enabled_names(tmp_path) == ["alpha"]
    assert (tmp_path / "config.yaml").read_text().startswith("# the owner's notes\nmodel: hermes-4  # chosen\n")
    text = hermes("plugins", "list", home=tmp_path).stdout
    assert "alpha" in text and "enabled" in text and "manifest_invalid" in text
    assert hermes("plugins", "disable", "alpha", home=tmp_path).returncode == 0
    assert plugin_host.enabled_names(tmp_path) == [] and plugin_host.disabled_names(tmp_path) == ["alpha"]


def test_a_plugin_that_is_not_installed_is_refused_and_nothing_changes(tmp_path):
    (tmp_path / "config.yaml").write_text("model: x\n")
    refused = hermes("plugins", "enable", "ghost", "--json", home=tmp_path)
    assert refused.returncode == 2
    assert json.loads(refused.stdout)["error"]["code"] == "plugin_not_found"
    bad = hermes("plugins", "enable", "../etc", home=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert (tmp_path / "config.yaml").read_text() == "model: x\n"
