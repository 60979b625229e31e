"""The canary: before the tree moves, a gateway of the fetched code serves a probe turn.

The fetched commit is staged with ``git archive`` in a private directory (the live tree is
never checked out elsewhere or touched), and a gateway of that code runs there on a scratch
root holding one profile, ``canary``, whose ``config.yaml`` is a copy of a live profile's. It
must pass the turn check of the health gate (``fleet.health``): a probe turn on the fetched
commit, from a gateway still running. The gate's other half, ``min_healthy`` without a
restart, is for a supervised gateway: the canary has no supervisor to restart it (its exit is
seen at once), and the fleet's gated waves after the commit point hold each restarted gateway
to the window, so the canary does not wait it out. A scratch copy rather than the live profile itself: the
live profile's gateway holds its endpoint lock and serves turns, and nothing of a live home may
change before the commit point. Its secrets are not copied: a probe turn asks no provider.

The staged code runs on the install's interpreter and packages: a release that changes its
dependency spec is not gated (they are synced only after the commit point), and says so.
Every process of the canary is stopped before the run goes on, whatever the outcome; one left
by an updater killed mid-way is found and removed by the next run (``remove_abandoned``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from fleet.discovery import ask_gateways
from fleet.health import HEALTHY, PROBE, UNHEALTHY, judge
from services.updater.completion_contract import dependency_digest
from services.updater.errors import UpdateError
from shared import homes
from shared.files import write_json_atomic
from shared.gateways import ops
from shared.identity import ProcessIdentity, current_identity, is_alive
from shared.redaction import redact_text
from shared.version import IMAGE_REVISION, PACKAGES

CANARY_PROFILE = "canary"
START_BOUND = 30.0  # staging the tree, and a gateway's start on a machine busy with others
POLL = 0.1  # between probes: a gateway starts in a few tenths of a second
PROBE_TIMEOUT = 3.0
STOP_GRACE = 5.0
LOG_TAIL = 2000  # characters of the canary gateway's log a failure carries
PREFIX = "hermes-canary-"
UNSTAGED = (":(exclude)tests", ":(exclude)docs", ":(exclude)bench")  # never imported by a gateway
OWNER = "owner.json"


class CanaryFailed(UpdateError):
    """The fetched code failed its canary: nothing was committed."""

    code = "canary_failed"


# Not a HermesError: control flow, a stop request seen mid-canary; the pipeline ends the run interrupted.
class CanaryStopped(Exception):
    """A stop request arrived while the canary ran; it was stopped and removed."""


class Canary(NamedTuple):
    profile: str  # the live profile whose config.yaml the canary copied
    sha: str
    took: float

    def to_dict(self) -> dict[str, Any]:
        return {"profile": self.profile, "sha": self.sha, "took": round(self.took, 2)}


def run_canary(
    install_root: Path,
    root: Path,
    sha: str,
    profile: str,
    stop: threading.Event,
    *,
    spec_now: str | None,
    base: Path | None = None,
) -> Canary | str:
    """Gate ``sha``: the Canary it passed with, or why it was not gated (its dependency spec
    differs from ``spec_now``, the live tree's). ``CanaryFailed`` names the check it failed
    (``stage``, ``exited``, ``turn``, ``deadline``); ``CanaryStopped`` when ``stop`` is set."""
    started = time.monotonic()
    deadline = started + START_BOUND
    work = Path(tempfile.mkdtemp(prefix=PREFIX, dir=base))
    try:
        write_json_atomic(work / OWNER, {"updater": current_identity().to_dict(), "root": str(root), "sha": sha})
        tree = _stage(install_root, sha, work / "tree", deadline)
        _carry_bytecode(install_root, tree)
        if dependency_digest(tree) != spec_now:
            return "the release changes its dependency spec: its packages are synced only after the commit point"
        home = _scratch_home(root, profile, work / "root")
        with _gateway(tree, work, home) as gateway:
            _await_turn(gateway, home, sha, profile, deadline, stop, work / "gateway.log")
        return Canary(profile, sha, time.monotonic() - started)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _stage(install_root: Path, sha: str, tree: Path, deadline: float) -> Path:
    """The commit's files, from ``git archive`` streamed into ``tree``, stamped with the commit:
    a tree with no ``.git`` names its code by the stamp, as an image's does."""
    tree.mkdir()
    command = ["git", "-C", str(install_root), "archive", "--format=tar", sha, "--", ".", *UNSTAGED]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    timer = threading.Timer(max(deadline - time.monotonic(), 0.1), process.kill)
    timer.start()
    try:
        assert process.stdout is not None  # piped above
        with tarfile.open(fileobj=process.stdout, mode="r|") as archive:
            archive.extractall(tree, filter="data")
        error = process.stderr.read().decode(errors="replace") if process.stderr else ""
        code = process.wait()
    except (tarfile.TarError, OSError) as exc:
        process.kill()
        process.wait()
        raise _failed(sha, "stage", f"could not stage the commit's files: {exc}") from None
    finally:
        timer.cancel()
    if code != 0:
        raise _failed(sha, "stage", f"git archive exited {code}: {redact_text(error.strip())[-LOG_TAIL:]}")
    (tree / IMAGE_REVISION).write_text(sha + "\n", encoding="ascii")
    return tree


def _carry_bytecode(install_root: Path, tree: Path) -> None:
    """The live tree's compiled files beside the staged sources, so the canary's gateway starts
    as fast as the fleet's: each is checked against its source's hash when imported (the
    bytecode sweep writes them so), and a changed module is compiled from its source."""
    for package in PACKAGES:
        for cache in (install_root / package).rglob("__pycache__"):
            staged = tree / cache.relative_to(install_root)
            if cache.is_symlink() or not staged.parent.is_dir():
                continue
            staged.mkdir(exist_ok=True)
            for compiled in cache.glob("*.pyc"):
                with contextlib.suppress(OSError):
                    shutil.copyfile(compiled, staged / compiled.name, follow_symlinks=False)


def _scratch_home(root: Path, profile: str, scratch: Path) -> Path:
    """A root with one profile, the canary, holding a copy of ``profile``'s config.yaml only."""
    home = homes.profile_home(CANARY_PROFILE, scratch)
    home.mkdir(parents=True, mode=0o700)
    source = homes.profile_home(profile, root) / "config.yaml"
    with contextlib.suppress(FileNotFoundError):
        shutil.copyfile(source, home / "config.yaml", follow_symlinks=False)
    return home


@contextlib.contextmanager
def _gateway(tree: Path, work: Path, home: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The canary's gateway, in a session of its own, stopped (its whole group) on the way out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_") and k != "PYTHONPATH"}
    env.update(HERMES_HOME=str(home.parent.parent), PYTHONPATH=str(tree))
    with open(work / "gateway.log", "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "services.gateway", "--profile", CANARY_PROFILE],
            cwd=tree,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        _stop_group(process)


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(STOP_GRACE)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # what the gateway started, too
    process.wait()


def _await_turn(
    gateway: subprocess.Popen[bytes],
    home: Path,
    sha: str,
    profile: str,
    deadline: float,
    stop: threading.Event,
    log: Path,
) -> None:
    """Probe turns until one passes; a failed check raises at once."""
    last = "it has not answered on its socket yet"
    while True:
        if stop.wait(POLL):
            raise CanaryStopped
        code = gateway.poll()
        if code is not None:
            raise _failed(sha, "exited", f"the gateway exited {code} before it served a probe turn", profile, log)
        answers, _ = ask_gateways({CANARY_PROFILE: home}, ops.TURN, PROBE, timeout=PROBE_TIMEOUT)
        if CANARY_PROFILE in answers:
            health = judge(answers[CANARY_PROFILE], expected_sha=sha, min_healthy=0)
            if health.state == HEALTHY:
                return
            if health.state == UNHEALTHY:
                raise _failed(sha, "turn", str(health.why), profile, log)
            last = str(health.why)
        if time.monotonic() >= deadline:
            raise _failed(sha, "deadline", f"no probe turn passed within {START_BOUND:g} s: {last}", profile, log)


def _failed(sha: str, check: str, why: str, profile: str | None = None, log: Path | None = None) -> CanaryFailed:
    detail: dict[str, Any] = {"step": "canary", "profile": profile, "check": check, "sha": sha, "why": why}
    if log is not None:
        with contextlib.suppress(OSError):
            detail["log"] = redact_text(log.read_bytes()[-LOG_TAIL:].decode(errors="replace"))
    return CanaryFailed(f"the canary of {sha[:12]} failed its {check} check: {why}", detail=detail)


# --- what an updater killed mid-canary left -------------------------------------------------


def remove_abandoned(
    root: Path, base: Path | None = None, *, alive: Callable[[ProcessIdentity], bool] = is_alive
) -> list[str]:
    """Remove every canary of ``root``'s updates whose updater is gone: its processes (any whose
    working directory lies inside it) are killed, then its directory. Only directories of ours,
    by name, owner and a record naming this root and an updater no longer alive, are touched
    (another install's are its own updates' to remove); the paths removed."""
    removed = []
    for work in Path(base or tempfile.gettempdir()).glob(PREFIX + "*"):
        try:
            if work.is_symlink() or not work.is_dir() or work.stat().st_uid != os.getuid():
                continue
            record = json.loads((work / OWNER).read_text())
            updater = ProcessIdentity.from_dict(record["updater"])
        except (OSError, ValueError, TypeError, KeyError):
            continue  # not ours, or its record is not written yet
        if record.get("root") != str(root) or alive(updater):
            continue
        _kill_inside(work)
        shutil.rmtree(work, ignore_errors=True)
        removed.append(str(work))
    return removed


def _kill_inside(work: Path) -> None:
    import psutil  # only here: an abandoned canary is rare, and psutil is slow to import

    inside = str(work.resolve()) + os.sep
    for process in psutil.process_iter(["cwd"]):
        cwd = process.info["cwd"]
        if cwd and (cwd + os.sep).startswith(inside):
            with contextlib.suppress(psutil.Error):
                process.kill()
