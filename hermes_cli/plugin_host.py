"""Hermes plugins in a home: discovery, enablement, registration, tool dispatch and hooks.

The real Hermes shape: a plugin is a directory with ``plugin.yaml`` naming it and an
``__init__.py`` that exposes ``register(ctx)``, either ``<home>/plugins/<name>/`` (its key is
``name``) or one level down in a category, ``<home>/plugins/<category>/<name>/`` (its key is
``category/name``): a directory without a manifest is a category, and a category's own
subdirectories without one are nothing. ``config.yaml`` says which may load:
``plugins.disabled`` (by key or name) always wins, then ``plugins.enabled`` (by key or name);
a plugin in neither is "not enabled" and is never imported. ``set_enabled`` is how both lists
change (comments and every other key are kept). ``PluginHost.load_dir`` loads one plugin from
any directory, enabled or not: what an installer checks a staged plugin with before it swaps it in.

``register`` gets a ``PluginContext`` that takes tools (an OpenAI-function JSON Schema,
``{name, description, parameters}``), hooks of the Hermes hook names, and skills. A tool name
already taken may be replaced only with ``override=True`` by a plugin the owner granted
``plugins.entries.<key>.allow_tool_override``. What a plugin registers is kept only when
``register`` returns: a plugin that fails to import or register is skipped whole. Dispatch never
raises: every outcome is a JSON answer, ``{"ok": false, "error": {"code", "message"}}`` when
the host itself answers.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import re
import sys
import types
from collections.abc import Callable, Container
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError

from shared import config, files, homes
from shared.errors import HermesError

log = logging.getLogger(__name__)

# Hermes Agent's ``VALID_HOOKS``: a plugin may register any of them; a chat fires the ones it has
# (session start and end, each turn, approvals) and never the others.
HERMES_HOOKS = frozenset(
    {
        "pre_tool_call",
        "post_tool_call",
        "transform_terminal_output",
        "transform_tool_result",
        "transform_llm_output",
        "pre_llm_call",
        "post_llm_call",
        "on_stream_start",
        "on_stream_delta",
        "on_stream_end",
        "on_interim_message",
        "pre_verify",
        "pre_api_request",
        "post_api_request",
        "api_request_error",
        "transform_api_error_classification",
        "on_session_start",
        "on_session_end",
        "on_session_finalize",
        "on_session_reset",
        "on_skill_lifecycle",
        "subagent_start",
        "subagent_stop",
        "pre_gateway_dispatch",
        "agent_loop_stopped",
        "pre_approval_request",
        "post_approval_response",
        "on_room_member_activity",
        "pre_transcription",
        "kanban_task_claimed",
        "kanban_task_completed",
        "kanban_task_blocked",
        "on_kanban_worker_spawned",
        "on_kanban_worker_exited",
        "on_kanban_worker_stale_claim",
        "on_kanban_task_updated",
        "on_kanban_dispatch_tick",
        "gateway_platform_event",
        "pre_command",
    }
)
PLUGINS_DIR = "plugins"
MANIFESTS = ("plugin.yaml", "plugin.yml")  # the first that exists is the manifest, as Hermes reads it
MANIFEST_MAX_BYTES = 64 * 1024
RESULT_MAX_BYTES = 1_048_576 + 4096  # a tool bounds its own result; this only catches one that does not
PACKAGE = "hermes_plugins"  # the private parent of every loaded plugin's module
KINDS = frozenset({"standalone", "backend", "exclusive", "platform", "model-provider"})
# Kinds Hermes loads through a loader of their own (memory providers, model providers): never here.
OWN_LOADERS = frozenset({"exclusive", "model-provider"})
# A plugin's status, as ``hermes plugins list`` prints it.
ENABLED, DISABLED, NOT_ENABLED = "enabled", "disabled", "not enabled"
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_KEY = re.compile(rf"(?:{_NAME.pattern}/)?{_NAME.pattern}")
_TOOL_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_SKILL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")

Handler = Callable[..., Any]


class PluginError(HermesError, family=True):
    """A Hermes plugin of a home: installing it from git, enabling, loading and registering it."""


class PluginRegistrationError(PluginError):
    code = "plugin_registration_refused"


class PluginNotFound(PluginError):
    code = "plugin_not_found"


class PluginNameAmbiguous(PluginError):
    code = "plugin_name_ambiguous"


@dataclass(frozen=True)
class PluginInfo:
    name: str
    version: str
    description: str
    path: Path
    enabled: bool
    loaded: bool = False
    error: str | None = None  # manifest_invalid, import_failed, register_failed
    tools: tuple[str, ...] = ()
    hooks: tuple[str, ...] = ()
    skills: tuple[str, ...] = ()
    key: str = ""  # ``name``, or ``category/name``: what the config lists name it by
    status: str = NOT_ENABLED
    source: str = "user"  # ``git`` when the directory is a git checkout
    kind: str = "standalone"


@dataclass(frozen=True)
class RegisteredTool:
    name: str
    toolset: str
    schema: dict[str, Any]
    handler: Handler
    description: str
    plugin: str
    check_fn: Callable[[], bool] | None = None


@dataclass(frozen=True)
class RegisteredSkill:
    name: str
    plugin: str
    path: Path
    description: str

    @property
    def qualified(self) -> str:
        return f"{self.plugin}:{self.name}"


def answer_error(code: str, message: str) -> str:
    return json.dumps({"ok": False, "error": {"code": code, "message": message}})


# --- enablement ----------------------------------------------------------------------------


def _names(plugins: Any, listing: str) -> list[str]:
    listed = plugins.get(listing) if isinstance(plugins, dict) else None
    return [name for name in listed if isinstance(name, str)] if isinstance(listed, list) else []


def enabled_names(home: Path) -> list[str]:
    return _names(config.get(config.load_config(home), "plugins"), "enabled")


def disabled_names(home: Path) -> list[str]:
    return _names(config.get(config.load_config(home), "plugins"), "disabled")


def status_of(key: str, name: str, enabled: Container[str], disabled: Container[str]) -> str:
    """``disabled`` (by key or name) wins over ``enabled``; in neither list: ``not enabled``."""
    if key in disabled or name in disabled:
        return DISABLED
    return ENABLED if key in enabled or name in enabled else NOT_ENABLED


def tool_override_allowed(home: Path, key: str) -> bool:
    """Whether the owner let the plugin ``key`` replace a tool already registered."""
    try:
        entries = config.get(config.load_config(home), "plugins.entries", {})
    except config.ConfigError:
        return False  # an unreadable config grants nothing
    entry = entries.get(key) if isinstance(entries, dict) else None
    return isinstance(entry, dict) and entry.get("allow_tool_override") is True


def _checked_key(key: str) -> str:
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise PluginNotFound(f"{key!r} is not a plugin name", detail={"name": str(key)})
    return key


def _edit_plugins(home: Path, change: Callable[[CommentedMap], bool]) -> bool:
    """Run ``change`` on the ``plugins`` mapping of the home's config under its lock; the file is
    written only when ``change`` says it changed something."""
    path = config.config_path(homes.ensure_home(home))
    with files.locked(path):
        doc = config.load_document(home)
        plugins = doc.data.get("plugins")
        fresh = not isinstance(plugins, dict)
        if fresh:
            plugins = CommentedMap()
        if not change(plugins):
            return False
        if fresh:
            _set_entry(doc.data, "plugins", plugins)
        config.save_document(home, doc)
    return True


def set_enabled(home: Path, key: str, enabled: bool) -> bool:
    """Enable the plugin ``key`` (into ``plugins.enabled``, out of ``plugins.disabled`` under its
    key and its name) or disable it (the reverse); whether the file changed."""
    _checked_key(key)
    name = key.rsplit("/", 1)[-1]

    def change(plugins: CommentedMap) -> bool:
        on, off = _names(plugins, "enabled"), _names(plugins, "disabled")
        if enabled:
            wanted_on, wanted_off = [*on, key] if key not in on else on, [n for n in off if n not in (key, name)]
        else:
            wanted_on, wanted_off = [n for n in on if n not in (key, name)], [*off, key] if key not in off else off
        if (wanted_on, wanted_off) == (on, off):
            return False
        if wanted_on != on:
            config.set_list(plugins, "enabled", wanted_on)
        if wanted_off != off:
            config.set_list(plugins, "disabled", wanted_off)
        return True

    return _edit_plugins(home, change)


def set_tool_override(home: Path, key: str, allowed: bool) -> bool:
    """Write ``plugins.entries.<key>.allow_tool_override``; whether the file changed."""
    _checked_key(key)

    def change(plugins: CommentedMap) -> bool:
        entries = plugins.get("entries")
        entry = entries.get(key) if isinstance(entries, dict) else None
        if isinstance(entry, dict):
            if entry.get("allow_tool_override") is allowed:
                return False
            entry["allow_tool_override"] = allowed
        elif isinstance(entries, CommentedMap):
            _set_entry(entries, key, CommentedMap(allow_tool_override=allowed))
        else:
            _set_entry(plugins, "entries", CommentedMap({key: CommentedMap(allow_tool_override=allowed)}))
        return True

    return _edit_plugins(home, change)


def _set_entry(mapping: CommentedMap, key: str, value: Any) -> None:
    if key in mapping:
        config.replace_value(mapping, key, value)
    else:
        config.add_key(mapping, key, value)


# --- discovery -----------------------------------------------------------------------------


def manifest_file(directory: Path) -> Path | None:
    """The directory's manifest file, or None: the directory is no plugin."""
    for candidate in MANIFESTS:
        if (directory / candidate).is_file():
            return directory / candidate
    return None


