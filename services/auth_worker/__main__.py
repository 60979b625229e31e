import sys

from shared.worker_main import worker_main

sys.exit(
    worker_main(
        "auth_worker",
        "services.auth_worker.app:AuthWorker",
        "Run the install's Nous auth worker (sign-in, keepalive).",
        "an auth worker",
    )
)
