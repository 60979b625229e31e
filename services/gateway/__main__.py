from services.gateway.drained_exit import exit_now
from services.gateway.main import main

# Whatever the exit (drained for a restart, stopped, refused), the gateway has written its state
# and closed its sockets by now: it ends without the interpreter's teardown.
exit_now(main())
