"""A throwaway install for tests of the embedded supervisord: its profiles made, and the mesh,
with the workers ``hermes mesh up`` starts beside it, brought down whatever happens."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hermes_cli.commands.mesh import ON_DEMAND_WORKERS
from shared.spawn import stop_service
from shared.supervisors import supervisord as sv
from tests.support.homes import make_profile


@contextmanager
def mesh_root(*profiles: str) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="hm-"))
    for profile in profiles:
        make_profile(root, profile)
    try:
        yield root
    finally:
        try:
            sv.down(root)
        finally:
            for worker in ON_DEMAND_WORKERS:
                stop_service(root, worker)
            shutil.rmtree(root, ignore_errors=True)
