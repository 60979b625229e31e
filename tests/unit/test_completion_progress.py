"""The running completion's progress: the record it keeps beside its result, read back only
whole and only for its own update; the heartbeat that keeps it fresh; and how the updater
waiting on it passes it on and holds each step to its bound."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from services.updater import completion_child, heartbeat
from services.updater.completion_contract import STEP_SLACK, Request, StepProgress, progress_path, read_progress
from services.updater.receipt import Receipt
from services.updater.stages import COMPLETION
from shared.identity import current_identity

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def _request(tmp_path: Path) -> Request:
    return Request.new(
        update_id="20261203T120000Z-ab12",
        root=str(tmp_path),
        install_root=str(tmp_path),
        before="a" * 40,
        after="b" * 40,
        result_path=str(tmp_path / "20261203T120000Z-ab12.result.json"),
    )


def _write(request: Request, progress: StepProgress, **changes: object) -> None:
    record = {**progress.to_dict(request.update_id), **changes}
    progress_path(request.result_path).write_text(json.dumps(record))


def test_the_progress_lives_beside_the_result():
    assert progress_path("/r/logs/updates/x.result.json") == Path("/r/logs/updates/x.progress.json")


def test_the_progress_reads_back_as_written(tmp_path):
    request = _request(tmp_path)
    progress = StepProgress(4242, "restart", 600.0, NOW, NOW + timedelta(seconds=2))
    _write(request, progress)
    assert read_progress(progress_path(request.result_path), request) == progress


@pytest.mark.parametrize(
    "changes",
    [
        {"update_id": "20261203T110000Z-cd34"},
        {"schema": 2},
        {"pid": 0},
        {"pid": True},
        {"step": " "},
        {"step": None},
        {"bound": 0},
        {"bound": True},
        {"bound": "600"},
        {"started_at": "2026-12-03T12:00:00"},
        {"at": "soon"},
    ],
)
def test_a_progress_of_another_update_or_of_any_other_shape_is_none(tmp_path, changes):
    request = _request(tmp_path)
    _write(request, StepProgress(4242, "restart", 600.0, NOW, NOW), **changes)
    assert read_progress(progress_path(request.result_path), request) is None


def test_no_progress_yet_or_a_torn_one_is_none(tmp_path):
    request = _request(tmp_path)
    path = progress_path(request.result_path)
    assert read_progress(path, request) is None
    path.write_text('{"schema": 1, "update_')
    assert read_progress(path, request) is None


def test_the_heartbeat_says_each_step_at_once_and_then_keeps_saying_it(tmp_path, monkeypatch):
    monkeypatch.setattr(heartbeat, "EVERY", 0.05)
    request = _request(tmp_path)
    path = progress_path(request.result_path)
    with heartbeat.Heartbeat(path, request.update_id) as beat:
        assert read_progress(path, request) is None  # nothing before the first step
        beat.enter("migrations", 30)
        first = read_progress(path, request)
        assert first is not None and (first.step, first.bound) == ("migrations", 30.0)
        for _ in range(200):
            later = read_progress(path, request)
            if later is not None and later.at > first.at:
                break
            time.sleep(0.01)
        assert later is not None and later.at > first.at and later.started_at == first.started_at


class _Child:
    """What the watch needs of the updater's side: its events, its receipt and its writes."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, object]] = []
        self.receipt = Receipt.begin("20261203T120000Z-ab12", ["hermes", "update"], current_identity(), {})
        self.saves = 0

    def emit(self, stage, status, detail=None) -> None:
        self.events.append((stage.name, status, detail))

    def save(self) -> None:
        self.saves += 1


def test_the_watch_passes_each_step_on_and_kills_only_past_its_bound_and_slack(tmp_path):
    request, child = _request(tmp_path), _Child()
    watch = completion_child._Watch(child, 4242, request)  # type: ignore[arg-type]

    assert watch.past_bound() is False and child.events == []  # nothing said yet
    migrations = StepProgress(4242, "migrations", 5.0, NOW, NOW)
    _write(request, migrations)
    assert watch.past_bound() is False
    assert child.events == [(COMPLETION.name, "migrations", "0 s of 5 s")]
    assert child.receipt["completion"]["progress"]["step"] == "migrations" and child.saves == 1

    watch.step_seen -= 5.0 + STEP_SLACK - 1  # within the slack: its own stop comes first
    assert watch.past_bound() is False and watch.overran is None
    watch.step_seen -= 2
    assert watch.past_bound() is True and watch.overran == migrations

    restart = StepProgress(4242, "restart", 5.0, NOW + timedelta(seconds=40), NOW + timedelta(seconds=40))
    _write(request, restart)  # a new step starts its own clock
    assert watch.past_bound() is False and child.events[-1] == (COMPLETION.name, "restart", "0 s of 5 s")


def test_a_completion_that_never_says_its_step_is_held_to_the_whole_bound(tmp_path):
    watch = completion_child._Watch(_Child(), 4242, _request(tmp_path))  # type: ignore[arg-type]
    watch.started -= completion_child.TIMEOUT - 1
    assert watch.past_bound() is False
    watch.started -= 2
    assert watch.past_bound() is True and watch.overran is None
