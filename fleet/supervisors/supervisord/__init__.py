"""The supervisord kind: the install's embedded mesh supervisor and its gateway programs.

One supervisord per install, anchored on the ROOT home whichever profile is active:

- ``<root>/mesh/supervisord.conf``: generated from the profile list, written atomically;
  the list of programs in it (one per profile, at most one multiplex program with its
  served set, and at most one gateway host with its set) is the mesh's only record of which profiles it runs.
- ``<root>/mesh/supervisord.json``: the daemon's identity (pid + start time), so a pid left
  by a dead supervisord is recognised and never trusted. Its lock serialises every
  check-and-start, so two ``hermes mesh up`` cannot start two daemons.
- ``<root>/mesh/supervisord.sock``: the XML-RPC unix socket (a short private dir under
  ``/tmp`` when that path is too long for a socket); ``<root>/logs/mesh/``: all logs.

Everything supervisord is told goes through its own XML-RPC interface; nothing parses
``supervisorctl`` text. The ``supervisor`` package is imported only when it is needed.

The modules, one job each: ``names`` (program names, and which program runs a gateway), ``paths`` (where the files are),
``config`` (the config file), ``rpc`` (the XML-RPC transport), ``daemon`` (the supervisord
process), ``programs`` (starting and stopping programs), ``mesh`` (status, up, down),
``kind`` (the kind API), ``respawn`` (what a program's state means for a restart), with
``waits`` and ``logs`` for bounded polling and log tails.
This module is their public face.
"""

from __future__ import annotations

from fleet.supervisors.supervisord.config import ConfigUnrepresentable, MeshUsage, configured_programs
from fleet.supervisors.supervisord.kind import UnsupportedScope, find, install, rename, restart, root_of, start, stop
from fleet.supervisors.supervisord.mesh import DownReport, down, status, up
from fleet.supervisors.supervisord.names import HOST_PROGRAM, MULTIPLEX_PROGRAM, profile_of, unit_name
from fleet.supervisors.supervisord.paths import mesh_paths
from fleet.supervisors.supervisord.programs import GatewayStartFailed, answers_ping, gave_up_on, start_drained

__all__ = [
    "HOST_PROGRAM",
    "MULTIPLEX_PROGRAM",
    "ConfigUnrepresentable",
    "DownReport",
    "GatewayStartFailed",
    "MeshUsage",
    "UnsupportedScope",
    "answers_ping",
    "configured_programs",
    "down",
    "find",
    "gave_up_on",
    "install",
    "mesh_paths",
    "profile_of",
    "rename",
    "restart",
    "root_of",
    "start",
    "start_drained",
    "status",
    "stop",
    "unit_name",
    "up",
]
