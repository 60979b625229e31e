"""A gateway process's end, once it has finished its work: without the interpreter's teardown.

A gateway that has drained has written its state file, closed its sockets and released its
locks; all the interpreter would still do at exit is tear its modules down and collect them,
for a gateway about 0.4 s of CPU after its last exit handler, and an update ends a whole
fleet's gateways at once. So the exit duties are done here, in order, and the process then
ends with ``os._exit``: the zmq context is terminated (what the closed sockets still hold goes
out, within their linger), the ``atexit`` handlers run (the hook client's socket leaves with
its linger, logging flushes and closes its handlers), and the standard streams are flushed.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn

# How long the zmq context's termination may wait for the closed sockets' linger: longer than
# any linger a socket closes with, and the exit goes ahead past it.
TERM_SECONDS = 10.0


def exit_now(code: int) -> NoReturn:
    """Do every exit duty of this process, then end it with ``code``, skipping the teardown.
    Call only once every socket is closed and every lock released."""
    _terminate_zmq()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream has nothing left to say
            pass
    os._exit(code)


def _terminate_zmq() -> None:
    """Terminate the shared zmq context, if this process made one, within ``TERM_SECONDS``."""
    zmq = sys.modules.get("zmq")
    if zmq is None:
        return
    # Before the atexit handlers: once they ran, pyzmq leaves a socket dropped unclosed open,
    # and the termination would wait for it.
    terminating = threading.Thread(target=zmq.Context.instance().term, name="zmq-term", daemon=True)
    terminating.start()
    terminating.join(TERM_SECONDS)
