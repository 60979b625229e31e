"""One way to run the ``hermes`` CLI as a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from tests.support.processes import ROOT, python_env

HERMES = (sys.executable, "-m", "hermes_cli.main")  # the argv of ``hermes``, before its arguments
# A real CURVE public key (made by zmq.curve_keypair) that starts with "-", as one in 85 does:
# the parser must take it as the key, not as an option.
DASHED_PUBLIC_KEY = "-9:atZ#@^H1bQ?!NtjJq8G%q.UO=COFAB%KnB[.H"


def hermes(
    *args: str,
    home: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    env_extra: Mapping[str, str] | None = None,
    cwd: Path = ROOT,
    stdin: int | IO[Any] | None = subprocess.DEVNULL,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``hermes ARGS`` in ``cwd``: its exit code, stdout and stderr, as text.

    The environment is ``env`` (default: this process's, running this checkout), with
    ``HERMES_HOME`` set to ``home`` when given and ``env_extra`` on top. Standard input is
    ``stdin`` (default: nothing, never the test runner's own).
    """
    environment = dict(python_env() if env is None else env)
    if home is not None:
        environment["HERMES_HOME"] = str(home)
    environment.update(env_extra or {})
    return subprocess.run(
        [*HERMES, *args],
        cwd=cwd,
        env=environment,
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def hermes_json(*args: str, **options: Any) -> tuple[int, Any]:
    """``hermes ARGS --json`` (the options are ``hermes``'s): its exit code and document."""
    done = hermes(*args, "--json", **options)
    try:
        return done.returncode, json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(
            f"hermes {' '.join(args)} --json printed no document: {done.stdout!r} {done.stderr!r}"
        ) from None
