"""``hermes_cli.plugins``: the Hermes Agent's plugin API (``PluginManager``, ``_plugins`` by key,
``_plugin_skills`` by ``plugin:skill``) over the project's one plugin host."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_cli import plugin_host
from hermes_cli.plugins import PluginManager

KEYWORDS = """
from pathlib import Path

def _tool(args: dict, **kwargs) -> str:
    return '{"ok": true}'

def register(ctx):
    ctx.register_tool(
        name="kw_tool", toolset="kw", handler=_tool, description="by keyword",
        schema={"name": "kw_tool", "parameters": {"type": "object", "properties": {}}},
    )
    ctx.register_hook(hook_name="pre_llm_call", callback=lambda **kw: None)
    ctx.register_hook("pre_llm_call", lambda **kw: None)
    ctx.register_skill(name="guide", path=Path(__file__).parent / "SKILL.md", description="read me")
"""


def write(home: Path, key: str, body: str) -> Path:
    directory = home / "plugins" / key
    directory.mkdir(parents=True)
    (directory / "plugin.yaml").write_text(f"name: {key.rsplit('/', 1)[-1]}\nversion: 3\n")
    (directory / "__init__.py").write_text(body)
    (directory / "SKILL.md").write_text("# guide\n")
    return directory


def test_the_manager_names_what_the_host_loaded_as_hermes_does(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    directory = write(tmp_path, "tools/kw", KEYWORDS)
    write(tmp_path, "quiet", "raise SystemExit('never imported')\n")
    write(tmp_path, "off", "raise SystemExit('never imported')\n")
    plugin_host.set_enabled(tmp_path, "kw", True)  # by its name: a bare name enables a category plugin too
    plugin_host.set_enabled(tmp_path, "off", False)
    manager = PluginManager()
    manager.discover_and_load(force=True)
    loaded = manager._plugins["tools/kw"]
    assert (loaded.enabled, loaded.error, loaded.manifest.kind, loaded.manifest.key) == (
        True,
        None,
        "standalone",
        "tools/kw",
    )
    assert (loaded.tools_registered, loaded.hooks_registered) == (["kw_tool"], ["pre_llm_call"])
    skill = manager._plugin_skills["kw:guide"]
    assert skill["path"] == (directory / "SKILL.md").resolve() and isinstance(skill["path"], Path)
    assert manager.find_plugin_skill("kw:guide") == skill["path"] and manager.has_hook("pre_llm_call")
    assert manager._plugins["quiet"].error.startswith("not enabled in config")
    assert manager._plugins["off"].error == "disabled via config"
    assert not manager._plugins["off"].enabled


def test_discovery_runs_once_unless_forced(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    manager = PluginManager()
    manager.discover_and_load()
    write(tmp_path, "later", "def register(ctx): pass\n")
    manager.discover_and_load()
    assert manager._plugins == {}
    manager.discover_and_load(force=True)
    assert list(manager._plugins) == ["later"]


@pytest.mark.parametrize("name", ["a:b", "", "with space"])
def test_a_skill_name_hermes_would_refuse_fails_the_plugin(tmp_path, monkeypatch, name):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    write(
        tmp_path,
        "bad",
        f"from pathlib import Path\ndef register(ctx):\n    ctx.register_skill({name!r}, Path(__file__).parent / 'SKILL.md')\n",
    )
    plugin_host.set_enabled(tmp_path, "bad", True)
    manager = PluginManager()
    manager.discover_and_load(force=True)
    assert manager._plugins["bad"].error == "register_failed" and manager._plugin_skills == {}
