import sys

from shared.operator.protocol import ENDPOINT_ENV
from shared.worker_main import worker_main

sys.exit(
    worker_main(
        "hook_reporter",
        "services.hook_reporter.app:HookReporter",
        f"Run the install's operator hook reporter (daemon endpoint: {ENDPOINT_ENV}).",
        "a hook reporter",
    )
)
