"""The plugin host on small plugins written into a home: discovery, enablement, what a
registration may and may not do, dispatch and hooks."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from hermes_cli import plugin_host
from hermes_cli.plugin_host import PluginHost

SCHEMA = {"name": "echo", "description": "echo", "parameters": {"type": "object", "properties": {}}}


def plugin(home: Path, name: str, body: str, *, enable: bool = True, manifest: str | None = None) -> Path:
    """The plugin ``name`` (a key: ``category/name`` puts it in a category)."""
    directory = home / "plugins" / name
    directory.mkdir(parents=True)
    (directory / "plugin.yaml").write_text(manifest if manifest is not None else f"name: {name}\nversion: 1.2\n")
    (directory / "__init__.py").write_text(textwrap.dedent(body))
    if enable:
        plugin_host.set_enabled(home, name, True)
    return directory


ECHO = f"""
SCHEMA = {SCHEMA!r}
def register(ctx):
    ctx.register_tool("echo", "demo", SCHEMA, lambda args, **kw: __import__("json").dumps({{"ok": True, "result": args}}))
"""


def test_an_enabled_plugin_registers_and_its_tool_answers(tmp_path):
    plugin(tmp_path, "demo", ECHO)
    host = PluginHost.load(tmp_path)
    assert list(host.tools) == ["echo"]
    assert json.loads(host.dispatch("echo", {"a": 1})) == {"ok": True, "result": {"a": 1}}
    (info,) = host.plugins
    assert (info.name, info.version, info.loaded, info.error, info.tools) == ("demo", "1.2", True, None, ("echo",))


def test_a_plugin_not_enabled_is_never_imported(tmp_path):
    marker = tmp_path / "imported"
    plugin(tmp_path, "quiet", f"open({str(marker)!r}, 'w').close()\ndef register(ctx): pass\n", enable=False)
    host = PluginHost.load(tmp_path)
    assert not marker.exists()
    assert host.tools == {} and [p.enabled for p in host.plugins] == [False]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("raise RuntimeError('secret-ish text')\n", "import_failed"),
        ("def register(ctx):\n    raise ValueError('x')\n", "register_failed"),
        ("pass\n", "register_failed"),  # no register at all
        ("import sys\nsys.exit(1)\n", "import_failed"),
        ("def register(ctx):\n    raise SystemExit(3)\n", "register_failed"),
    ],
)
def test_a_broken_plugin_is_skipped_whole(tmp_path, body, error):
    plugin(tmp_path, "broken", body)
    plugin(tmp_path, "demo", ECHO)
    host = PluginHost.load(tmp_path)
    states = {p.name: (p.loaded, p.error) for p in host.plugins}
    assert states == {"broken": (False, error), "demo": (True, None)}
    assert list(host.tools) == ["echo"]


@pytest.mark.parametrize(
    "call",
    [
        'ctx.register_tool("echo", "demo", "not a dict", lambda a: "{}")',
        'ctx.register_tool("echo", "demo", {"name": "echo", "type": "object", "properties": {}}, lambda a: "{}")',
        'ctx.register_tool("Echo!", "demo", SCHEMA, lambda a: "{}")',
        'ctx.register_tool("echo", "demo", SCHEMA, "not callable")',
        'ctx.register_tool("echo", "demo", SCHEMA, lambda a: "{}", is_async=True)',
        'ctx.register_hook("on_everything", lambda **kw: None)',
        'ctx.register_skill("s", "/etc/passwd")',
    ],
    ids=["schema-not-dict", "arguments-at-top-level", "bad-name", "handler", "async", "unknown-hook", "skill-outside"],
)
def test_a_refused_registration_keeps_nothing_of_the_plugin(tmp_path, call):
    plugin(
        tmp_path,
        "bad",
        f"""
        SCHEMA = {SCHEMA!r}
        def register(ctx):
            ctx.register_hook("pre_llm_call", lambda **kw: None)
            {call}
        """,
    )
    host = PluginHost.load(tmp_path)
    assert host.tools == {} and not host.has_hook("pre_llm_call")
    assert host.plugins[0].error == "register_failed"


def test_a_tool_of_another_plugin_cannot_be_shadowed(tmp_path):
    plugin(tmp_path, "a-first", ECHO)
    plugin(
        tmp_path,
        "b-second",
        ECHO.replace("register(ctx):", "register(ctx):\n    pass\n    ctx.register_hook('post_llm_call', print)\n"),
    )
    host = PluginHost.load(tmp_path)
    assert host.tools["echo"].plugin == "a-first"
    assert {p.name: p.error for p in host.plugins} == {"a-first": None, "b-second": "register_failed"}


@pytest.mark.parametrize(
    ("handler", "args", "code"),
    [
        ("lambda a, **kw: 1 / 0", {}, "internal_error"),
        ("lambda a, **kw: exit(4)", {}, "internal_error"),
        ("lambda a, **kw: {'not': 'text'}", {}, "internal_error"),
        ("lambda a, **kw: chr(0xD800)", {}, "internal_error"),
        ("lambda a, **kw: 'x' * 1_200_000", {}, "tool_result_too_large"),
        ("lambda a, **kw: '{}'", ["not", "an", "object"], "tool_invalid_arguments"),
    ],
)
def test_dispatch_answers_every_failure_as_json(tmp_path, handler, args, code):
    plugin(tmp_path, "demo", f"def register(ctx):\n    ctx.register_tool('t', 'demo', {SCHEMA!r}, {handler})\n")
    host = PluginHost.load(tmp_path)
    answer = json.loads(host.dispatch("t", args))
    assert answer["ok"] is False and answer["error"]["code"] == code
    assert "ZeroDivision" not in answer["error"]["message"]
    assert json.loads(host.dispatch("missing", {}))["error"]["code"] == "tool_not_found"


def test_hooks_run_in_order_and_what_one_raises_is_swallowed_and_counted(tmp_path):
    seen = tmp_path / "seen"
    plugin(
        tmp_path,
        "hooks",
        f"""
        def register(ctx):
            ctx.register_hook("pre_llm_call", lambda **kw: 1 / 0)
            ctx.register_hook("pre_llm_call", lambda **kw: open({str(seen)!r}, "a").write(kw["session_id"] + "\\n"))
        """,
    )
    host = PluginHost.load(tmp_path)
    host.invoke_hook("pre_llm_call", session_id="s1")
    host.invoke_hook("not_a_hook", session_id="s2")
    assert seen.read_text() == "s1\n"
    assert host.hook_failures == 1 and host.has_hook("pre_llm_call") and not host.has_hook("post_llm_call")


def test_a_bad_manifest_is_reported_and_never_imported(tmp_path):
    marker = tmp_path / "imported"
    plugin(tmp_path, "odd", f"open({str(marker)!r}, 'w').close()\n", manifest="name: someone-else\n")
    host = PluginHost.load(tmp_path)
    assert [(p.name, p.error) for p in host.plugins] == [("odd", "manifest_invalid")]
    assert not marker.exists()


def test_enabling_edits_only_the_enabled_list_and_keeps_comments(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("# the owner's notes\nmodel: hermes-4  # chosen\nplugins:\n  enabled: []  # none yet\n")
    assert plugin_host.set_enabled(tmp_path, "demo", True) is True
    assert plugin_host.set_enabled(tmp_path, "demo", True) is False
    text = config.read_text()
    assert text.startswith("# the owner's notes\nmodel: hermes-4  # chosen\n") and "- demo" in text
    assert plugin_host.enabled_names(tmp_path) == ["demo"]
    assert plugin_host.set_enabled(tmp_path, "demo", False) is True
    assert plugin_host.enabled_names(tmp_path) == []
    assert "# the owner's notes" in config.read_text()


def test_a_tool_whose_check_says_no_is_unavailable_and_its_handler_never_runs(tmp_path):
    ran = tmp_path / "ran"
    plugin(
        tmp_path,
        "gated",
        f"""
        SCHEMA = {SCHEMA!r}
        def handler(args, **kw):
            open({str(ran)!r}, "w").close()
            return "{{}}"
        def register(ctx):
            ctx.register_tool("gated", "demo", SCHEMA, handler, check_fn=lambda: False)
        """,
    )
    answer = json.loads(PluginHost.load(tmp_path).dispatch("gated", {}))
    assert answer["error"]["code"] == "tool_unavailable"
    assert not ran.exists()


def test_a_directory_without_a_manifest_is_a_category_one_level_deep(tmp_path):
    for path in ("flat", "operators/pohunek", "operators/deeper/too-deep", "operators/.stage-x", ".hidden/inner"):
        (tmp_path / "plugins" / path).mkdir(parents=True)
    for path in ("flat", "operators/pohunek", "operators/deeper/too-deep", "operators/.stage-x", ".hidden/inner"):
        name = path.rsplit("/", 1)[-1]
        (tmp_path / "plugins" / path / "plugin.yaml").write_text(f"name: {name}\n")
    (tmp_path / "plugins" / "legacy").mkdir()
    (tmp_path / "plugins" / "legacy" / "plugin.yml").write_text("name: legacy\nkind: exclusive\n")
    found = {p.key: (p.name, p.kind) for p in plugin_host.discover(tmp_path)}
    assert found == {
        "flat": ("flat", "standalone"),
        "legacy": ("legacy", "exclusive"),
        "operators/pohunek": ("pohunek", "standalone"),
    }


def test_disabled_wins_over_enabled_by_key_or_name(tmp_path):
    plugin(tmp_path, "operators/pohunek", ECHO.replace("demo", "pohunek"), enable=False, manifest="name: pohunek\n")
    config = tmp_path / "config.yaml"
    for lists, status in [
        ("enabled: [pohunek]", "enabled"),
        ("enabled: [operators/pohunek]", "enabled"),
        ("enabled: [operators/pohunek]\n  disabled: [pohunek]", "disabled"),
        ("disabled: [operators/pohunek]", "disabled"),
        ("enabled: [other]", "not enabled"),
    ]:
        config.write_text(f"plugins:\n  {lists}\n")
        (info,) = PluginHost.load(tmp_path).plugins
        assert (info.status, info.loaded) == (status, status == "enabled")


def test_set_enabled_moves_a_key_between_the_lists(tmp_path):
    (tmp_path / "config.yaml").write_text("plugins:\n  enabled: [pohunek]\n  disabled: [operators/pohunek]\n")
    assert plugin_host.set_enabled(tmp_path, "operators/pohunek", True) is True
    assert (plugin_host.enabled_names(tmp_path), plugin_host.disabled_names(tmp_path)) == (
        ["pohunek", "operators/pohunek"],
        [],
    )
    assert plugin_host.set_enabled(tmp_path, "operators/pohunek", False) is True
    assert (plugin_host.enabled_names(tmp_path), plugin_host.disabled_names(tmp_path)) == ([], ["operators/pohunek"])
    with pytest.raises(plugin_host.PluginNotFound):
        plugin_host.set_enabled(tmp_path, "../etc", True)


def test_a_name_in_two_places_is_refused_and_its_key_chooses(tmp_path):
    for key in ("operators/pohunek", "spare/pohunek"):
        plugin(tmp_path, key, "def register(ctx): pass\n", enable=False, manifest="name: pohunek\n")
    with pytest.raises(plugin_host.PluginNameAmbiguous) as refused:
        plugin_host.find(tmp_path, "pohunek")
    assert refused.value.detail == {"name": "pohunek", "keys": ["operators/pohunek", "spare/pohunek"]}
    assert plugin_host.find(tmp_path, "spare/pohunek").path == tmp_path / "plugins" / "spare" / "pohunek"
    with pytest.raises(plugin_host.PluginNotFound):
        plugin_host.find(tmp_path, "ghost")


OVERRIDE = """
def register(ctx):
    ctx.register_tool("echo", "other", {SCHEMA!r}, lambda args, **kw: '"second"', override={override})
"""


@pytest.mark.parametrize(
    ("override", "granted", "winner"),
    [(True, True, "b-second"), (True, False, "a-first"), (False, True, "a-first")],
)
def test_a_taken_tool_is_replaced_only_by_an_override_the_owner_granted(tmp_path, override, granted, winner):
    plugin(tmp_path, "a-first", ECHO)
    plugin(tmp_path, "b-second", OVERRIDE.format(SCHEMA=SCHEMA, override=override))
    plugin_host.set_tool_override(tmp_path, "b-second", granted)
    host = PluginHost.load(tmp_path)
    assert host.tools["echo"].plugin == winner
    assert {p.name: p.error for p in host.plugins}["b-second"] == (None if winner == "b-second" else "register_failed")
