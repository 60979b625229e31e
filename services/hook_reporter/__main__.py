import sys

from shared.worker_main import worker_main

sys.exit(
    worker_main(
        "hook_reporter",
        "services.hook_reporter.app:HookReporter",
        "Run the install's operator hook reporter (daemon endpoint: POHUNEK_DAEMON_ENDPOINT).",
        "a hook reporter",
    )
)
