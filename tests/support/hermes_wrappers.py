"""A ``hermes`` executable the installer's ``--hermes-bin`` can name, made for one test.

The installer runs the probe in the Python beside the executable, so the wrapper sits in a
directory shaped like a virtual environment (``bin/hermes``, ``bin/python3``, ``pyvenv.cfg``,
``lib``) whose Python is the given environment's, with its packages. The wrapper is a real
file (never a link), private to its owner, and runs the given shell text with the arguments.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from tests.support import real_hermes

VERSION_LINE = "Hermes Agent v0.20.0 (2026.8.3)"


def wrapper(directory: Path, venv: Path, body: str) -> Path:
    """``directory/bin/hermes`` running ``body`` (``/bin/sh``), beside ``venv``'s Python."""
    (directory / "bin").mkdir(parents=True)
    shutil.copyfile(venv / "pyvenv.cfg", directory / "pyvenv.cfg")
    (directory / "lib").symlink_to(venv / "lib")
    (directory / "bin" / "python3").symlink_to(os.path.realpath(venv / "bin" / "python3"))
    path = directory / "bin" / "hermes"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o700)
    return path


def answering_version(directory: Path, venv: Path, real: Path, line: str = VERSION_LINE) -> Path:
    """A wrapper that answers ``--version`` with ``line`` and hands everything else to ``real``,
    offline: in a network namespace of its own, as every real Hermes run here is."""
    offline = [shutil.which(word) or word for word in real_hermes.offline_prefix()[:1]]
    offline += real_hermes.offline_prefix()[1:]
    return wrapper(
        directory,
        venv,
        f'if [ "$1" = --version ]; then printf "%s\\n" {shlex.quote(line)}; exit 0; fi\n'
        f'exec {shlex.join([*offline, str(real)])} "$@"',
    )
