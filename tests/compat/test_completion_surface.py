"""The frozen hand-over surface: an updater of an older release writes a request and runs
``python -m services.updater.completion REQUEST`` from the NEW tree. Every request schema
pinned here must keep being read, by that entry module name."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from services.updater.handoff import ENTRY_MODULE, SUPPORTED_REQUEST_SCHEMAS, Request
from tests.conftest import ROOT, python_env

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
        [sys.executable, "-m", ENTRY_MODULE, str(copy), "--check"], cwd=ROOT, env=python_env(), capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_an_unknown_schema_is_refused_by_the_entry_module(tmp_path):
    data = json.loads(PINNED[-1].read_text())
    data["schema"] = max(SUPPORTED_REQUEST_SCHEMAS) + 1
    path = tmp_path / "future.json"
    path.write_text(json.dumps(data))
    done = subprocess.run(
        [sys.executable, "-m", ENTRY_MODULE, str(path), "--check"], cwd=ROOT, env=python_env(), capture_output=True, timeout=60
    )
    assert done.returncode == 2
    assert b"schema" in done.stderr
