"""The completion: runs in a fresh interpreter of the NEW tree, after the commit point.

``python -m services.updater.completion REQUEST`` (``--check`` only validates the request).
It syncs dependencies when their spec changed, migrates every home's config.yaml, compiles
the tree's code (``bytecode``) so that no restarted process compiles it again, restarts
the fleet, verifies it, and writes one result correlated with the request's update id and
nonce. Nothing here fails the update: what could not be done becomes a follow-up, and the
obligation stays armed. Each step has a bound (``update.step_timeout``): one past it is
stopped, owed as a follow-up naming it, and the next step goes on. A heartbeat keeps the
step on disk for the updater to show and to enforce.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from services.updater.bytecode import compile_tree
from services.updater.completion_contract import (
    RESULT_SCHEMA,
    UNKNOWN_SPEC,
    Request,
    dependency_digest,
    progress_path,
)
from services.updater.heartbeat import Heartbeat
from services.updater.restart import RestartOutcome, restart_fleet
from services.updater.rollout import Rollout, roll_out
from services.updater.settings import STEP_TIMEOUT, UpdateSettings
from services.updater.stages import BYTECODE, DEPENDENCIES, MIGRATIONS, NEW_RESTART, NEW_VERIFY
from services.updater.step_bound import StepOverran, bounded
from services.updater.verify import CURRENT, MatrixRow, fleet_matrix, followups_for
from shared import exit_codes
from shared.errors import HermesError, failure_reason
from shared.files import write_json_atomic
from shared.identity import current_identity
from shared.version import __version__, code_sha

DEPENDENCY_SPECS = ("pyproject.toml",)
PIP_TIMEOUT = 600

# Taken at import, the moment this interpreter loaded the new tree's code: the result says
# what the completion itself ran, not what the tree holds by the time it answers.
IMPORTED_CODE_SHA = code_sha()
IMPORTED_CODE_VERSION = __version__


T = TypeVar("T")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _settings(root: Path) -> tuple[UpdateSettings, str | None]:
    """The ``update:`` settings (this code may be the first to read a key), and None; or the
    defaults and why the settings could not be taken."""
    from services.updater.settings import load_settings  # its parser only where config.yaml names it

    try:
        return load_settings(root), None
    except Exception as exc:  # a wrong value, or no ruamel yet (its sync failed): the steps still run
        return UpdateSettings(), f"{failure_reason(exc)}; the defaults were taken"


class Completion:
    def __init__(self, request: Request):
        self.request = request
        self.steps: list[dict[str, Any]] = []
        self.skips: list[dict[str, Any]] = []
        self.followups: list[dict[str, str]] = []
        self.rollout: Rollout | None = None  # a gated restart's waves, and the gate that failed

    def step(self, name: str, ok: bool, detail: Any = None) -> None:
        self.steps.append({"name": name, "ok": ok, "detail": detail, "at": _now()})

    def skip(self, name: str, reason: str) -> None:
        self.skips.append({"name": name, "reason": reason, "at": _now()})

    def run(self) -> dict[str, Any]:
        request = self.request
        install_root, root = Path(request.install_root), Path(request.root)
        restart: list[RestartOutcome] = []
        matrix: list[MatrixRow] = []
        # Read before the dependencies sync, which may be what brings the settings' parser.
        settings, unread = _settings(root)
        if unread is not None:
            self.skip("settings", f"update.step_timeout: {unread} ({STEP_TIMEOUT:g} s)")
        with Heartbeat(progress_path(request.result_path), request.update_id) as beat:
            try:
                bound = settings.step_timeout
                self.bounded(beat, DEPENDENCIES.name, bound, None, self.sync_dependencies, install_root)
                self.bounded(beat, MIGRATIONS.name, bound, None, self.migrate_configs, root)
                self.bounded(beat, BYTECODE.name, bound, None, self.compile_code, install_root)
                restart = self.bounded(beat, NEW_RESTART.name, bound, [], self.restart_fleet, root, settings)
                if self.rollout is not None and self.rollout.failed is not None:
                    self.skip(NEW_VERIFY.name, f"{self.rollout.failed.message}: the updater rolls the install back")
                else:
                    matrix = self.bounded(beat, NEW_VERIFY.name, bound, [], self.verify_fleet, root)
            except Exception as exc:  # still answer: what broke is owed, not lost
                self.step("completion", False, failure_reason(exc))
                self.followups.append({"step": "completion", "reason": failure_reason(exc)})
        me = current_identity()
        return {
            "schema": RESULT_SCHEMA,
            "update_id": request.update_id,
            "nonce": request.nonce,
            "completion": {
                "pid": me.pid,
                "start_time": me.start_time,
                "code_sha": IMPORTED_CODE_SHA,
                "code_version": IMPORTED_CODE_VERSION,
            },
            "steps": self.steps,
            "skips": self.skips,
            "restart": [outcome.to_dict() for outcome in restart],
            "fleet": [row.to_dict() for row in matrix],
            "followups": self.followups,
            **({"rollout": self.rollout.to_dict()} if self.rollout is not None else {}),
        }

    def bounded(self, beat: Heartbeat, name: str, bound: float, overran: T, step: Callable[..., T], *args: Any) -> T:
        """``step(*args)`` within ``bound`` seconds; past it, a failed step and a follow-up
        naming it, and ``overran`` stands for what it would have returned."""
        beat.enter(name, bound)
        try:
            with bounded(name, bound):
                return step(*args)
        except StepOverran as over:
            self.step(name, False, over.reason)
            self.followups.append({"step": name, "reason": over.reason})
            return overran

    def restart_fleet(self, root: Path, settings: UpdateSettings) -> list[RestartOutcome]:
        """Every gateway onto the new code: in health-gated waves when the updater asks for them
        (one that does not would not revert a failed gate), else all at once; a revert's
        completion restarts only the gateways that moved."""
        options = self.request.options
        only = options.get("restart_only")
        if only is not None or options.get("gates") is not True:
            restart = restart_fleet(root, self.request.after, only=only if isinstance(only, list) else None)
            self.step(NEW_RESTART.name, all(r.ok for r in restart), {"gateways": len(restart)})
            return restart
        wanted = options.get("max_parallel")
        rollout = roll_out(
            root,
            self.request.after,
            self.request.live_profiles,
            max_parallel=wanted if type(wanted) is int and wanted >= 0 else settings.max_parallel,
            min_healthy=settings.min_healthy,
        )
        self.rollout = rollout
        ok = rollout.failed is None and all(r.ok for r in rollout.outcomes)
        self.step(NEW_RESTART.name, ok, {"gateways": len(rollout.outcomes), "waves": len(rollout.waves)})
        if rollout.failed is not None:
            self.step("gate", False, rollout.failed.to_dict())
        return rollout.outcomes

    def verify_fleet(self, root: Path) -> list[MatrixRow]:
        """The fleet against the new commit, each gateway's health within ``update.min_healthy``
        read now: the migrations may have just written it."""
        settings, unread = _settings(root)
        request = self.request
        matrix = fleet_matrix(
            root, request.after, expected_profiles=request.live_profiles, min_healthy=settings.min_healthy
        )
        self.followups += followups_for(matrix, expected_profiles=set(request.live_profiles))
        verified = {
            "current": sum(r.verdict == CURRENT for r in matrix),
            **({"min_healthy": unread} if unread else {}),
        }
        self.step(NEW_VERIFY.name, not self.followups, verified)
        return matrix

    def migrate_configs(self, root: Path) -> None:
        """Every home's config.yaml to this release's version, before the fleet restarts onto it."""
        try:
            # Imported here, not at the top: the migrations need ruamel.yaml, which the venv of an
            # older release gets only from sync_dependencies above, in this very process.
            importlib.invalidate_caches()
            from services.updater.migrations import FAILED, MIGRATED, NEWER, migrate_all

            outcomes = migrate_all(root)
        except Exception as exc:  # e.g. the dependency did not install, profiles/ unreadable: still restart
            self.step(MIGRATIONS.name, False, failure_reason(exc))
            self.followups.append({"step": MIGRATIONS.name, "reason": failure_reason(exc)})
            return
        for outcome in outcomes:
            if outcome.status == NEWER:
                self.skip(MIGRATIONS.name, f"{outcome.home}: {outcome.reason}")
            elif outcome.status == FAILED:
                self.followups.append({"step": MIGRATIONS.name, "reason": f"{outcome.home}: {outcome.reason}"})
        done = [o for o in outcomes if o.status in (MIGRATED, FAILED)]
        if not done:
            self.skip(MIGRATIONS.name, "no home's config.yaml needed migrating")
            return
        failed = sum(o.status == FAILED for o in done)
        detail = {"migrated": len(done) - failed, "failed": failed, "homes": [o.to_dict() for o in done]}
        self.step(MIGRATIONS.name, not failed, detail)

    def compile_code(self, install_root: Path) -> None:
        """The tree's code compiled before the fleet restarts onto it; what fails is a follow-up
        (its importers compile it from source) and the restart goes ahead."""
        try:
            sweep = compile_tree(install_root)
        except Exception as exc:  # e.g. an unreadable package directory: still restart
            self.step(BYTECODE.name, False, failure_reason(exc))
            self.followups.append({"step": BYTECODE.name, "reason": failure_reason(exc)})
            return
        self.step(BYTECODE.name, not sweep.failed, sweep.to_dict())
        if sweep.failed:
            self.followups.append({"step": BYTECODE.name, "reason": sweep.reason()})

    def sync_dependencies(self, install_root: Path) -> None:
        if not spec_changed(self.request, install_root):
            self.skip(DEPENDENCIES.name, "the dependency spec did not change")
            return
        owner = environment_owner()
        if owner is None or os.path.realpath(owner) != os.path.realpath(install_root):
            # Re-pointing an environment another checkout was installed into would move that
            # install onto this tree's code: what is owed is a sync by hand, not a hijack.
            whose = f"is installed from {owner}" if owner else "has no editable hermes-mesh install"
            self._dependency_failed(
                f"the dependency spec may have changed, but this interpreter's environment {whose}, "
                f"not {install_root}: install the dependencies by hand"
            )
            return
        command = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "-e",
            str(install_root),
            "--config-settings",
            "editable_mode=compat",
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._dependency_failed(f"pip did not finish within {PIP_TIMEOUT}s")
            return
        if done.returncode != 0:
            self._dependency_failed(done.stderr.strip()[-500:] or f"pip exited {done.returncode}")
            return
        self.step(DEPENDENCIES.name, True, {"synced": True})

    def _dependency_failed(self, why: str) -> None:
        self.step(DEPENDENCIES.name, False, why)
        self.followups.append({"step": DEPENDENCIES.name, "reason": why})


def environment_owner() -> Path | None:
    """The checkout this interpreter's hermes-mesh is an editable install of, or None."""
    # Imported here, not at the top: only a dependency sync asks, and these are a large part of
    # the completion's start-up.
    import importlib.metadata
    from urllib.parse import urlsplit
    from urllib.request import url2pathname

    # The environment's own record (dist-info/direct_url.json), not a source tree's egg-info
    # that the working directory happens to put first on sys.path.
    raws = (dist.read_text("direct_url.json") for dist in importlib.metadata.distributions(name="hermes-mesh"))
    try:
        data = json.loads(next((raw for raw in raws if raw), "null"))
    except ValueError:
        return None
    if not isinstance(data, dict) or not (data.get("dir_info") or {}).get("editable"):
        return None
    url = urlsplit(str(data.get("url", "")))
    return Path(url2pathname(url.path)) if url.scheme == "file" else None


