"""Hermes plugins in a home: discovery, enablement, registration, tool dispatch and hooks.

The real Hermes shape: a plugin is ``<home>/plugins/<name>/`` with ``plugin.yaml`` and an
``__init__.py`` that exposes ``register(ctx)``. Nothing loads unless its name is in
``plugins.enabled`` of the home's ``config.yaml`` (``set_enabled`` is how that list changes;
comments and every other key are kept). ``PluginHost.load_dir`` loads one plugin from any
directory, enabled or not: what an installer checks a staged plugin with before it swaps it in.

``register`` gets a ``PluginContext`` that takes tools (an OpenAI-function JSON Schema,
``{name, description, parameters}``), hooks of the Hermes hook names, and skills. What a plugin
registers is kept only when ``register`` returns: a plugin that fails to import or register is
skipped whole. Dispatch never raises: every outcome is a JSON answer, ``{"ok": false, "error":
{"code", "message"}}`` when the host itself answers.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedSeq
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
MANIFEST = "plugin.yaml"
MANIFEST_MAX_BYTES = 64 * 1024
RESULT_MAX_BYTES = 1_048_576 + 4096  # a tool bounds its own result; this only catches one that does not
PACKAGE = "hermes_plugins"  # the private parent of every loaded plugin's module
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_TOOL_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")

Handler = Callable[..., Any]


class PluginRegistrationError(HermesError):
    code = "plugin_registration_refused"


class PluginNotFound(HermesError):
    code = "plugin_not_found"


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


@dataclass(frozen=True)
class RegisteredTool:
    name: str
    toolset: str
    schema: dict[str, Any]
    handler: Handler
    description: str
    plugin: str
    check_fn: Callable[[], bool] | None = None


def answer_error(code: str, message: str) -> str:
    return json.dumps({"ok": False, "error": {"code": code, "message": message}})


# --- enablement ----------------------------------------------------------------------------


def enabled_names(home: Path) -> list[str]:
    listed = config.get(config.load_config(home), "plugins.enabled", [])
    return [name for name in listed if isinstance(name, str)] if isinstance(listed, list) else []


def set_enabled(home: Path, name: str, enabled: bool) -> bool:
    """Add ``name`` to ``plugins.enabled`` (or take it out); whether the file changed."""
    if not _NAME.fullmatch(name):
        raise PluginNotFound(f"{name!r} is not a plugin name", detail={"name": name})
    path = config.config_path(homes.ensure_home(home))
    with files.locked(path):
        doc = config.load_document(home)
        plugins = doc.data.get("plugins")
        if not isinstance(plugins, dict):
            plugins = {}
            config.add_key(doc.data, "plugins", plugins)
        listed = plugins.get("enabled")
        names = [n for n in listed if isinstance(n, str)] if isinstance(listed, list) else []
        if (name in names) == enabled:
            return False
        wanted = [*names, name] if enabled else [n for n in names if n != name]
        # A new block list: an inline ``[]`` (and its comment) does not take new items well.
        plugins["enabled"] = CommentedSeq(wanted)
        config.save_document(home, doc)
    return True


# --- discovery -----------------------------------------------------------------------------


def _manifest(directory: Path, name: str | None = None) -> dict[str, Any] | None:
    """The manifest's fields, or None when it is not a readable mapping naming ``name`` (by
    default its directory's name). Unknown fields are ignored, as Hermes ignores them."""
    try:
        with open(directory / MANIFEST, "rb") as handle:
            raw = handle.read(MANIFEST_MAX_BYTES + 1)
        if len(raw) > MANIFEST_MAX_BYTES:
            return None
        data = YAML(typ="safe", pure=True).load(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, YAMLError):
        return None
    if not isinstance(data, dict) or data.get("name") != (directory.name if name is None else name):
        return None
    return data


def _info(directory: Path, manifest: dict[str, Any] | None, name: str, enabled: bool) -> PluginInfo:
    if manifest is None:
        return PluginInfo(name, "", "", directory, enabled, error="manifest_invalid")
    return PluginInfo(name, str(manifest.get("version", "")), str(manifest.get("description", "")), directory, enabled)


