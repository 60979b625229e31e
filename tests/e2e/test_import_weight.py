"""What a command's start-up imports: each light path, run as a fresh process, loads nothing
heavier than it needs (the CLI's light commands, resolving the root home, the updater's face)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.processes import ROOT, python_env


def test_light_commands_import_no_heavy_dependencies(root):
    program = (
        "import sys; from hermes_cli.main import main\n"
        "for argv in (['--version'], ['profile', 'list', '--json']):\n"
        "    try: main(argv)\n"
        "    except SystemExit: pass\n"
        "print('HEAVY', sorted(m for m in ('trio', 'zmq', 'httpx', 'rich', 'msgpack') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, env=python_env(HERMES_HOME=str(root))
    )
    assert "HEAVY []" in result.stdout, result.stdout + result.stderr


def test_resolving_the_root_imports_nothing_heavy():
    program = (
        "import json, sys; from shared import home_env; home_env.root_home(); "
        "print(json.dumps(sorted(m for m in ('dataclasses', 'hashlib', 'shared.homes') if m in sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, env=python_env(), timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


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
