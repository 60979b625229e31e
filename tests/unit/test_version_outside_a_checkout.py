"""The install's code commit outside a checkout: none."""

from __future__ import annotations

from shared.version import code_sha


def test_not_a_checkout(tmp_path):
    assert code_sha(tmp_path) is None
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("garbage\n")
    assert code_sha(tmp_path) is None
