"""Plugins from git: ``hermes plugins install|update|remove`` on a home's ``plugins/`` directory.

``install`` clones a git URL, a local git repository or GitHub's ``owner/repo`` into a hidden
staging directory of ``<home>/plugins/`` and renames it to ``<home>/plugins/<name>/`` (the name
its manifest gives) only when its manifest reads; ``--force`` swaps an installed one out under a
journal, so a crash leaves the old plugin or the new one, never neither. ``update`` is ``git pull
--ff-only`` in a plugin that is a git checkout. ``remove`` renames the plugin's directory out of
discovery, then deletes it without following a link. Every change holds the plugins directory's
lock; the next change finishes or undoes what a crashed one left. git runs bounded, never
prompting, and what a URL carries as credentials is never shown.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hermes_cli import plugin_host
from hermes_cli.plugin_host import PluginError
from shared import faults, files, homes

GIT_TIMEOUT = 60.0
STAGE = ".install-stage-"  # a clone not yet checked
TRASH = ".install-trash-"  # a plugin on its way out
JOURNAL = ".install-journal.json"  # a forced swap under way: {"name", "trash"}
_URL = re.compile(r"(?:https?|ssh|file)://\S+|git@[^\s:]+:\S+")
_SHORTHAND = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


class PluginSourceInvalid(PluginError):
    code = "plugin_source_invalid"


class PluginFetchFailed(PluginError):
    code = "plugin_fetch_failed"


class PluginExists(PluginError):
    code = "plugin_exists"


class PluginNotGit(PluginError):
    code = "plugin_not_git"


class PluginPathUnsafe(PluginError):
    code = "plugin_path_unsafe"


def shown(url: str) -> str:
    """The URL without the credentials it may carry (``https://user:token@host/...``)."""
    return _USERINFO.sub("", url)


def git_url(identifier: str, cwd: Path | None = None) -> str:
    """What ``git clone`` is given for ``identifier``: a URL as it is, a local repository as its
    absolute path, ``owner/repo`` as its GitHub URL."""
    if not isinstance(identifier, str) or not identifier or identifier.startswith("-") or "\n" in identifier:
        raise PluginSourceInvalid("the plugin source is not a git URL, a git repository or owner/repo")
    if _URL.fullmatch(identifier):
        return identifier
    local = (cwd or Path.cwd()) / identifier
    if local.is_dir():
        return str(local.absolute())
    if _SHORTHAND.fullmatch(identifier):
        return f"https://github.com/{identifier.removesuffix('.git')}.git"
    raise PluginSourceInvalid(
        f"{identifier!r} is not a git URL, a local git repository or owner/repo", detail={"identifier": identifier}
    )


def _git(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C"}
    try:
        return subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise PluginFetchFailed(f"git {args[0]} did not finish in {GIT_TIMEOUT:g} seconds") from None
    except OSError:
        raise PluginFetchFailed("git is not installed or cannot be run") from None


@contextmanager
def _changing(home: Path) -> Iterator[Path]:
    """The plugins directory, locked, with what a crashed change left finished or undone."""
    root = homes.ensure_home(home) / plugin_host.PLUGINS_DIR
    root.mkdir(mode=0o700, exist_ok=True)
    with files.locked(root / JOURNAL):
        _recover(root)
        yield root


def _recover(root: Path) -> None:
    journal = files.read_json(root / JOURNAL, default=None)
    if isinstance(journal, dict):
        name, trash = journal.get("name"), journal.get("trash")
        if (
            plugin_host.is_plugin_name(name)
            and isinstance(trash, str)
            and re.fullmatch(rf"{re.escape(TRASH)}[0-9a-f]{{8}}", trash)
            and not os.path.lexists(root / name)
            and os.path.lexists(root / trash)
        ):
            os.rename(root / trash, root / name)  # the swap did not happen: the old plugin is back
        (root / JOURNAL).unlink()
    for leftover in root.iterdir():
        if leftover.name.startswith((STAGE, TRASH)):
            _delete(leftover)


def _delete(path: Path) -> None:
    # rmtree removes a link inside the tree as a link; a link in the place of the tree is unlinked.
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path)


def install(home: Path, identifier: str, *, force: bool = False) -> plugin_host.PluginInfo:
    url = git_url(identifier)
    with _changing(home) as root:
        stage = root / f"{STAGE}{secrets.token_hex(4)}"
        done = _git(["clone", "--depth", "1", "--quiet", "--", url, str(stage)])
        if done.returncode != 0:
            _delete(stage)
            raise PluginFetchFailed(f"git clone {shown(url)} failed (exit {done.returncode})")
        name = plugin_host.manifest_name(stage)
        if name is None:
            _delete(stage)
            raise PluginSourceInvalid(
                f"{shown(url)} holds no plugin: its plugin.yaml must name it (a-z, 0-9, '_' and '-')"
            )
        target = root / name
        if os.path.lexists(target):
            if not force:
                _delete(stage)
                raise PluginExists(
                    f"plugin {name!r} is installed already: update it, or install with --force",
                    detail={"name": name},
                )
            _refuse_link(root, target)
            _swap(root, stage, target)
        else:
            faults.step()
            os.rename(stage, target)
    return plugin_host.find(home, name)


def _swap(root: Path, stage: Path, target: Path) -> None:
    trash = f"{TRASH}{secrets.token_hex(4)}"
    files.write_json_atomic(root / JOURNAL, {"name": target.name, "trash": trash})
    faults.step()
    os.rename(target, root / trash)
    faults.step()
    os.rename(stage, target)
    faults.step()
    (root / JOURNAL).unlink()
    _delete(root / trash)


def _refuse_link(root: Path, path: Path) -> None:
    """``PluginPathUnsafe`` unless every directory from ``root`` down to ``path`` is a plain one."""
    for step in [path, *path.parents]:
        if step == root:
            return
        if not stat.S_ISDIR(os.lstat(step).st_mode):
            raise PluginPathUnsafe(
                f"{step} is not a plain directory (a link is never followed)", detail={"path": str(step)}
            )


def update(home: Path, selector: str) -> dict[str, Any]:
    with _changing(home) as root:
        info = plugin_host.find(home, selector)
        _refuse_link(root, info.path)
        if info.source != "git":
            raise PluginNotGit(
                f"plugin {info.key!r} was not installed from git (no .git directory): it cannot be pulled",
                detail={"name": info.key},
            )
        done = _git(["pull", "--ff-only", "--quiet"], cwd=info.path)
        if done.returncode != 0:
            raise PluginFetchFailed(f"git pull in plugin {info.key!r} failed (exit {done.returncode})")
        head = _git(["rev-parse", "HEAD"], cwd=info.path).stdout.strip()
    return {"name": info.name, "key": info.key, "commit": head}


def remove(home: Path, selector: str) -> plugin_host.PluginInfo:
    with _changing(home) as root:
        info = plugin_host.find(home, selector)
        _refuse_link(root, info.path)
        trash = root / f"{TRASH}{secrets.token_hex(4)}"
        faults.step()
        os.rename(info.path, trash)  # out of discovery at once; deleting it may take a while
        _delete(trash)
    return info
