"""Starting the completion, in-process: what the updater asks (request schema 2), how the
completion decides from the digest whether the dependency spec changed, and how the updater
takes, or refuses, what comes back. No completion process is started: ``Popen`` is replaced."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from services.updater import completion_child, obligations
from services.updater.completion import spec_changed
from services.updater.completion_contract import (
    UNKNOWN_SPEC,
    BadResult,
    Request,
    dependency_digest,
    read_result,
    result_matrix,
)
from services.updater.verify import MalformedRow, MatrixRow
from tests.support import COMPAT
from tests.support.updater import asking, bare_run

OLD, NEW = "a" * 40, "b" * 40


def pinned_answer(request: Request) -> dict:
    """The pinned result, as the answer to ``request``."""
    result = json.loads((COMPAT / "completion_result_v1.json").read_text())
    return {**result, "update_id": request.update_id, "nonce": request.nonce}


class Completions:
    """Stands in for ``subprocess.Popen``: each "completion" answers at once with what
    ``answer`` makes of its request (None: no result at all)."""

    def __init__(self, answer=pinned_answer):
        self.answer = answer
        self.requests: list[dict] = []
        self.kwargs: list[dict] = []

    def __call__(self, argv, **kwargs):
        path = Path(argv[-1])
        self.requests.append(json.loads(path.read_text()))
        self.kwargs.append(kwargs)
        request = Request.read(path)
        result = self.answer(request)
        if result is not None:
            Path(request.result_path).write_text(json.dumps(result))
        return SimpleNamespace(pid=4343, returncode=0, poll=lambda: 0, wait=lambda timeout=None: 0)


# --- request schema 2: the plan and the dependency spec's digest from before the swap ------------


def test_the_request_carries_the_plan_and_the_spec_digest_from_before_the_swap(tmp_path, monkeypatch):
    run = bare_run(tmp_path)
    spec = run.install_root / "pyproject.toml"
    spec.write_text("[project]\nname = 'old'\n")
    run.debts.dependency_spec = run.spec_digest()  # at plan time
    spec.write_text("[project]\nname = 'new'\n")  # the swap
    completions = Completions()
    monkeypatch.setattr(completion_child.subprocess, "Popen", completions)
    run.debts.arm(OLD, NEW)
    # What the completion owes carries the digest, for a retry after nothing moved.
    assert obligations.read_completion(run.root)["dependency_spec"] == run.debts.dependency_spec
    run.complete(OLD, NEW)
    [sent] = completions.requests
    assert sent["schema"] == 2
    assert sent["plan"]["install"] == {"kind": "git", "in_place": True}
    assert "hunter2" not in json.dumps(sent["plan"])  # the request file is no place for a secret
    assert sent["dependency_spec"] == run.debts.dependency_spec != dependency_digest(run.install_root)
    assert completions.kwargs[0]["start_new_session"] is True  # its process group is its own


def test_a_retry_sends_the_owed_updates_digest_and_an_older_obligation_sends_none(tmp_path, monkeypatch):
    run = bare_run(tmp_path)
    completions = Completions()
    monkeypatch.setattr(completion_child.subprocess, "Popen", completions)
    run.debts.dependency_spec = dependency_digest(run.install_root)  # this run's: nothing moved
    run.debts.pending = {"update_id": "u0", "before": OLD, "after": NEW, "dependency_spec": "c" * 64, "attempt": None}
    run.complete(run.debts.pending["before"], NEW)
    assert completions.requests[-1]["dependency_spec"] == "c" * 64
    run.debts.pending = {"update_id": "u0", "before": OLD, "after": NEW, "attempt": None}  # armed by an older release
    run.complete(run.debts.pending["before"], NEW)
    assert "dependency_spec" not in completions.requests[-1]
    request = Request.read(Path(str(run.receipt_path.with_suffix("")) + ".request.json"))
    assert request.dependency_spec == UNKNOWN_SPEC  # the completion diffs the commits


def test_the_digest_from_before_the_swap_decides_when_the_request_carries_it(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    digest = dependency_digest(tmp_path)
    assert not spec_changed(asking(dependency_spec=digest), tmp_path)
    assert spec_changed(asking(dependency_spec="0" * 64), tmp_path)
    assert spec_changed(asking(dependency_spec=None), tmp_path)  # there was none before the swap
    (tmp_path / "pyproject.toml").unlink()
    assert not spec_changed(asking(dependency_spec=None), tmp_path)
    assert spec_changed(asking(dependency_spec=digest), tmp_path)


# --- the result: checked whole at the boundary --------------------------------------------------


def _broken(**changes):
    def answer(request: Request) -> dict:
        result = pinned_answer(request)
        for key, value in changes.items():
            result[key] = value(result) if callable(value) else value
        return result

    return answer


MALFORMED = {
    "steps-not-a-list": _broken(steps="restart"),
    "ok-not-a-bool": _broken(steps=lambda r: [{**r["steps"][0], "ok": "yes"}]),
    "step-without-a-name": _broken(steps=lambda r: [{"ok": True}]),
    "step-time-without-a-zone": _broken(steps=lambda r: [{**r["steps"][0], "at": "2026-11-30T00:00:03"}]),
    "skip-without-a-reason": _broken(skips=[{"name": "migrations"}]),
    "followup-not-an-object": _broken(followups=["dependencies"]),
    "restart-without-ok": _broken(restart=[{"profile": "default"}]),
    "fleet-row-without-a-verdict": _broken(
        fleet=lambda r: [{k: v for k, v in r["fleet"][0].items() if k != "verdict"}]
    ),
    "fleet-row-pid-not-a-number": _broken(fleet=lambda r: [{**r["fleet"][0], "pid": "4100"}]),
    "fleet-row-not-an-object": _broken(fleet=["default"]),
    "no-pid": _broken(completion={"code_sha": NEW}),
    "another-schema": _broken(schema=99),
}


@pytest.mark.parametrize("answer", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_result_is_taken_as_none_and_the_completion_stays_owed(answer, tmp_path, monkeypatch):
    run = bare_run(tmp_path)
    monkeypatch.setattr(completion_child.subprocess, "Popen", Completions(answer))
    run.debts.arm(OLD, NEW)
    assert run.complete(OLD, NEW) is None
    receipt = run.receipt.to_dict()
    [owed] = [f for f in receipt["followups"] if f["step"] == "completion"]
    assert "not usably" in owed["reason"]
    assert receipt["completion"] is None and receipt["restart"] is None  # nothing of it was taken
    assert not {"dependencies", "restart", "verify"} & {s["name"] for s in receipt["steps"]}
    assert obligations.read_completion(run.root)["update_id"] == "u1"


def test_read_result_ignores_what_is_not_for_this_request_and_refuses_a_bad_shape(tmp_path):
    request = Request.read(COMPAT / "completion_request_v2.json")
    path = tmp_path / "result.json"
    assert read_result(path, request) is None  # no answer
    path.write_text("{torn")
    assert read_result(path, request) is None
    path.write_text(json.dumps({**pinned_answer(request), "nonce": "0" * 32}))
    assert read_result(path, request) is None  # someone else's
    path.write_text(json.dumps(MALFORMED["ok-not-a-bool"](request)))
    with pytest.raises(BadResult):
        read_result(path, request)


def test_a_results_fleet_rows_are_read_whole_and_a_malformed_one_is_named_by_its_field():
    pinned = json.loads((COMPAT / "completion_result_v1.json").read_text())
    rows = result_matrix(pinned)
    # The frozen shape, key for key, and health, which a completion from before it leaves out.
    assert [row.to_dict() for row in rows] == [{**row, "health": None} for row in pinned["fleet"]]
    assert [(row.profile, row.verdict) for row in rows] == [("default", "current"), ("coder", "down")]
    # Another release's completion may leave out what only describes the gateway.
    [bare] = result_matrix({"fleet": [{"profile": "a", "verdict": "stale", "running": OLD, "expected": NEW}]})
    assert (bare.supervisor, bare.pid, bare.state, bare.source) == (None, None, None, None)
    assert bare.health is None  # a completion from before health says none
    unhealthy = {"state": "unhealthy", "why": "its probe turn failed (internal_error)"}
    assert MatrixRow.from_dict({**pinned["fleet"][0], "health": unhealthy}, "row").health == unhealthy
    malformed_health = ({"state": "fine", "why": None}, {"state": "healthy"}, {"state": "unknown", "why": 3}, "healthy")
    for field, value in (
        ("verdict", None),
        ("profile", " "),
        ("expected", 7),
        ("pid", True),
        ("state", 1),
        *(("health", health) for health in malformed_health),
    ):
        row = {**pinned["fleet"][0], field: value}
        with pytest.raises(MalformedRow) as refused:
            MatrixRow.from_dict(row, "row")
        assert refused.value.detail == {"field": field} and f"row.{field} " in refused.value.message
        with pytest.raises(BadResult, match=rf"result fleet\[1\]\.{field} "):
            result_matrix({"fleet": [pinned["fleet"][1], row]})


def test_an_accepted_result_keeps_the_completions_own_times_and_code(tmp_path, monkeypatch):
    run = bare_run(tmp_path)
    monkeypatch.setattr(completion_child.subprocess, "Popen", Completions())
    run.complete(OLD, NEW)
    steps = {s["name"]: s["at"] for s in run.receipt["steps"]}
    assert steps["restart"].startswith("2026-11-30T00:00:09")
    assert [s["at"][:19] for s in run.receipt["skips"]] == ["2026-11-30T00:00:04"]
    assert run._after() == {"code_sha": "2" * 40, "code_version": "0.2.0"}  # what the completion imported


def test_without_a_result_the_code_version_is_read_from_the_new_trees_files(tmp_path):
    run = bare_run(tmp_path)
    version = run.install_root / "shared" / "version.py"
    version.parent.mkdir()
    version.write_text('"""v"""\n\n__version__ = "7.3.1"\n')
    assert run._after()["code_version"] == "7.3.1"
    version.unlink()
    (run.install_root / "pyproject.toml").write_text('[project]\nname = "hermes-mesh"\nversion = "7.3.2"\n')
    assert run._after()["code_version"] == "7.3.2"


def test_the_completions_exit_is_waited_for_not_polled(tmp_path, monkeypatch):
    completions = Completions()

    def exiting(argv, **kwargs):
        child = completions(argv, **kwargs)

        def poll():
            raise AssertionError("the completion was polled")

        return SimpleNamespace(pid=child.pid, returncode=0, poll=poll, wait=child.wait)

    run = bare_run(tmp_path)
    monkeypatch.setattr(completion_child.subprocess, "Popen", exiting)
    assert run.complete(OLD, NEW)["update_id"] == "u1"
    assert [s["name"] for s in run.receipt["steps"]][-1] == "verify"


# --- a completion that cannot be started ---------------------------------------------------------


def test_a_completion_that_cannot_be_started_is_owed_and_the_update_succeeds(tmp_path, monkeypatch):
    run = bare_run(tmp_path)

    def cannot(*args, **kwargs):
        raise OSError(errno.EMFILE, "Too many open files")

    def stages() -> None:  # the tree moved; then the completion cannot be spawned
        run.receipt.set("plan", {"install": {"kind": "git"}})
        run.debts.arm(OLD, NEW)
        run.committed = True
        run.report_completion(run.complete(OLD, NEW))

    monkeypatch.setattr(completion_child.subprocess, "Popen", cannot)
    run._stages = stages  # type: ignore[method-assign]
    assert run.run() == 0
    receipt = json.loads(run.receipt_path.read_text())
    assert (receipt["outcome"], receipt["exit_code"]) == ("success", 0)
    [owed] = receipt["followups"]
    assert owed["step"] == "completion" and "could not be started" in owed["reason"]
    assert obligations.read_completion(run.root)["update_id"] == "u1"  # the next update runs it
