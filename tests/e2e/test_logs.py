"""One log set-up for every process: the level named is the level logged, and a bad one logs
at INFO and says so."""

from __future__ import annotations

import subprocess
import sys

from shared import exit_codes
from tests.support.processes import ROOT, python_env

PROGRAM = (
    "import logging\n"
    "from shared import logs\n"
    "logs.configure('probe')\n"
    "logging.getLogger('t').debug('a debug line')\n"
    "logging.getLogger('t').info('an info line')\n"
    "logging.getLogger('httpx').info('a request line')\n"
)


def run_probe(level: str | None) -> subprocess.CompletedProcess:
    env = python_env()
    env.pop("HERMES_LOG_LEVEL", None)
    if level is not None:
        env["HERMES_LOG_LEVEL"] = level
    return subprocess.run(
        [sys.executable, "-c", PROGRAM], env=env, cwd=ROOT, capture_output=True, text=True, timeout=30
    )


def test_the_level_named_is_the_level_logged():
    result = run_probe("debug")
    assert result.returncode == 0
    assert " probe[" in result.stderr and "] DEBUG a debug line" in result.stderr
    assert "a request line" not in result.stderr  # HTTP libraries stay at WARNING


def test_no_level_logs_info():
    result = run_probe(None)
    assert "] INFO an info line" in result.stderr
    assert "a debug line" not in result.stderr


def test_a_bad_level_logs_info_and_says_so():
    result = run_probe("loud")
    assert result.returncode == 0
    assert "HERMES_LOG_LEVEL='loud' is not a log level; logging at INFO" in result.stderr
    assert "] INFO an info line" in result.stderr
    assert "a debug line" not in result.stderr


def test_a_gateway_with_a_bad_level_still_starts_its_checks(tmp_path):
    env = python_env(HERMES_HOME=str(tmp_path / "hermes"), HERMES_LOG_LEVEL="verbose")
    result = subprocess.run(
        [sys.executable, "-m", "services.gateway", "--profile", "ghost"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == exit_codes.CONFIG  # the missing profile, not the level, ends it
    assert "no profile named 'ghost'" in result.stderr
