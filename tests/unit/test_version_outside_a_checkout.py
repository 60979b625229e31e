"""The install's code commit outside a checkout: none, unless an image build wrote its revision."""

from __future__ import annotations

from shared.version import IMAGE_REVISION, code_sha


def test_not_a_checkout(tmp_path):
    assert code_sha(tmp_path) is None
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("garbage\n")
    assert code_sha(tmp_path) is None


def test_an_image_revision_names_the_commit_and_a_malformed_one_names_none(tmp_path):
    sha = "0123456789abcdef" * 2 + "01234567"
    (tmp_path / IMAGE_REVISION).write_text(sha + "\n")
    assert code_sha(tmp_path) == sha
    for bad in ("0123456", sha.upper(), sha + "ff", "\xff"):
        (tmp_path / IMAGE_REVISION).write_text(bad)
        assert code_sha(tmp_path) is None


def test_the_version_line_names_the_agent_release_first(monkeypatch):
    from shared import version

    monkeypatch.setattr(version, "code_sha", lambda: "0123456789abcdef" * 2 + "01234567")
    mesh = f"hermes-mesh {version.__version__}"
    assert version.version_line() == f"Hermes Agent v0.20.0 (2026.8.3) · {mesh} · 0123456789ab"
    monkeypatch.setattr(version, "code_sha", lambda: None)
    assert version.version_line() == f"Hermes Agent v0.20.0 (2026.8.3) · {mesh} · no git checkout"
    assert version.version_document() == {
        "agent_release": "0.20.0",
        "agent_release_date": "2026.8.3",
        "version": version.__version__,
        "code_sha": None,
    }


def test_a_commit_id_is_40_or_64_lower_case_hex_digits():
    from shared.version import is_commit_sha

    for good in ("a" * 40, "0123456789abcdef" * 4):
        assert is_commit_sha(good)
    for bad in ("a" * 39, "a" * 41, "a" * 63, "a" * 65, "A" * 40, "g" * 40, " " + "a" * 39, "", None, 40, b"a" * 40):
        assert not is_commit_sha(bad)
