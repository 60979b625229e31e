"""Whether the dependency spec changed, decided against real git history: the digest for an
archive commit git does not know, the commits' diff without one."""

from __future__ import annotations

from pathlib import Path

from services.updater.completion import spec_changed
from services.updater.completion_contract import UNKNOWN_SPEC, Request, dependency_digest
from tests.support import COMPAT
from tests.support.installs import git
from tests.support.updater import asking

# --- the completion's decision -----------------------------------------------------------------


def commit(repo: Path, name: str, text: str) -> str:
    (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", name)
    return git(repo, "rev-parse", "HEAD")


def test_an_archive_commit_unknown_to_git_is_decided_by_the_digest(tmp_path):
    git(tmp_path, "init", "-q", "-b", "main")
    head = commit(tmp_path, "pyproject.toml", "[project]\nname = 'x'\n")
    archived = "f" * 40  # laid down from a source archive: not in the local .git
    assert spec_changed(asking(before=head, after=archived), tmp_path)  # the diff fails: changed, in doubt
    unchanged = asking(before=head, after=archived, dependency_spec=dependency_digest(tmp_path))
    assert not spec_changed(unchanged, tmp_path)


def test_without_a_digest_the_commits_diff_decides(tmp_path):
    git(tmp_path, "init", "-q", "-b", "main")
    first = commit(tmp_path, "pyproject.toml", "[project]\nname = 'x'\n")
    docs = commit(tmp_path, "README.md", "docs\n")
    deps = commit(tmp_path, "pyproject.toml", "[project]\nname = 'x'\ndependencies = ['trio']\n")
    assert not spec_changed(asking(before=first, after=docs), tmp_path)
    assert spec_changed(asking(before=docs, after=deps), tmp_path)
    v1 = Request.read(COMPAT / "completion_request_v1.json")
    assert v1.dependency_spec == UNKNOWN_SPEC  # so a schema 1 request is decided by the diff