def _read_manifest(directory: Path) -> dict[str, Any] | None:
    """The directory's manifest when it is a readable mapping of a bounded size, else None."""
    found = manifest_file(directory)
    if found is None:
        return None
    try:
        with open(found, "rb") as handle:
            raw = handle.read(MANIFEST_MAX_BYTES + 1)
        if len(raw) > MANIFEST_MAX_BYTES:
            return None
        data = YAML(typ="safe", pure=True).load(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, YAMLError):
        return None
    return data if isinstance(data, dict) else None


def _manifest(directory: Path, name: str | None = None) -> dict[str, Any] | None:
    """The manifest's fields, or None when it is not readable or does not name ``name`` (by
    default its directory's name). Unknown fields are ignored, as Hermes ignores them."""
    data = _read_manifest(directory)
    return data if data is not None and data.get("name") == (directory.name if name is None else name) else None


def is_plugin_name(name: object) -> TypeGuard[str]:
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def manifest_name(directory: Path) -> str | None:
    """The name the directory's manifest gives, when it reads and is one a plugin may have."""
    data = _read_manifest(directory)
    name = data.get("name") if data is not None else None
    return name if is_plugin_name(name) else None


def _kind(manifest: dict[str, Any]) -> str:
    # As Hermes reads it: no kind, or one it does not know, is a standalone plugin.
    kind = manifest.get("kind", "standalone")
    kind = kind.strip().lower() if isinstance(kind, str) else "standalone"
    return kind if kind in KINDS else "standalone"


