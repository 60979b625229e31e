"""The gateway host: every listed profile's gateway of an install, forked from one fork server
that imported the gateway's code once, supervised as a supervisord program would be, and moved
onto new code by a ``roll``. Its contract (control protocol, errors, command line) is
``fleet.supervisors.host``.

``python -m services.gateway_host --profiles a,b,...`` runs it on the root home (``main``);
``host`` is the process, ``forkserver`` the interpreter it forks from, ``frames`` the pipe
between them, ``supervision`` the rule applied to each exit.
"""
