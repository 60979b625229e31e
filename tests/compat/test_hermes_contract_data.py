"""The vendored Hermes 0.20.0 contract is the one the operator's harness publishes."""

from __future__ import annotations

import pytest

from tests.support import hermes_contract


def test_every_golden_the_lock_names_is_present_and_unaltered():
    found = hermes_contract.goldens()
    assert [g.id for g in found] == hermes_contract.lock()["golden_states"]
    assert all(g.header["state"] == g.id for g in found)


def test_an_altered_golden_is_refused(tmp_path, monkeypatch):
    copy = tmp_path / "hermes_0_20"
    (copy / "goldens").mkdir(parents=True)
    for path in (hermes_contract.DIR / "goldens").iterdir():
        (copy / "goldens" / path.name).write_bytes(path.read_bytes())
    (copy / "goldens" / "working.txt").write_text("state: idle\n")
    monkeypatch.setattr(hermes_contract, "DIR", copy)
    with pytest.raises(AssertionError, match=r"working\.txt"):
        hermes_contract.goldens()