def _info(directory: Path, manifest: dict[str, Any] | None, name: str, key: str, status: str) -> PluginInfo:
    source = "git" if (directory / ".git").exists() else "user"
    if manifest is None:
        return PluginInfo(
            name, "", "", directory, status == ENABLED, error="manifest_invalid", key=key, status=status, source=source
        )
    return PluginInfo(
        name,
        str(manifest.get("version", "")),
        str(manifest.get("description", "")),
        directory,
        status == ENABLED,
        key=key,
        status=status,
        source=source,
        kind=_kind(manifest),
    )


def plugin_dirs(home: Path) -> list[tuple[str, Path]]:
    """(key, directory) of every plugin directory of ``home``, by key; nothing is read but the
    tree. Only names a plugin may have count: a staging or hidden directory is never one."""
    found: list[tuple[str, Path]] = []
    for child in _children(Path(home) / PLUGINS_DIR):
        if manifest_file(child) is not None:
            found.append((child.name, child))
            continue
        found.extend((f"{child.name}/{leaf.name}", leaf) for leaf in _children(child) if manifest_file(leaf))
    return sorted(found)


def _children(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if _NAME.fullmatch(p.name) and p.is_dir())
    except OSError:
        return []


def discover(home: Path) -> list[PluginInfo]:
    """Every plugin of ``home``, by key, with its status; nothing is imported."""
    try:
        plugins = config.get(config.load_config(home), "plugins")
        enabled, disabled = set(_names(plugins, "enabled")), set(_names(plugins, "disabled"))
    except config.ConfigError:
        enabled, disabled = set(), set()  # an unreadable config enables nothing
    found = []
    for key, directory in plugin_dirs(home):
        name = directory.name
        found.append(_info(directory, _manifest(directory), name, key, status_of(key, name, enabled, disabled)))
    return found


