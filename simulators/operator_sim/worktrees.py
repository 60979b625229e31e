"""Project sessions' git worktrees with the real git: add, remove, what removal would lose, diff.

Every git call is bounded: a deadline (``git_timeout``, the whole process group killed), a cap
on what it may print, no stdin and no terminal prompt, and no user or system config (a
``diff.external`` or a pager of the owner's must not change what we parse). A name from
outside never reaches git where it could be read as an option: a branch is checked with
``check-ref-format`` and may not start with ``-``, and a base is resolved to a commit first.

The commit (and ref) a worktree forked from is recorded in its own git dir at ``add``, so
``unconfirmed`` and ``diff`` know the base later; a worktree made elsewhere falls back to HEAD.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from shared.files import read_json, write_json_atomic
from shared.operator.protocol import OperatorError
from shared.protocol import Code as WireCode

GIT_TIMEOUT = 30.0
DIFF_TIMEOUT = 10.0
MAX_DIFF_BYTES = 16 * 1024 * 1024
OUTPUT_CAP = 1024 * 1024
_STDERR_TAIL = 2000
_BASE_FILE = "pohunek-base"


class GitFailed(OperatorError):
    code = "git_failed"


class GitTimeout(GitFailed):
    code = "git_timeout"


class NotARepository(GitFailed):
    code = "not_a_repository"


class BranchExists(GitFailed):
    code = "branch_exists"


class InvalidBranch(GitFailed):
    code = "invalid_branch"


class UnknownBase(GitFailed):
    code = "unknown_base"


class InvalidDiffLimit(OperatorError):
    code = WireCode.INVALID_FIELD


@dataclass(frozen=True)
class _Result:
    returncode: int
    stdout: bytes
    stderr: str
    truncated: bool  # stdout passed the cap: git was stopped there


def project_id(repo: Path) -> str:
    """A project's stable id: ``p-`` and the first 12 hex digits of its real path's sha256."""
    return "p-" + hashlib.sha256(os.fsencode(os.path.realpath(repo))).hexdigest()[:12]


async def repo_root(path: Path) -> Path:
    result = await _git(path, ["rev-parse", "--show-toplevel"], ok=(0, 128))
    if result.returncode != 0:
        raise NotARepository(f"{path} is not inside a git work tree", detail={"path": str(path)})
    return Path(os.fsdecode(result.stdout.rstrip(b"\n")))


async def add_worktree(repo: Path, branch: str, base: str | None, into: Path) -> Path:
    """``git worktree add -b BRANCH INTO BASE`` (BASE defaults to the repository's HEAD)."""
    root = await repo_root(repo)
    await _check_branch(root, branch)
    commit, ref = await _resolve_base(root, base)
    if (await _git(root, ["show-ref", "--verify", "--quiet", f"refs/heads/{branch}"], ok=(0, 1))).returncode == 0:
        raise BranchExists(f"the branch {branch!r} already exists", detail={"branch": branch})
    target = Path(os.path.abspath(into))
    result = await _git(root, ["worktree", "add", "-b", branch, "--", str(target), commit], ok=(0, 128))
    if result.returncode != 0:
        if "already exists" in result.stderr and f"'{branch}'" in result.stderr:  # made since the check
            raise BranchExists(f"the branch {branch!r} already exists", detail={"branch": branch})
        raise _failed(["worktree", "add"], result)
    git_dir = await _git_dir(target)
    await trio.to_thread.run_sync(write_json_atomic, git_dir / _BASE_FILE, {"commit": commit, "ref": ref})
    return target


async def remove_worktree(repo: Path, worktree: Path) -> None:
    """``git worktree remove --force`` (a locked one too), then ``prune``; a worktree whose
    directory is already gone is only pruned."""
    root = await repo_root(repo)
    result = await _git(root, ["worktree", "remove", "--force", "--force", "--", str(worktree)], ok=(0, 128))
    if result.returncode != 0 and await trio.to_thread.run_sync(os.path.lexists, worktree):
        raise _failed(["worktree", "remove"], result)
    await _git(root, ["worktree", "prune"])


async def unconfirmed(worktree: Path) -> list[str]:
    """Why removing ``worktree`` would lose work: ``uncommitted_changes`` (untracked files
    included) and ``unmerged_commits`` (commits on neither its fork point nor its base ref)."""
    top = await repo_root(worktree)
    reasons = []
    status = await _git(top, ["status", "--porcelain", "-z", "--untracked-files=normal"], cap=1)
    if status.stdout:
        reasons.append("uncommitted_changes")
    base = await _recorded_base(top)
    if base is not None:
        merged = [base["commit"]]
        if base["ref"]:
            tip = await _git(top, ["rev-parse", "--verify", "-q", f"{base['ref']}^{{commit}}"], ok=(0, 1))
            if tip.returncode == 0:
                merged.append(tip.stdout.decode().strip())
        count = await _git(top, ["rev-list", "--count", "HEAD", "--not", *merged])
        if int(count.stdout.strip() or 0) > 0:
            reasons.append("unmerged_commits")
    return reasons


async def diff(worktree: Path, base: str | None, max_bytes: int) -> dict[str, Any]:
    """The working tree (untracked files included) against the base commit, at most
    ``max_bytes`` of it, within ``DIFF_TIMEOUT``."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or not 1 <= max_bytes <= MAX_DIFF_BYTES:
        raise InvalidDiffLimit(f"max_bytes must be from 1 to {MAX_DIFF_BYTES}", detail={"field": "max_bytes"})
    with trio.move_on_after(DIFF_TIMEOUT) as scope:
        return await _diff(worktree, base, max_bytes)
    assert scope.cancelled_caught
    raise GitTimeout(f"git diff did not finish within {DIFF_TIMEOUT:g}s", detail={"timeout": DIFF_TIMEOUT})


async def _diff(worktree: Path, base: str | None, max_bytes: int) -> dict[str, Any]:
    top = await repo_root(worktree)
    if base is None:
        recorded = await _recorded_base(top)
        commit = recorded["commit"] if recorded else (await _resolve_base(top, None))[0]
    else:
        commit = (await _resolve_base(top, base))[0]
    scratch = Path(await trio.to_thread.run_sync(tempfile.mkdtemp))
    try:
        # A scratch index of the base commit that also names untracked files (intent to add),
        # so the diff shows them as new without touching the worktree's own index. Read from
        # the tree, it holds no stat data: every file's content is compared, so an edit that
        # keeps a file's size within the clock tick of its checkout is not mistaken for none.
        env = {"GIT_INDEX_FILE": str(scratch / "index")}
        await _git(top, ["read-tree", commit], env=env)
        await _git(top, ["add", "--intent-to-add", "--", "."], env=env)
        flags = ["--no-color", "--no-ext-diff", "--no-textconv"]
        patch = await _git(top, ["diff", *flags, commit, "--"], env=env, cap=max_bytes)
        names = await _git(top, ["diff", "--name-only", "-z", *flags, commit, "--"], env=env)
    finally:
        await trio.to_thread.run_sync(shutil.rmtree, scratch, True)
    # Cut at a character boundary: a sequence the cap split is left out, not replaced.
    text, _ = codecs.utf_8_decode(patch.stdout, "replace", not patch.truncated)
    files = [name.decode("utf-8", "replace") for name in names.stdout.split(b"\0") if name]
    return {"diff": text, "truncated": patch.truncated, "files": files, "base": commit}


async def _check_branch(repo: Path, branch: str) -> None:
    if not isinstance(branch, str) or not branch or branch.startswith("-") or branch == "HEAD" or "\0" in branch:
        raise InvalidBranch(f"{branch!r} is not a valid branch name", detail={"branch": str(branch)})
    result = await _git(repo, ["check-ref-format", f"refs/heads/{branch}"], ok=(0, 1))
    if result.returncode != 0:
        raise InvalidBranch(f"{branch!r} is not a valid branch name", detail={"branch": branch})


async def _resolve_base(top: Path, base: str | None) -> tuple[str, str | None]:
    """The commit ``base`` (default HEAD) names, and the full ref when it is a branch."""
    name = "HEAD" if base is None else base
    if not name or name.startswith("-") or "\0" in name:
        raise UnknownBase(f"{name!r} names no commit", detail={"base": name})
    found = await _git(top, ["rev-parse", "--verify", "-q", f"{name}^{{commit}}"], ok=(0, 1, 128))
    if found.returncode != 0:
        raise UnknownBase(f"{name!r} names no commit", detail={"base": name})
    full = await _git(top, ["rev-parse", "--symbolic-full-name", name], ok=(0, 128))
    ref = full.stdout.decode("utf-8", "replace").strip()
    return found.stdout.decode().strip(), ref if ref.startswith("refs/heads/") else None


async def _git_dir(worktree: Path) -> Path:
    return Path(os.fsdecode((await _git(worktree, ["rev-parse", "--absolute-git-dir"])).stdout.rstrip(b"\n")))


async def _recorded_base(top: Path) -> dict[str, Any] | None:
    path = await _git_dir(top) / _BASE_FILE
    recorded = await trio.to_thread.run_sync(lambda: read_json(path, default=None))
    if isinstance(recorded, dict) and isinstance(recorded.get("commit"), str):
        ref = recorded.get("ref")
        return {"commit": recorded["commit"], "ref": ref if isinstance(ref, str) else None}
    return None


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    # No inherited GIT_* variable (GIT_DIR, GIT_INDEX_FILE, ...) may point git elsewhere.
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(
        GIT_TERMINAL_PROMPT="0",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_OPTIONAL_LOCKS="0",
        LC_ALL="C",
        **(extra or {}),
    )
    return env


async def _git(
    cwd: Path,
    args: list[str],
    *,
    ok: tuple[int, ...] = (0,),
    cap: int = OUTPUT_CAP,
    env: dict[str, str] | None = None,
    timeout: float = GIT_TIMEOUT,
) -> _Result:
    """``git -C cwd args``: at most ``cap`` bytes of stdout (git is stopped past it, which is
    not a failure), within ``timeout``; an exit outside ``ok`` is ``GitFailed``."""
    argv = ["git", "-C", str(cwd), *args]
    try:
        process = await trio.lowlevel.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(env),
            start_new_session=True,  # one group to kill: git may run hooks and helpers
        )
    except OSError as exc:
        raise GitFailed(f"could not run git: {exc.strerror}", detail={"command": args[:1]}) from None
    out = bytearray()
    err = bytearray()
    truncated = False

    async def read_out() -> None:
        nonlocal truncated
        assert process.stdout is not None
        while chunk := await process.stdout.receive_some(65536):
            out.extend(chunk[: cap + 1 - len(out)])
            if len(out) > cap:
                truncated = True
                del out[cap:]
                _kill(process)
                return

    async def read_err() -> None:
        assert process.stderr is not None
        while chunk := await process.stderr.receive_some(65536):
            err.extend(chunk)
            del err[:-_STDERR_TAIL]

    try:
        with trio.move_on_after(timeout) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_out)
                nursery.start_soon(read_err)
                await process.wait()
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                _kill(process)
                await process.wait()
            for pipe in (process.stdout, process.stderr):
                if pipe is not None:
                    await pipe.aclose()
    if scope.cancelled_caught:
        raise GitTimeout(f"git {args[0]} did not finish within {timeout:g}s", detail={"command": args[:1]})
    assert process.returncode is not None  # waited for above
    result = _Result(process.returncode, bytes(out), err.decode("utf-8", "replace"), truncated)
    if not truncated and result.returncode not in ok:
        raise _failed(args, result)
    return result


def _failed(args: list[str], result: _Result) -> GitFailed:
    last = next((line.strip() for line in reversed(result.stderr.splitlines()) if line.strip()), "")
    command = " ".join(args[:2]) if args[0] == "worktree" else args[0]
    return GitFailed(
        f"git {command} failed (exit {result.returncode})" + (f": {last}" if last else ""),
        detail={"command": command, "returncode": result.returncode, "stderr": result.stderr[-_STDERR_TAIL:]},
    )


def _kill(process: trio.Process) -> None:
    if process.returncode is None:  # the group's id cannot be reused before its leader is reaped
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
