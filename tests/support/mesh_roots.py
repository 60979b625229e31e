"""A throwaway install for tests of the embedded supervisord: its profiles made, and the mesh,
with the workers ``hermes mesh up`` starts beside it, brought down whatever happens."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fleet.supervisors import supervisord as sv
from tests.support.homes import make_profile
from tests.support.workers import stop_and_check_workers


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
            try:
                stop_and_check_workers(root)
            finally:
                shutil.rmtree(root, ignore_errors=True)
