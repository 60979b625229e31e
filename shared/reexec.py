"""Becoming a fresh interpreter of the code now on disk, keeping the pid.

A long-lived process never imports pulled code into the interpreter that runs the old
(mixed ``sys.modules`` is how stale processes happen): it replaces itself instead. The pid
stays, so a supervisor keeps tracking it. Call only after every socket is closed and every
lock released but one made inheritable to stay held: ``exec`` keeps inheritable descriptors.
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger(__name__)


def reexec_module(module: str, *args: str) -> None:
    """``exec`` ``python -m module args``; does not return."""
    import zmq

    zmq.Context.instance().term()  # the sockets are closed; flush what they still hold
    argv = [sys.executable, "-m", module, *args]
    log.info("re-executing: %s", " ".join(argv))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)
