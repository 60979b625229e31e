"""What the reporter checks against the platform's own process table before forwarding.

- **Start identity**: the reporting pid must still be the process that started at the
  reported start time (``/proc/<pid>/stat`` on Linux, psutil elsewhere), so a recycled pid is
  never taken for the reporter.
- **Launch identity**: only the session's PTY root (the process started from the ``hermes``
  entrypoint) may set the native recovery reference, and only while it still runs the
  interpreter image and entry script the launcher froze: a claim from another process is
  ``not_pty_root``, from another image ``image_mismatch``, from another script
  ``cmdline_mismatch``. The other reports of that process still flow.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from shared.hook_reports import Report
from shared.identity import process_identity


@dataclass(frozen=True)
class ProcessView:
    """What the process table says of a pid: its executable image, its argv and its cwd."""

    exe: str | None
    cmdline: list[str] | None
    cwd: str | None = None


def read_process(pid: int) -> ProcessView:
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            return ProcessView(process.exe() or None, process.cmdline() or None, process.cwd() or None)
    except (psutil.Error, OSError):
        return ProcessView(None, None)


def identity_refusal(report: Report) -> str | None:
    """None when the reporting process is the one that started at ``report.start_time``."""
    now = process_identity(report.pid)
    if now is None:
        return "process_gone"
    if now.start_time != report.start_time:
        return "identity_mismatch"  # the pid was recycled, or the start time forged
    return None


def launch_refusal(report: Report, read: Callable[[int], ProcessView] = read_process) -> str | None:
    """For a native id claim: None when the PTY root, still on its launch image and script, sent it."""
    launch = report.launch
    if launch is None:
        return None
    if launch.root_pid is None or report.pid != launch.root_pid:
        return "not_pty_root"
    seen = read(report.pid)
    if launch.exe is None or seen.exe is None or not _same_file(seen.exe, launch.exe):
        return "image_mismatch"
    # The shebang interpreter runs the script itself: argv is [interpreter, script, ...].
    script = seen.cmdline[1] if seen.cmdline and len(seen.cmdline) > 1 else None
    if launch.script is None or script is None or not _same_file(script, launch.script, seen.cwd):
        return "cmdline_mismatch"
    return None


def _same_file(seen: str, frozen: str, cwd: str | None = None) -> bool:
    """Whether two paths name one file; ``seen`` is resolved from the process's own cwd."""
    if not os.path.isabs(seen):
        if cwd is None:
            return False
        seen = os.path.join(cwd, seen)
    try:
        return os.path.realpath(seen) == os.path.realpath(frozen)
    except (OSError, ValueError):
        return False
