"""Running a supervisor's client binary (``systemctl``, ``launchctl``): no shell, a bounded
timeout, and typed errors; the caller judges the return code."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from fleet.supervisors.errors import SupervisorFailed, SupervisorTimeout, SupervisorUnavailable


def run_client(argv: Sequence[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a supervisor's client (no shell, bounded); the caller judges the return code."""
    try:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False
        )
    except FileNotFoundError:
        raise SupervisorUnavailable(f"{argv[0]} is not installed here", detail={"command": list(argv)}) from None
    except subprocess.TimeoutExpired:
        # The client is gone, but the manager may still carry out the job it was given.
        raise SupervisorTimeout(
            f"{' '.join(argv)} did not finish within {timeout:g}s; the supervisor may still be working on it",
            detail={"command": list(argv), "timeout": timeout},
        ) from None


def command_failed(argv: Sequence[str], result: subprocess.CompletedProcess[str]) -> SupervisorFailed:
    stderr = result.stderr.strip()
    return SupervisorFailed(
        f"{' '.join(argv)} failed (exit {result.returncode}): {stderr or 'no message'}",
        detail={"command": list(argv), "returncode": result.returncode, "stderr": stderr},
    )
