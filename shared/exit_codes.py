"""The exit codes a hermes-mesh process ends with and its supervisors act on (sysexits.h names).

The ``hermes`` command's own codes (0 success, 1 failure, 2 refused, 130 interrupted) are
the CLI's; these are a long-running process's, read by whoever starts it again.
"""

OK = 0
# EX_CANTCREAT: the endpoint is held by a live process of the same service; the first one stays.
DUPLICATE = 73
# EX_TEMPFAIL: drained for a planned restart; start me again (systemd RestartForceExitStatus,
# with SuccessExitStatus so it is not logged as a failure; supervisord autorestart, launchd
# KeepAlive).
PLANNED_RESTART = 75
# EX_CONFIG: a broken configuration, which a restart loop would not fix: supervisors are told
# not to restart it.
CONFIG = 78