def discover(home: Path) -> list[PluginInfo]:
    """Every plugin directory of ``home``, sorted by name; nothing is imported."""
    root = Path(home) / PLUGINS_DIR
    try:
        directories = sorted(p for p in root.iterdir() if p.is_dir() and _NAME.fullmatch(p.name))
    except OSError:
        return []
    try:
        enabled = set(enabled_names(home))
    except config.ConfigError:
        enabled = set()  # an unreadable config enables nothing
    found = []
    for directory in directories:
        if not (directory / MANIFEST).is_file():
            continue
        found.append(_info(directory, _manifest(directory), directory.name, directory.name in enabled))
    return found


# --- registration --------------------------------------------------------------------------


@dataclass
class PluginContext:
    """What ``register(ctx)`` is given; what it registers is staged here until it returns."""

    plugin: str
    directory: Path
    taken: Callable[[str], bool]  # whether a tool name is another plugin's already
    tools: dict[str, RegisteredTool] = field(default_factory=dict)
    hooks: list[tuple[str, Callable[..., Any]]] = field(default_factory=list)
    skills: dict[str, Path] = field(default_factory=dict)

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
        if name in self.tools or self.taken(name):
            raise PluginRegistrationError(f"tool {name} is registered already")
        self.tools[name] = RegisteredTool(
            name,
            str(toolset),
            schema,
            handler,
            description or str(schema.get("description", "")),
            self.plugin,
            check_fn,
        )

    def register_hook(self, name: str, callback: Callable[..., Any]) -> None:
        if name not in HERMES_HOOKS or not callable(callback):
            raise PluginRegistrationError(f"{name!r} is not a Hermes hook")
        self.hooks.append((name, callback))

    def register_skill(self, name: str, path: str | Path, description: str = "") -> None:
        skill = Path(path).resolve()
        if not skill.is_file() or not skill.is_relative_to(self.directory.resolve()):
            raise PluginRegistrationError(f"skill {name!r} is not a file of the plugin")
        self.skills[str(name)] = skill


def _import(info: PluginInfo) -> types.ModuleType:
    if PACKAGE not in sys.modules:
        parent = types.ModuleType(PACKAGE)
        parent.__path__ = []
        sys.modules[PACKAGE] = parent
    name = f"{PACKAGE}.{info.name}"
    for cached in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[cached]  # another home's plugin of the same name: this home's code loads
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
        self.skills: dict[str, Path] = {}
        self.hooks: dict[str, list[Callable[..., Any]]] = {}
        self.hook_failures = 0

    @classmethod
    def load(cls, home: Path) -> PluginHost:
        host = cls(home)
        for info in discover(home):
            host.plugins.append(host._load(info) if info.enabled and info.error is None else info)
        return host

    @classmethod
    def load_dir(cls, path: Path, name: str) -> PluginHost:
        """A host with the one plugin in ``path``, loaded as ``name`` (its manifest must name it)
        whatever the directory is called and whether or not it is enabled; it is imported and
        registered by the rules ``load`` follows (its ``enabled`` is True: it loads as an enabled
        one does), a broken one kept with its error.
        ``PluginNotFound`` when ``name`` is no plugin name or ``path`` holds no manifest."""
        directory = Path(path)
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise PluginNotFound("that is not a plugin name")
        if not (directory / MANIFEST).is_file():
            raise PluginNotFound("the directory holds no plugin manifest", detail={"name": name})
        host = cls(directory.parent.parent)  # the home it would be in as <home>/plugins/<dir>
        info = _info(directory, _manifest(directory, name), name, True)
        host.plugins.append(host._load(info) if info.error is None else info)
        return host

    def _load(self, info: PluginInfo) -> PluginInfo:
        try:
            module = _import(info)
        except (Exception, SystemExit) as exc:  # a broken plugin is skipped; its error is named, not its text
            log.warning("plugin %s failed to import (%s)", info.name, type(exc).__name__)
            return dataclasses.replace(info, error="import_failed")
        ctx = PluginContext(info.name, info.path, lambda name: name in self.tools)
        try:
            module.register(ctx)
        except (Exception, SystemExit) as exc:
            log.warning("plugin %s failed to register (%s)", info.name, type(exc).__name__)
            return dataclasses.replace(info, error="register_failed")
        self.tools.update(ctx.tools)
        self.skills.update(ctx.skills)
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
