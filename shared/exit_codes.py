"""Every exit code hermes-mesh's commands and processes end with, and only here.

Three readers: a user or a script reads the ``hermes`` command's; the operator plugin reads the
operator CLI's ``call`` (its payload keeps a copy the tests hold equal); a supervisor reads a
long-running process's (sysexits.h names), and acts on them.
"""

OK = 0

# The ``hermes`` command.
FAILED = 1
# Refused before anything changed: a usage error, a bad name, a held lock, a needed confirmation.
REFUSED = 2
# ``hermes gateway health`` and ``hermes mesh health``: the service failed its health check (it
# answered unhealthy, or not at all). 1, because a compose ``healthcheck:`` reads exactly that
# (and reserves 2).
UNHEALTHY = 1
FAILED_TURN = 3  # ``hermes chat``'s ``/fail``: the session ends as a crash, nothing released
INTERRUPTED = 130  # 128 + SIGINT: Ctrl-C, or SIGTERM
STDOUT_CLOSED = 141  # 128 + SIGPIPE: whoever read the output went away

# The operator CLI's ``call``: OK (the daemon answered), FAILED (the daemon or the transport
# refused), REFUSED (the call is malformed), or this one.
POLICY_UNUSABLE = 3
CALL_CODES = frozenset({OK, FAILED, REFUSED, POLICY_UNUSABLE})

# A long-running process, read by its supervisor.
# EX_CANTCREAT: the endpoint is held by a live process of the same service; the first one stays.
DUPLICATE = 73
# EX_TEMPFAIL: drained for a planned restart; start me again (systemd RestartForceExitStatus,
# with SuccessExitStatus so it is not logged as a failure; supervisord autorestart, launchd
# KeepAlive).
PLANNED_RESTART = 75
# EX_CONFIG: a broken configuration, which a restart loop would not fix: supervisors are told
# not to restart it.
CONFIG = 78