def find(home: Path, selector: str) -> PluginInfo:
    """The plugin ``selector`` names: its key, else its name when one plugin has it.
    ``PluginNotFound`` for none; ``PluginNameAmbiguous`` when the name is in two places."""
    if not isinstance(selector, str) or not _KEY.fullmatch(selector):
        raise PluginNotFound(f"{selector!r} is not a plugin name", detail={"name": str(selector)})
    found = discover(home)
    by_key = [p for p in found if p.key == selector]
    matches = by_key or [p for p in found if p.name == selector]
    if not matches:
        raise PluginNotFound(
            f"no plugin {selector!r} is installed in {Path(home) / PLUGINS_DIR}", detail={"name": selector}
        )
    if len(matches) > 1:
        keys = [p.key for p in matches]
        raise PluginNameAmbiguous(
            f"plugin {selector!r} is installed in {len(keys)} places ({', '.join(keys)}): name one by its key",
            detail={"name": selector, "keys": keys},
        )
    return matches[0]


# --- registration --------------------------------------------------------------------------


@dataclass
class PluginContext:
    """What ``register(ctx)`` is given; what it registers is staged here until it returns."""

    plugin: str
    directory: Path
    taken: Callable[[str], bool]  # whether a tool name is registered already
    may_override: bool = False  # whether the owner granted this plugin allow_tool_override
    tools: dict[str, RegisteredTool] = field(default_factory=dict)
    hooks: list[tuple[str, Callable[..., Any]]] = field(default_factory=list)
    skills: dict[str, RegisteredSkill] = field(default_factory=dict)

    def register_tool(
        self,
        name: str,
        toolset: str,
        schema: dict[str, Any],
        handler: Handler,
        check_fn: Callable[[], bool] | None = None,
        requires_env: list[str] | None = None,
        is_async: bool = False,
        description: str = "",
        emoji: str = "",
        override: bool = False,
    ) -> None:
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            raise PluginRegistrationError(f"{name!r} is not a tool name")
        if not isinstance(schema, dict) or not isinstance(schema.get("parameters"), dict):
            raise PluginRegistrationError(
                f"tool {name}: the schema must be a mapping with its arguments under 'parameters'"
            )
        if not callable(handler) or is_async:
            raise PluginRegistrationError(f"tool {name}: the handler must be a plain callable")
        if name in self.tools:
            raise PluginRegistrationError(f"tool {name} is registered already")
        if self.taken(name) and not (override and self.may_override):
            why = "" if override else " (override=True replaces it, when the owner allows the plugin to)"
            raise PluginRegistrationError(f"tool {name} is registered already{why}")
        self.tools[name] = RegisteredTool(
            name,
            str(toolset),
            schema,
            handler,
            description or str(schema.get("description", "")),
            self.plugin,
            check_fn,
        )

    def register_hook(self, hook_name: str, callback: Callable[..., Any]) -> None:
        if hook_name not in HERMES_HOOKS or not callable(callback):
            raise PluginRegistrationError(f"{hook_name!r} is not a Hermes hook")
        self.hooks.append((hook_name, callback))

    def register_skill(self, name: str, path: str | Path, description: str = "") -> None:
        if not isinstance(name, str) or not _SKILL_NAME.fullmatch(name):
            raise PluginRegistrationError(f"{name!r} is not a skill name")
        skill = Path(path).resolve()
        if not skill.is_file() or not skill.is_relative_to(self.directory.resolve()):
            raise PluginRegistrationError(f"skill {name!r} is not a file of the plugin")
        self.skills[name] = RegisteredSkill(name, self.plugin, skill, str(description))


def module_slug(key: str) -> str:
    return key.replace("/", "__").replace("-", "_")


