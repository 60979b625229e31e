"""The fleet view as JSON lines (``hermes mesh top --json``), read with a bound."""

from __future__ import annotations

import json
import select
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import HERMES
from tests.support.processes import ROOT, python_env

GIVE_UP = 30.0  # a loose bound on one change: the view surveys a down profile every 2 s


def start_view(root: Path) -> subprocess.Popen[bytes]:
    """The view, its stdout unbuffered: a line read never reads ahead of what ``select`` sees."""
    return subprocess.Popen(
        [*HERMES, "mesh", "top", "--json"],
        cwd=ROOT,
        env=python_env(HERMES_HOME=str(root)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
    )


def next_row(view: subprocess.Popen[bytes], pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The next gateway line ``pred`` takes; the test fails after ``GIVE_UP`` seconds without one."""
    assert view.stdout is not None
    deadline = time.monotonic() + GIVE_UP
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([view.stdout], [], [], left)[0]:
            break
        line = json.loads(view.stdout.readline())
        if line["type"] == "gateway" and pred(line):
            return line
    pytest.fail("the view never showed such a row")
