"""``PluginHost.load_dir``: one plugin loaded from a directory of any name, enabled or not, by
the rules ``PluginHost.load`` follows."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from hermes_cli.plugin_host import PluginHost, PluginNotFound

BODY = """
SCHEMA = {"name": "echo", "description": "echo", "parameters": {"type": "object", "properties": {}}}
def register(ctx):
    ctx.register_tool("echo", "demo", SCHEMA, lambda args, **kw: "{}")
    ctx.register_hook("on_session_start", lambda **kw: None)
"""


def stage(tmp_path: Path, body: str = BODY, *, manifest: str = "name: demo\nversion: 2\n") -> Path:
    directory = tmp_path / "home" / "plugins" / ".demo-stage-x1"
    directory.mkdir(parents=True)
    (directory / "plugin.yaml").write_text(manifest)
    (directory / "__init__.py").write_text(textwrap.dedent(body))
    return directory


def test_a_staged_plugin_loads_under_its_manifest_name_without_being_enabled(tmp_path):
    host = PluginHost.load_dir(stage(tmp_path), "demo")
    (info,) = host.plugins
    assert (info.name, info.version, info.loaded, info.error) == ("demo", "2", True, None)
    assert (info.tools, info.hooks) == (("echo",), ("on_session_start",))
    assert list(host.tools) == ["echo"] and host.has_hook("on_session_start")
    assert host.home == tmp_path / "home"


def test_a_manifest_naming_another_plugin_is_invalid_and_never_imported(tmp_path):
    marker = tmp_path / "imported"
    directory = stage(tmp_path, f"open({str(marker)!r}, 'w').close()\n")
    (info,) = PluginHost.load_dir(directory, "other").plugins
    assert (info.loaded, info.error) == (False, "manifest_invalid")
    assert not marker.exists()


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("raise RuntimeError('x')\n", "import_failed"),
        ("def register(ctx):\n    ctx.register_hook('no_such_hook', print)\n", "register_failed"),
    ],
)
def test_a_broken_staged_plugin_is_kept_with_its_error_and_registers_nothing(tmp_path, body, error):
    host = PluginHost.load_dir(stage(tmp_path, body), "demo")
    assert [(p.loaded, p.error) for p in host.plugins] == [(False, error)]
    assert host.tools == {} and host.hooks == {}


@pytest.mark.parametrize("name", ["", "Demo", "../demo", "a" * 65])
def test_a_name_that_is_no_plugin_name_is_refused(tmp_path, name):
    with pytest.raises(PluginNotFound) as refused:
        PluginHost.load_dir(stage(tmp_path), name)
    assert name not in refused.value.message or not name


def test_a_directory_without_a_manifest_is_refused(tmp_path):
    with pytest.raises(PluginNotFound):
        PluginHost.load_dir(tmp_path / "missing", "demo")
    assert not (tmp_path / "missing").exists()
