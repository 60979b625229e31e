"""What a service's endpoint lock, as seen from here, says about whether the service runs.

A service takes its endpoint lock before it binds, and the kernel drops it when the service
dies, so the lock answers "does it run?" at once, without waking anybody. That holds only
where the service's home is: a service on another host, or in a container on this host whose
home is on a volume, has no lock file here, and then only its socket can answer. Every caller
that asks the lock first (discovery, drain, the on-demand start) asks it through this one rule.
Where it cannot tell, the service is not this home's to start either (``shared.spawn``).
"""

from __future__ import annotations

from shared import homes
from shared.locks import probe


def lock_says(endpoint: homes.Endpoint) -> bool | None:
    """Whether the service of ``endpoint`` runs, as its endpoint lock here tells; None when the
    lock here cannot tell and the socket must be asked."""
    if endpoint.host or (endpoint.tcp is not None and not endpoint.tcp.is_local):
        return None  # another host: its lock is there
    try:
        status = probe(endpoint.lock_path)
    except OSError:
        return None  # a symlink, no permission: cannot tell
    if endpoint.tcp is None or status.exists:
        # An ipc service always locks here; a local TCP one whose file is here ran here once,
        # and the file outlives it, so an unheld one is stopped.
        return status.held
    return None  # a local TCP address with no lock here: served from a home out of sight
