"""The update's stage table (``stages``): the order the pipeline and the completion really run,
one commit point with nothing after it undone, unique names, and the docs' diagrams drawn
from it. Each rule is a function of a table, so a planted wrong table shows it catches one."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from services.updater import pipeline as pipeline_module
from services.updater import stages
from services.updater.apply_git import ApplyResult
from services.updater.canary import Canary
from services.updater.completion import Completion
from services.updater.install_kind import InstallKind
from services.updater.plan import Plan
from services.updater.settings import UpdateSettings
from services.updater.stages import STAGES, Side, Stage, completion_stages, updater_stages
from services.updater.verify import STALE, MatrixRow
from tests.support.docs_blocks import block, body
from tests.support.processes import ROOT
from tests.support.updater import bare_run, on_this_tree

OLD, NEW = "a" * 40, "b" * 40
Table = tuple[Stage, ...]

# --- the rules ------------------------------------------------------------------------------------


def one_commit_point(table: Table) -> bool:
    """Exactly one stage moves the tree, and the updater runs it."""
    commits = [stage for stage in table if stage.side is Side.COMMIT]
    return len(commits) == 1 and not commits[0].new_code


def nothing_after_the_commit_point_is_undone(table: Table) -> bool:
    """The updater's stages lie before the commit point up to it and after it from there; every
    stage of the completion lies after it."""
    old = updater_stages(table)
    cut = next((i for i, stage in enumerate(old) if stage.side is Side.COMMIT), len(old))
    return (
        all(stage.side is Side.BEFORE for stage in old[:cut])
        and all(stage.side is Side.AFTER for stage in old[cut + 1 :])
        and all(stage.side is Side.AFTER for stage in completion_stages(table))
    )


def names_unique(table: Table) -> bool:
    """A name says one stage of each code (the completion's restart is not the updater's)."""
    return len({(stage.new_code, stage.name) for stage in table}) == len(table)


def in_table_order(seen: list[str], table: Table) -> bool:
    """Every stage in ``seen`` is one of the table's, first entered in the table's order (a
    stage entered again, verify after a restart, goes back to no earlier one)."""
    names = [stage.name for stage in table]
    if not set(seen) <= set(names):
        return False
    firsts = [names.index(name) for name in dict.fromkeys(seen)]
    return firsts == sorted(firsts)


RULES: list[Callable[[Table], bool]] = [one_commit_point, nothing_after_the_commit_point_is_undone, names_unique]


def test_the_table_keeps_every_rule():
    for rule in RULES:
        assert rule(STAGES), rule.__name__


def _replaced(table: Table, stage: Stage, **changes: Any) -> Table:
    return tuple(dataclasses.replace(row, **changes) if row is stage else row for row in table)


PLANTED = {
    "two-commit-points": (one_commit_point, _replaced(STAGES, stages.RESTORE, side=Side.COMMIT)),
    "no-commit-point": (one_commit_point, _replaced(STAGES, stages.APPLY, side=Side.BEFORE)),
    "the-completion-commits": (one_commit_point, _replaced(STAGES, stages.MIGRATIONS, side=Side.COMMIT)),
    "undone-after-the-commit": (
        nothing_after_the_commit_point_is_undone,
        _replaced(STAGES, stages.COMPLETION, side=Side.BEFORE),
    ),
    "the-new-code-before-it": (
        nothing_after_the_commit_point_is_undone,
        _replaced(STAGES, stages.DEPENDENCIES, side=Side.BEFORE),
    ),
    "owed-before-the-commit": (
        nothing_after_the_commit_point_is_undone,
        _replaced(STAGES, stages.PLAN, side=Side.AFTER),
    ),
    "a-name-twice": (names_unique, _replaced(STAGES, stages.VERIFY, name="restart")),
}


@pytest.mark.parametrize("rule, table", PLANTED.values(), ids=PLANTED.keys())
def test_a_planted_wrong_table_breaks_its_rule(rule, table):
    assert not rule(table)


# --- the order the pipeline runs ------------------------------------------------------------------


def _plan(root: Path, rollback: dict[str, Any] | None = None) -> Plan:
    return Plan(
        root=root,
        install_root=root,
        install=InstallKind("git", True, None, "a git checkout"),
        code_sha=OLD,
        code_version="0.1.0",
        git={"branch": "main", "remote_sha": NEW},
        git_error=None,
        profiles=[],
        gateways=[],
        foreign=[],
        backup="quick",
        owed_completion=None,
        snapshot=True,
        actions=[],
        rollback=rollback,
        canary=None if rollback else {"profile": "default"},
        max_parallel=None if rollback else 0,
    )


def _stages_of_a_run(tmp_path: Path, monkeypatch, *, moved: bool, **path: Any) -> list[str]:
    """The stage of every event a run publishes, its stage bodies stubbed: the pipeline's own
    sequence of boundaries and reports, with no git, completion or gateway behind it."""
    tmp_path.mkdir()
    run = bare_run(tmp_path)
    events: list[dict[str, Any]] = []
    run.publish = events.append
    run.lock.recovered = {"update_id": "u0", "pid": 4242}  # an earlier run died holding the lock
    rollback = path.get("rollback")
    monkeypatch.setattr(run, "_plan", lambda: (UpdateSettings(), _plan(run.root, rollback)))
    monkeypatch.setattr(run, "_snapshot", lambda plan: None)
    result = ApplyResult(before=OLD, after=NEW if moved else OLD, branch="main", fetched_sha=NEW, moved=moved)

    def apply(branch: str, settings: UpdateSettings, plan: Plan) -> ApplyResult:
        if moved:  # git's apply calls its gate between the fetch and the move
            run._gate(plan.canary, NEW)
        return rewind()

    def rewind(*args: Any) -> ApplyResult:
        run.committed = moved
        return result

    monkeypatch.setattr(run, "_apply", apply)
    monkeypatch.setattr(run, "_rewind", rewind)
    monkeypatch.setattr(pipeline_module, "run_canary", lambda *a, **k: Canary("default", NEW, 0.1))
    monkeypatch.setattr(run.restore, "run", lambda: None)
    failed = {"code": "gate_failed", "message": "wave 1 failed its gate", "detail": {}}
    gate = {"rollout": {"waves": [["a"]], "moved": ["a"], "failed": failed}} if path.get("gate_fails") else {}

    def complete(before: str, after: str, **options: Any) -> dict[str, Any] | None:
        return {**gate, "fleet": []} if "max_parallel" in options and options["max_parallel"] is not None else None

    monkeypatch.setattr(run, "complete", complete)
    back = ApplyResult(before=NEW, after=OLD, branch="main", fetched_sha=OLD, moved=True)
    monkeypatch.setattr(pipeline_module, "rewind", lambda *a, **k: back)
    run.debts.pending = path.get("pending")
    row = MatrixRow("a", "unmanaged", 4100, "running", running=OLD, expected=OLD, verdict=STALE, source="socket")
    monkeypatch.setattr(pipeline_module, "fleet_matrix", lambda *a, **k: [row] if path.get("stale") else [])
    monkeypatch.setattr(pipeline_module, "restart_fleet", lambda *a, **k: [])
    assert run.stage is stages.STARTING
    run.run()
    boundaries = {stage.name: stage for stage in updater_stages(STAGES)}
    assert all(boundaries[e["stage"]].stops for e in events if e["status"] == "start")
    return [stages.STARTING.name] + [event["stage"] for event in events] + [stages.DONE.name]


def _runs(tmp_path: Path, monkeypatch) -> Iterator[list[str]]:
    backup = {"path": "/b.tar.gz", "sha256": "0" * 64}
    yield _stages_of_a_run(tmp_path / "forward", monkeypatch, moved=True)
    yield _stages_of_a_run(tmp_path / "reverted", monkeypatch, moved=True, gate_fails=True)
    yield _stages_of_a_run(
        tmp_path / "rollback", monkeypatch, moved=True, rollback={"of": "u0", "target": OLD, "backup": backup}
    )
    pending = {"update_id": "u0", "before": OLD, "after": NEW, "attempt": None}
    yield _stages_of_a_run(tmp_path / "owed", monkeypatch, moved=False, pending=pending)
    yield _stages_of_a_run(tmp_path / "stale", monkeypatch, moved=False, stale=True)


def test_the_updater_runs_its_stages_in_the_tables_order(tmp_path, monkeypatch):
    runs = list(_runs(tmp_path, monkeypatch))
    assert runs == [  # each stage's start and what it reports, as far as the stubs leave it
        [
            *("starting", "recover", "plan", "snapshot", "fetch", "canary", "canary", "apply", "apply"),
            *("completion", "completion", "done"),
        ],
        [
            *("starting", "recover", "plan", "snapshot", "fetch", "canary", "canary", "apply", "apply"),
            *("completion", "completion", "revert", "revert", "completion", "done"),
        ],
        ["starting", "recover", "plan", "snapshot", "apply", "apply", "restore", "completion", "completion", "done"],
        ["starting", "recover", "plan", "snapshot", "fetch", "apply", "completion", "completion", "completion", "done"],
        [
            "starting",
            "recover",
            "plan",
            "snapshot",
            "fetch",
            "apply",
            "verify",
            "restart",
            "restart",
            "verify",
            "verify",
            "done",
        ],
    ]
    for seen in runs:
        assert in_table_order(seen, updater_stages(STAGES)), seen
    every = {name for seen in runs for name in seen}
    assert every == {stage.name for stage in updater_stages(STAGES)}  # no row the pipeline never runs


def test_a_planted_table_out_of_order_fails_the_pipelines_order(tmp_path, monkeypatch):
    runs = list(_runs(tmp_path, monkeypatch))
    old = list(updater_stages(STAGES))
    # plan/snapshot, fetch/canary, canary/apply, apply/restore, restore/completion, completion/revert,
    # verify/restart
    for i, j in [(2, 3), (4, 5), (5, 6), (6, 7), (7, 8), (8, 9), (10, 11)]:
        planted = list(old)
        planted[i], planted[j] = planted[j], planted[i]
        assert not all(in_table_order(seen, tuple(planted)) for seen in runs), (old[i].name, old[j].name)


def test_the_completion_runs_its_stages_in_the_tables_order(tmp_path):
    seen: list[str] = []

    class Recording(Completion):
        def step(self, name: str, ok: bool, detail: Any = None) -> None:
            seen.append(name)
            super().step(name, ok, detail)

        def skip(self, name: str, reason: str) -> None:
            seen.append(name)
            super().skip(name, reason)

    Recording(on_this_tree(tmp_path)).run()
    assert list(dict.fromkeys(seen)) == [stage.name for stage in completion_stages(STAGES)]


# --- the diagrams ---------------------------------------------------------------------------------


def test_a_changed_table_draws_another_diagram_than_the_docs_hold():
    planted = _replaced(STAGES, stages.COMPLETION, stops=False)
    drawn = {page: block((ROOT / page).read_text(), "stages") for page in ("docs/updates.md", "README.md")}
    assert drawn["docs/updates.md"] == body(stages.timeline())
    assert body(stages.timeline(planted)) != drawn["docs/updates.md"]
    renamed = _replaced(STAGES, stages.SNAPSHOT, name="backup")
    assert drawn["README.md"] == body(stages.short_timeline())
    assert body(stages.short_timeline(renamed)) != drawn["README.md"]
