"""The Nous auth worker: device-code sign-in as a stream of typed states, and token keepalive.

Its face is what a client needs, and light (no trio, no httpx, no zmq): the control protocol
(``ops``) and the sign-in's states, each carrying the words a surface shows for it. The
process is ``python -m services.auth_worker``.
"""

from services.auth_worker import ops
from services.auth_worker.states import (
    TERMINAL_STATES,
    AlreadySignedIn,
    Cancelled,
    Code,
    Completed,
    Failed,
    Reason,
    Retrying,
    SignInState,
    TimedOut,
    Waiting,
    WorkerLost,
    worker_lost,
)

__all__ = [
    "TERMINAL_STATES",
    "AlreadySignedIn",
    "Cancelled",
    "Code",
    "Completed",
    "Failed",
    "Reason",
    "Retrying",
    "SignInState",
    "TimedOut",
    "Waiting",
    "WorkerLost",
    "ops",
    "worker_lost",
]
