import sys

from shared.worker_main import worker_main

sys.exit(
    worker_main(
        "handoff_retry",
        "services.handoff_retry.app:HandoffWorker",
        "Run the install's guest-handoff retry worker.",
        "a handoff retry worker",
    )
)
