"""The Hermes Agent's plugin API (``hermes_cli.plugins``), over this project's plugin host.

A plugin, or a script that checks one the way Hermes tooling does, may use the names Hermes
gives: ``PluginManager().discover_and_load(force=True)``, then ``_plugins`` (by key:
``operators/pohunek``) of ``LoadedPlugin`` records with their ``manifest``, ``enabled``,
``error``, ``tools_registered`` and ``hooks_registered``, and ``_plugin_skills`` (by
``plugin:skill``). Discovery, enablement and registration are ``hermes_cli.plugin_host``'s: this
module only names what it found as Hermes names it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermes_cli import plugin_host
from hermes_cli.plugin_host import PluginContext, PluginHost, PluginInfo
from shared import homes

__all__ = [
    "LoadedPlugin",
    "PluginContext",
    "PluginManager",
    "PluginManifest",
    "discover_plugins",
    "get_plugin_manager",
    "has_hook",
    "invoke_hook",
]

# What Hermes says of a plugin it did not load; a failure is named by the host's own code.
_NOT_LOADED = {
    plugin_host.DISABLED: "disabled via config",
    plugin_host.NOT_ENABLED: "not enabled in config (run `hermes plugins enable {}` to activate)",
}


@dataclass
class PluginManifest:
    name: str
    version: str = ""
    description: str = ""
    source: str = "user"
    path: str | None = None
    kind: str = "standalone"
    key: str = ""


@dataclass
class LoadedPlugin:
    manifest: PluginManifest
    tools_registered: list[str] = field(default_factory=list)
    hooks_registered: list[str] = field(default_factory=list)
    enabled: bool = False
    error: str | None = None


def _loaded(info: PluginInfo) -> LoadedPlugin:
    manifest = PluginManifest(
        info.name, info.version, info.description, info.source, str(info.path), info.kind, info.key
    )
    error = info.error
    if error is None and not info.loaded and info.status in _NOT_LOADED:
        error = _NOT_LOADED[info.status].format(info.key)
    return LoadedPlugin(
        manifest,
        tools_registered=list(info.tools),
        hooks_registered=list(dict.fromkeys(info.hooks)),
        enabled=info.loaded,
        error=error,
    )


class PluginManager:
    """The plugins of the active home, loaded once (again with ``force``)."""

    def __init__(self) -> None:
        self._host = PluginHost(homes.active_home())
        self._plugins: dict[str, LoadedPlugin] = {}
        self._plugin_skills: dict[str, dict[str, Any]] = {}
        self._discovered = False

    def discover_and_load(self, force: bool = False) -> None:
        if self._discovered and not force:
            return
        self._host = PluginHost.load(homes.active_home())
        self._plugins = {info.key: _loaded(info) for info in self._host.plugins}
        self._plugin_skills = {
            qualified: {
                "path": skill.path,
                "plugin": skill.plugin,
                "bare_name": skill.name,
                "description": skill.description,
            }
            for qualified, skill in self._host.skills.items()
        }
        self._discovered = True

    @property
    def _hooks(self) -> dict[str, list[Any]]:
        return self._host.hooks

    def invoke_hook(self, hook_name: str, **kwargs: Any) -> None:
        self._host.invoke_hook(hook_name, **kwargs)

    def has_hook(self, hook_name: str) -> bool:
        return self._host.has_hook(hook_name)

    def find_plugin_skill(self, qualified_name: str) -> Path | None:
        entry = self._plugin_skills.get(qualified_name)
        return entry["path"] if entry else None

    def list_plugins(self) -> list[dict[str, Any]]:
        return [
            {
                "name": p.manifest.name,
                "key": key,
                "kind": p.manifest.kind,
                "version": p.manifest.version,
                "description": p.manifest.description,
                "source": p.manifest.source,
                "enabled": p.enabled,
                "tools": len(p.tools_registered),
                "hooks": len(p.hooks_registered),
                "error": p.error,
            }
            for key, p in sorted(self._plugins.items())
        ]


_manager: PluginManager | None = None


def get_plugin_manager() -> PluginManager:
    global _manager
    if _manager is None:
        _manager = PluginManager()
    return _manager


def discover_plugins(force: bool = False) -> None:
    get_plugin_manager().discover_and_load(force=force)


def invoke_hook(hook_name: str, **kwargs: Any) -> None:
    get_plugin_manager().invoke_hook(hook_name, **kwargs)


def has_hook(hook_name: str) -> bool:
    return get_plugin_manager().has_hook(hook_name)
