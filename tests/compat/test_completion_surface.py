"""The frozen hand-over surface: an updater of an older release writes a request and runs
``python -m services.updater.completion REQUEST`` from the NEW tree. Every request schema
pinned here must keep being read, by that entry module name. The other way round, the updater
of an older release reads the result this release's completion writes: the pinned results
must keep being taken whole, and every key they hold must keep being written."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from services.updater.completion_contract import (
    ENTRY_MODULE,
    RESULT_SCHEMA,
    SUPPORTED_REQUEST_SCHEMAS,
    UNKNOWN_SPEC,
    Request,
    check_result,
    read_result,
)
from tests.support.processes import ROOT, python_env
from tests.support.updater import on_this_tree

PINNED = sorted(Path(__file__).parent.glob("completion_request_v*.json"))


def test_every_supported_schema_is_pinned():
    assert {json.loads(p.read_text())["schema"] for p in PINNED} == set(SUPPORTED_REQUEST_SCHEMAS)
    assert ENTRY_MODULE == "services.updater.completion"


@pytest.mark.parametrize("pinned", PINNED, ids=lambda p: p.name)
def test_pinned_requests_are_read_by_this_release(pinned, tmp_path):
    request = Request.read(pinned)
    assert request.update_id and request.nonce and request.result_path
    copy = tmp_path / pinned.name
    shutil.copy(pinned, copy)
    done = subprocess.run(
        [sys.executable, "-m", ENTRY_MODULE, str(copy), "--check"],
        cwd=ROOT,
        env=python_env(),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_an_unknown_schema_is_refused_by_the_entry_module(tmp_path):
    data = json.loads(PINNED[-1].read_text())
    data["schema"] = max(SUPPORTED_REQUEST_SCHEMAS) + 1
    path = tmp_path / "future.json"
    path.write_text(json.dumps(data))
    done = subprocess.run(
        [sys.executable, "-m", ENTRY_MODULE, str(path), "--check"],
        cwd=ROOT,
        env=python_env(),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert b"schema" in done.stderr


def test_a_schema_1_request_reads_with_fallbacks_and_schema_2_carries_plan_and_spec():
    [v1] = [p for p in PINNED if p.name == "completion_request_v1.json"]
    [v2] = [p for p in PINNED if p.name == "completion_request_v2.json"]
    old = Request.read(v1)
    assert (old.schema, old.plan, old.dependency_spec) == (1, None, UNKNOWN_SPEC)  # the completion diffs commits
    new = Request.read(v2)
    assert new.schema == 2 and new.plan["install"]["kind"] == "git"
    assert new.dependency_spec == json.loads(v2.read_text())["dependency_spec"]


# --- the result: written by this release's completion, read by an older release's updater -----

RESULTS = sorted(Path(__file__).parent.glob("completion_result_v*.json"))


def test_the_result_schema_is_pinned():
    assert {json.loads(p.read_text())["schema"] for p in RESULTS} == {RESULT_SCHEMA}


@pytest.mark.parametrize("pinned", RESULTS, ids=lambda p: p.name)
def test_a_pinned_result_is_read_and_accepted_by_the_updater(pinned, tmp_path):
    from tests.support.updater import bare_run

    run = bare_run(tmp_path)
    request = Request.read(PINNED[-1])  # the pinned results answer the pinned request
    path = tmp_path / "result.json"
    shutil.copy(pinned, path)
    result = read_result(path, request)
    assert result is not None
    run.completion.accept(result)
    sample = json.loads(pinned.read_text())
    receipt = run.receipt.to_dict()
    assert receipt["completion"] == sample["completion"]
    taken = [(s["name"], s["ok"], datetime.fromisoformat(s["at"])) for s in receipt["steps"]]
    assert taken == [(s["name"], s["ok"], datetime.fromisoformat(s["at"])) for s in sample["steps"]]
    assert [(s["name"], datetime.fromisoformat(s["at"])) for s in receipt["skips"]] == [
        (s["name"], datetime.fromisoformat(s["at"])) for s in sample["skips"]
    ]
    assert receipt["followups"] == sample["followups"]
    assert run._after()["code_version"] == sample["completion"]["code_version"]


def test_this_releases_completion_writes_what_the_pinned_result_holds(tmp_path):
    from services.updater.completion import Completion

    result = Completion(on_this_tree(tmp_path, "compat")).run()
    check_result(result)
    pinned = json.loads(RESULTS[-1].read_text())
    assert set(pinned) <= set(result)
    assert set(pinned["completion"]) <= set(result["completion"])
    assert [s["name"] for s in result["skips"] if s["name"] == "dependencies"] == ["dependencies"]
