"""The operator harness's Hermes plugin contract check, step for step, against any ``hermes``.

``checks(contract)`` are the steps the harness runs (``check_plugin_contract``) from the lock's
``plugin_contract``: its fixture plugin written under ``<HERMES_HOME>/plugins/<category>/<name>``
with its exact manifest, skill and entrypoint; the four help checks; list (not enabled), enable,
list (enabled), the runtime smoke (its script, run by the Python beside ``hermes``), disable,
list (disabled); then the fixture in the named profile's home and ``--profile NAME plugins list
--json`` (not enabled). ``run_contract`` runs them in the harness's isolated environment
(``hermes_contract.harness_env``: temporary homes, an absolute ``HERMES_HOME``, a work directory
as cwd, no network) and gives every failed step, so a test can name each one a real Hermes fails.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.hermes_contract import closed_port, harness_env

FIXTURE_VERSION = "0.0.0-compat"
FIXTURE_TOOL = "pohunek_hosts"
FIXTURE_HOOK = "pre_llm_call"
FIXTURE_SKILL_BODY = "Model-free Pohunek compatibility skill."
RUNTIME_MARKERS = (
    "plugin api tool pohunek_hosts",
    "plugin api hook pre_llm_call",
    "plugin api skill pohunek:pohunek",
)
# The harness's PLUGIN_RUNTIME_SMOKE, unchanged.
RUNTIME_SMOKE = """
from pathlib import Path

from hermes_cli.plugins import PluginManager

manager = PluginManager()
manager.discover_and_load(force=True)
loaded = manager._plugins.get("operators/pohunek")
if loaded is None or not loaded.enabled or loaded.error is not None:
    raise RuntimeError("pinned Hermes did not load the compatibility plugin")
if loaded.manifest.kind != "standalone":
    raise RuntimeError("pinned Hermes resolved the wrong plugin kind")
if set(loaded.tools_registered) != {"pohunek_hosts"}:
    raise RuntimeError("pinned Hermes registered the wrong tool inventory")
if set(loaded.hooks_registered) != {"pre_llm_call"}:
    raise RuntimeError("pinned Hermes registered the wrong hook inventory")
skill = manager._plugin_skills.get("pohunek:pohunek")
if skill is None or not isinstance(skill.get("path"), Path) or not skill["path"].is_file():
    raise RuntimeError("pinned Hermes registered the wrong skill inventory")
print("plugin api tool pohunek_hosts")
print("plugin api hook pre_llm_call")
print("plugin api skill pohunek:pohunek")
"""
TIMEOUT = 60.0


def materialize_fixture(hermes_home: Path, contract: dict[str, Any]) -> Path:
    """The harness's fixture plugin (``materialize_plugin_fixture``), byte for byte."""
    api, name = contract["api"], contract["lifecycle"]["plugin_name"]
    directory = hermes_home / api["discovery_root"] / api["discovery_category"] / name
    skill = directory / "skills" / api["skill_name"]
    skill.mkdir(parents=True, exist_ok=True)
    (directory / "plugin.yaml").write_text(
        f"name: {name}\nversion: {FIXTURE_VERSION}\ndescription: Model-free Pohunek compatibility fixture\n"
        f"provides_tools:\n  - {FIXTURE_TOOL}\nprovides_hooks:\n  - {FIXTURE_HOOK}\n"
    )
    (skill / "SKILL.md").write_text(f"# Pohunek\n\n{FIXTURE_SKILL_BODY}\n")
    schema = (
        f'{{"name": "{FIXTURE_TOOL}", "description": "List Pohunek hosts", "parameters": '
        '{"type": "object", "properties": {}, "additionalProperties": False}}'
    )
    (directory / api["entrypoint_file"]).write_text(
        "import json\nfrom pathlib import Path\n\n_ROOT = Path(__file__).resolve().parent\n\n"
        'def _tool(args: dict, **kwargs) -> str:\n    return json.dumps({"ok": True})\n\n'
        "def _hook(*args, **kwargs):\n    return None\n\n"
        "def register(ctx):\n"
        f'    ctx.register_tool("{FIXTURE_TOOL}", "{api["toolset"]}", {schema}, _tool, description="List Pohunek hosts")\n'
        f'    ctx.register_hook("{FIXTURE_HOOK}", _hook)\n'
        f'    ctx.register_skill("{api["skill_name"]}", _ROOT / "skills" / "{api["skill_name"]}" / "SKILL.md", '
        'description="Use Pohunek safely")\n'
    )
    return directory


