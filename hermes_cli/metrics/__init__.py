"""The install's metrics (``hermes mesh metrics``): ``families`` their stable names and what a
snapshot renders to, ``exposition`` the OpenMetrics text format (both no I/O), ``gather`` the
snapshot (bounded calls, the updater's files, the account), ``address`` where a listener may
serve (no I/O) and ``listener`` the HTTP listener a Prometheus scrapes."""
