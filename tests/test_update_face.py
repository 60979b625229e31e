"""The updater's public face (``services.updater``): every name it shows resolves, and
importing it costs a command's start-up no more than the owed-restart check needs."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import services.updater as updater
from tests.support.processes import ROOT, python_env


def test_every_public_name_is_the_one_its_module_defines():
    for name in updater.__all__:
        value = getattr(updater, name)
        if name == "ops":
            assert value is importlib.import_module("services.updater.ops")
        else:
            assert getattr(importlib.import_module(value.__module__), name) is value, name


def test_a_name_the_face_does_not_show_is_not_there():
    assert not hasattr(updater, "run_update")  # private to the updater process


def test_importing_the_face_loads_only_the_obligations():
    program = (
        "import json, sys; import services.updater; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('services.', 'shared.')) "
        "or m in ('trio', 'zmq', 'httpx', 'psutil', 'dataclasses'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, env=python_env(), timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        "services.updater",
        "services.updater.obligations",
        "shared.errors",
        "shared.home_env",
    ]
