"""What the supervisor tests need to know of this machine: whether systemd runs here (then no
test may act on its real manager), and the kinds they are about."""

from __future__ import annotations

from fleet.supervisors.systemd import manager as systemd_manager

SYSTEMD_RUNNING = systemd_manager.BOOTED_MARKER.is_dir()
# The supervisord kind is left out: these tests are about systemd and launchd only.
KINDS_HERE = ("systemd", "launchd")
