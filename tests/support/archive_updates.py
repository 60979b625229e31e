"""An install's tree as a value, and an archive update of it killed mid-swap: what the archive
update's rollback is judged by."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.processes import ROOT, python_env


def manifest(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` but .git, with what it is: the tree as a value."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = str(path.relative_to(root))
            out[rel] = (
                ("link", os.readlink(path))
                if path.is_symlink()
                else ("dir",)
                if path.is_dir()
                else ("file", path.read_bytes(), path.stat().st_ino)
            )
    return out


CRASH_MID_SWAP = """
import os, sys
from services.updater import apply_archive
real, count = os.rename, [0]
def crash(src, dst):
    count[0] += 1
    if count[0] == int(sys.argv[3]):
        os._exit(9)  # like kill -9: no cleanup runs
    real(src, dst)
os.rename = crash
apply_archive.apply_archive(sys.argv[1], sys.argv[4] if len(sys.argv) > 4 else "main", url_template=sys.argv[2],
                            work_id="u1", preserved=("web/node_modules", "web/dist"))
"""


def crash_mid_swap(install: Path, url_template: str, renames_done: int, branch: str = "main") -> None:
    """An archive update of ``install`` killed (like kill -9) after ``renames_done`` renames of its swap."""
    crashed = subprocess.run(
        [sys.executable, "-c", CRASH_MID_SWAP, str(install), url_template, str(renames_done + 1), branch],
        env=python_env(),
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    assert crashed.returncode == 9, crashed.stderr
