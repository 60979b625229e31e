"""How ``hermes`` fails: never with a traceback. A new user's home is made on first write, an
unexpected error is one line with its detail in a log, and a closed stdout ends quietly."""

from __future__ import annotations

import json
import os
import stat
import subprocess

from hermes_cli.crash import LOG_FILE
from tests.support.cli import HERMES, hermes
from tests.support.processes import ROOT, python_env


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.startswith("⚠")]


def test_skin_set_on_a_home_that_does_not_exist_yet_makes_it_private(short_dir):
    home = short_dir / "new" / ".hermes"
    done = hermes("skin", "set", "ares", home=home)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert "skin: ares" in (home / "config.yaml").read_text()


def unexpected(short_dir, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``hermes skin set ares ARGS`` where the profile's home cannot be made (``profiles`` is a
    file): an error no command expects, in a root home that can hold the log."""
    root = short_dir / "root"
    root.mkdir(exist_ok=True)
    (root / "profiles").write_text("")
    return hermes("skin", "set", "ares", *args, home=root / "profiles" / "coder", env_extra=env)


def test_an_unexpected_error_is_one_line_and_a_log_entry(short_dir):
    done = unexpected(short_dir)
    assert done.returncode == 1
    log = short_dir / "root" / LOG_FILE
    assert lines(done.stderr) == [
        f"hermes: skin set failed: not a directory: {short_dir / 'root' / 'profiles'} (details in {log})"
    ]
    assert "Traceback" not in done.stdout + done.stderr and "Error" not in done.stderr
    entry = log.read_text()
    assert "hermes skin set" in entry and "Traceback" in entry and "NotADirectoryError" in entry
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert unexpected(short_dir).returncode == 1
    assert log.read_text().count("Traceback") == 2  # appended, the first one kept


def test_an_unexpected_error_in_json_is_a_typed_document(short_dir):
    done = unexpected(short_dir, "--json")
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "internal_error" and "skin set failed" in error["message"]


def test_hermes_debug_shows_the_traceback(short_dir):
    done = unexpected(short_dir, HERMES_DEBUG="1")
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "NotADirectoryError" in done.stderr
    assert lines(done.stderr)[-1].startswith("hermes: skin set failed: not a directory")


def test_a_closed_stdout_ends_quietly_with_141(short_dir):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte, as after `| head -c 0`
    try:
        done = subprocess.run(
            [*HERMES, "skin", "list", "--json"],
            cwd=ROOT,
            env=python_env(HERMES_HOME=str(short_dir / "home")),
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert (done.returncode, lines(done.stderr)) == (141, [])
