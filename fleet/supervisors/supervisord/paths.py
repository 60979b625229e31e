"""Where the mesh's files are: its config, the daemon's record and pidfile, the XML-RPC
socket and the logs, all derived from the install's root home."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from shared import homes


@dataclass(frozen=True)
class MeshPaths:
    root: Path
    directory: Path
    config: Path
    state: Path
    pidfile: Path
    socket: Path
    logs: Path

    @property
    def server_url(self) -> str:
        return f"unix://{self.socket}"

    def program_log(self, name: str) -> Path:
        return self.logs / f"{name}.log"


def mesh_paths(root: Path) -> MeshPaths:
    root = Path(os.path.normpath(Path(root).absolute()))
    directory = root / "mesh"
    return MeshPaths(
        root=root,
        directory=directory,
        config=directory / "supervisord.conf",
        state=directory / "supervisord.json",
        pidfile=directory / "supervisord.pid",
        socket=_socket_dir(root) / "supervisord.sock",
        logs=root / "logs" / "mesh",
    )


def _socket_dir(root: Path) -> Path:
    """``<root>/mesh``, or ``/tmp/hermes-<uid>/<hash>-mesh`` when the socket path would not fit."""
    own = root / "mesh"
    if len(os.fsencode(own / "supervisord.sock")) <= homes.IPC_PATH_MAX:
        return own
    digest = hashlib.sha256(os.fsencode(os.path.realpath(root))).hexdigest()[:16]
    return Path("/tmp") / f"hermes-{os.geteuid()}" / f"{digest}-mesh"


def _private_dir(path: Path) -> None:
    """Make ``path`` (0700) or accept it only if it is ours, private, and not a symlink."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    else:
        os.chmod(path, 0o700)  # the umask may have removed owner bits
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise homes.UnsafeRunDir(f"refusing to use {path}: it is not a plain directory", detail={"path": str(path)})
    if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
        raise homes.UnsafeRunDir(
            f"refusing to use {path}: it must be owned by uid {os.geteuid()} with mode 0700",
            detail={"path": str(path)},
        )


def prepare(paths: MeshPaths) -> None:
    """Create the mesh's directories (and the private socket dirs when the socket is in /tmp)."""
    homes.make_private_dirs(paths.directory)  # on a new machine, the root home is made here
    homes.make_private_dirs(paths.logs)
    if paths.socket.parent != paths.directory:
        _private_dir(paths.socket.parent.parent)
        _private_dir(paths.socket.parent)