def spec_changed(request: Request, install_root: Path) -> bool:
    """Whether the dependency spec may have changed across the update; when in doubt, it did.

    The spec's digest from before the swap (request schema 2) against the spec on disk now:
    this works for a tree laid down from a source archive, whose commit the local .git does
    not have. Without that digest (schema 1, or an update owed by an older release): the
    commits' diff."""
    if request.dependency_spec != UNKNOWN_SPEC:
        try:
            return dependency_digest(install_root) != request.dependency_spec
        except OSError:
            return True
    changed = _changed_files(install_root, request.before, request.after)
    return changed is None or bool(set(changed) & set(DEPENDENCY_SPECS))


def _changed_files(repo: Path, before: str | None, after: str | None) -> list[str] | None:
    if not before or not after:
        return None
    try:
        done = subprocess.run(
            ["git", "diff", "--name-only", before, after], cwd=repo, capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):  # no git, or a git that hangs: unknown
        return None
    return done.stdout.split() if done.returncode == 0 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.updater.completion")
    parser.add_argument("request", type=Path)
    parser.add_argument("--check", action="store_true", help="only validate the request")
    args = parser.parse_args(argv)
    try:
        request = Request.read(args.request)
    except FileNotFoundError:
        print(f"completion: no request at {args.request}", file=sys.stderr)
        return exit_codes.REFUSED
    except HermesError as exc:  # a corrupt file or a schema this release does not read
        print(f"completion: {exc.message}", file=sys.stderr)
        return exit_codes.REFUSED
    if args.check:
        return 0
    from shared import logs

    logs.configure("completion", update_id=request.update_id)
    result = Completion(request).run()
    write_json_atomic(Path(request.result_path), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