def _import(info: PluginInfo) -> types.ModuleType:
    if PACKAGE not in sys.modules:
        parent = types.ModuleType(PACKAGE)
        parent.__path__ = []
        sys.modules[PACKAGE] = parent
    # Named by its key, as Hermes names it: ``operators/pohunek`` is ``hermes_plugins.operators__pohunek``.
    name = f"{PACKAGE}.{module_slug(info.key or info.name)}"
    for cached in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[cached]  # another home's plugin of the same key: this home's code loads
    spec = importlib.util.spec_from_file_location(
        name, info.path / "__init__.py", submodule_search_locations=[str(info.path)]
    )
    if spec is None or spec.loader is None:
        raise ImportError(name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    # No __pycache__ in the plugin's directory: compiled code beside its checksummed sources
    # would be an unmanaged entry there, and would run in place of the checked source.
    writes_bytecode = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        sys.dont_write_bytecode = writes_bytecode
    return module


class PluginHost:
    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self.plugins: list[PluginInfo] = []
        self.tools: dict[str, RegisteredTool] = {}
        self.skills: dict[str, RegisteredSkill] = {}  # by qualified name, ``plugin:skill``
        self.hooks: dict[str, list[Callable[..., Any]]] = {}
        self.hook_failures = 0

    @classmethod
    def load(cls, home: Path) -> PluginHost:
        host = cls(home)
        for info in discover(home):
            loads = info.enabled and info.error is None and info.kind not in OWN_LOADERS
            host.plugins.append(host._load(info) if loads else info)
        return host

    @classmethod
    def load_dir(cls, path: Path, name: str) -> PluginHost:
        """A host with the one plugin in ``path``, loaded as ``name`` (its manifest must name it)
        whatever the directory is called and whether or not it is enabled; it is imported and
        registered by the rules ``load`` follows (its ``enabled`` is True: it loads as an enabled
        one does), a broken one kept with its error.
        ``PluginNotFound`` when ``name`` is no plugin name or ``path`` holds no manifest."""
        directory = Path(path)
        if not is_plugin_name(name):
            raise PluginNotFound("that is not a plugin name")
        if manifest_file(directory) is None:
            raise PluginNotFound("the directory holds no plugin manifest", detail={"name": name})
        host = cls(directory.parent.parent)  # the home it would be in as <home>/plugins/<dir>
        info = _info(directory, _manifest(directory, name), name, name, ENABLED)
        host.plugins.append(host._load(info) if info.error is None else info)
        return host

    def _load(self, info: PluginInfo) -> PluginInfo:
        try:
            module = _import(info)
        except (Exception, SystemExit) as exc:  # a broken plugin is skipped; its error is named, not its text
            log.warning("plugin %s failed to import (%s)", info.name, type(exc).__name__)
            return dataclasses.replace(info, error="import_failed")
        ctx = PluginContext(
            info.name, info.path, lambda name: name in self.tools, tool_override_allowed(self.home, info.key)
        )
        try:
            module.register(ctx)
        except (Exception, SystemExit) as exc:
            log.warning("plugin %s failed to register (%s)", info.name, type(exc).__name__)
            return dataclasses.replace(info, error="register_failed")
        self.tools.update(ctx.tools)
        self.skills.update((skill.qualified, skill) for skill in ctx.skills.values())
        for name, callback in ctx.hooks:
            self.hooks.setdefault(name, []).append(callback)
        return dataclasses.replace(
            info,
            loaded=True,
            tools=tuple(ctx.tools),
            hooks=tuple(name for name, _ in ctx.hooks),
            skills=tuple(ctx.skills),
        )

    def dispatch(self, name: str, args: Any) -> str:
        """The tool's JSON answer, as an agent turn gets it; never raises."""
        tool = self.tools.get(name)
        if tool is None:
            return answer_error("tool_not_found", f"no tool {name!r} is registered")
        if not isinstance(args, dict):
            return answer_error("tool_invalid_arguments", "a tool's arguments are a JSON object")
        try:
            if tool.check_fn is not None and not tool.check_fn():
                return answer_error("tool_unavailable", f"tool {name} is not available now")
            result = tool.handler(args)
        except (Exception, SystemExit) as exc:
            log.warning("tool %s raised (%s)", name, type(exc).__name__)
            return answer_error("internal_error", f"tool {name} failed")
        try:
            size = len(result.encode("utf-8")) if isinstance(result, str) else None
        except UnicodeEncodeError:  # a lone surrogate: no turn, terminal or log could carry it
            size = None
        if size is None:
            return answer_error("internal_error", f"tool {name} answered something that is not text")
        if size > RESULT_MAX_BYTES:
            return answer_error("tool_result_too_large", f"tool {name} answered more than {RESULT_MAX_BYTES} bytes")
        return result

    def has_hook(self, name: str) -> bool:
        return bool(self.hooks.get(name))

    def invoke_hook(self, name: str, **kwargs: Any) -> None:
        """Every callback of ``name``, in registration order; what one raises is swallowed and counted."""
        for callback in self.hooks.get(name, ()):
            try:
                callback(**kwargs)
            except (Exception, SystemExit):
                self.hook_failures += 1
