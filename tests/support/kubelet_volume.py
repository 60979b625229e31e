"""A directory laid out exactly as a kubelet lays out a Secret (or projected) volume.

From the kubelet's own code: ``pkg/volume/emptydir/empty_dir.go`` (a Secret is a tmpfs, whose
root is 1777), ``pkg/volume/util/atomic_writer.go`` (the files in a timestamped dir made 0755,
``..data`` a link to it, a link ``NAME -> ..data/NAME`` per top entry of the items' paths) and
``pkg/volume/volume_linux.go`` (``SetVolumeOwnership`` of a read-only volume: every entry but
the links chowned to the pod's fsGroup, with 0440 added, and 0110 plus setgid on dirs).
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path

# A timestamped dir's name, as the writer spells one: "..2006_01_02_15_04_05." and a number.
STAMP = "..2026_12_04_10_00_00.123456789"


def lay_out_secret(mount: Path, files: Mapping[str, bytes], *, fs_group: int, default_mode: int = 0o440) -> Path:
    """``files`` (an item's path -> its content) at ``mount``, which must not exist yet."""
    mount.mkdir()
    os.chmod(mount, 0o1777)  # a fresh tmpfs's root
    data = mount / STAMP
    data.mkdir()
    os.chmod(data, 0o755)
    for item, content in files.items():
        path = data / item
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path.parent, 0o755)  # MkdirAll under the kubelet's umask 022
        path.write_bytes(content)
        os.chmod(path, default_mode)
    os.symlink(STAMP, mount / "..data")
    for top in sorted({item.split("/")[0] for item in files}):
        os.symlink(f"..data/{top}", mount / top)
    for path in [mount, *sorted(mount.rglob("*"))]:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            os.lchown(path, 0, 0)  # made by the kubelet, as root; the ownership change skips links
            continue
        os.chown(path, 0, fs_group)
        extra = 0o440 | (0o110 | stat.S_ISGID if stat.S_ISDIR(st.st_mode) else 0)
        os.chmod(path, stat.S_IMODE(st.st_mode) | extra)
    return mount


def update_secret(mount: Path, item: str, content: bytes, *, stamp: str) -> None:
    """The kubelet's update of one item of a volume ``lay_out_secret`` made: a new timestamped
    dir holding every item (the changed one new), ``..data`` swapped to it by a rename, the old
    dir removed. Modes and owners are the old ones."""
    old = mount / os.readlink(mount / "..data")
    new = mount / stamp
    shutil.copytree(old, new, symlinks=True)
    for path in [new, *new.rglob("*")]:
        st = os.lstat(old / path.relative_to(new))
        os.chown(path, st.st_uid, st.st_gid)
        os.chmod(path, stat.S_IMODE(st.st_mode))
    target = new / item
    mode = stat.S_IMODE(os.lstat(target).st_mode)
    target.chmod(0o600)
    target.write_bytes(content)
    target.chmod(mode)
    os.symlink(stamp, mount / "..data_tmp")
    os.rename(mount / "..data_tmp", mount / "..data")
    shutil.rmtree(old)