@dataclass(frozen=True)
class Check:
    id: str
    program: str  # "hermes", or "python": the interpreter beside it
    args: tuple[str, ...]
    required_text: tuple[str, ...]
    fixture_in: str | None = None  # write the fixture into this home first (relative to HERMES_HOME)


def checks(contract: dict[str, Any]) -> list[Check]:
    life, targets = contract["lifecycle"], contract["targets"]
    listing = tuple(life["list_args"])

    def state(step: str, args: list[str] | tuple[str, ...], text: list[str]) -> Check:
        return Check(step, "hermes", tuple(args), tuple(text))

    return [
        *(
            Check(c["id"], "hermes", tuple(c["args"]), tuple(c["required_text"]), fixture_in="." if i == 0 else None)
            for i, c in enumerate(contract["cli_checks"])
        ),
        state("plugins-list-not-enabled-before-enable", listing, life["not_enabled_text"]),
        state("plugins-enable", life["enable_args"], life["enable_text"]),
        state("plugins-list-enabled", listing, life["enabled_text"]),
        Check("plugins-runtime-api", "python", ("-c", RUNTIME_SMOKE), RUNTIME_MARKERS),
        state("plugins-disable", life["disable_args"], life["disable_text"]),
        state("plugins-list-disabled-after-disable", listing, life["disabled_text"]),
        Check(
            "plugins-list-named-profile",
            "hermes",
            (*targets["named_profile_args"], *listing),
            tuple(life["not_enabled_text"]),
            fixture_in=targets["named_profile_relative_home"],
        ),
    ]


@dataclass(frozen=True)
class Failure:
    id: str
    why: str
    output: str


def run_contract(
    hermes_bin: Path,
    root: Path,
    contract: dict[str, Any],
    *,
    prefix: tuple[str, ...] = (),
    python: Path | None = None,
    on_step: Callable[[Check, subprocess.CompletedProcess[str]], None] | None = None,
) -> list[Failure]:
    """Every step of the contract against ``hermes_bin`` in a fresh isolation under ``root``; the
    steps that failed (a non-zero exit, or a required text missing from stdout and stderr)."""
    hermes_home, work = root / "hermes-home", root / "work"
    for path in (root / "home", hermes_home, work):
        path.mkdir(parents=True)
    env = harness_env(root, closed_port())
    interpreter = python or _sibling_python(hermes_bin)
    failures = []
    for check in checks(contract):
        if check.fixture_in is not None:
            materialize_fixture((hermes_home / check.fixture_in).resolve(), contract)
        program = str(hermes_bin if check.program == "hermes" else interpreter)
        done = subprocess.run(
            [*prefix, program, *check.args],
            env=env,
            cwd=work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        if on_step is not None:
            on_step(check, done)
        text = done.stdout + done.stderr
        if done.returncode != 0:
            failures.append(Failure(check.id, f"exit {done.returncode}", text[-2000:]))
            continue
        missing = [t for t in check.required_text if t not in text]
        if missing:
            failures.append(Failure(check.id, f"missing {missing}", text[-2000:]))
    return failures


def _sibling_python(hermes_bin: Path) -> Path:
    # As the harness finds it: ``python``, else ``python3``, in the directory of ``hermes``.
    for name in ("python", "python3"):
        if (hermes_bin.parent / name).is_file():
            return hermes_bin.parent / name
    raise AssertionError(f"no Python beside {hermes_bin}")


# The statuses the four list steps must read, in order.
LISTED_STATES = ["not enabled", "enabled", "disabled", "not enabled"]


def installer_state(stdout: str, name: str) -> str:
    """The plugin's status as the operator's installer takes it from ``plugins list --json``
    (``parse_plugin_state``): exactly one JSON array, exactly one record of the name, from the
    user's plugins, with a status it knows."""
    records = json.loads(stdout)  # one document and nothing after it, or this raises
    assert isinstance(records, list), f"not a JSON array: {stdout[:200]!r}"
    (record,) = [r for r in records if r["name"] == name]
    assert record["source"] == "user", record
    assert record["status"] in ("enabled", "disabled", "not enabled"), record
    return str(record["status"])


@dataclass
class ListedStates:
    """An ``on_step`` that reads every list step's stdout as the installer does."""

    contract: dict[str, Any]
    seen: list[str] = field(default_factory=list)

    def read(self, check: Check, done: subprocess.CompletedProcess[str]) -> None:
        listing = tuple(self.contract["lifecycle"]["list_args"])
        if check.args[-len(listing) :] == listing:
            self.seen.append(installer_state(done.stdout, self.contract["lifecycle"]["plugin_name"]))
