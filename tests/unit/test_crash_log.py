"""The CLI's log of unexpected errors: bounded, newest kept whole, private; and the words a
user sees for an error, which never name an exception class."""

from __future__ import annotations

import stat

from hermes_cli import crash


def test_the_log_keeps_its_newest_entries_under_its_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(crash, "MAX_LOG_BYTES", 1000)
    for n in range(40):
        path = crash.save(tmp_path / "home", "skin set", f"Traceback {n}\n" + "x" * 100)
    text = path.read_text()
    assert len(text.encode()) <= 1000
    assert text.startswith(crash.ENTRY_START)  # cut at an entry, never inside one
    assert "Traceback 39\n" in text and "Traceback 0\n" not in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "home").stat().st_mode) == 0o700


def test_an_entry_larger_than_the_bound_keeps_its_end(tmp_path, monkeypatch):
    monkeypatch.setattr(crash, "MAX_LOG_BYTES", 200)
    path = crash.save(tmp_path, "doctor", "y" * 1000 + "\nthe last line")
    assert len(path.read_bytes()) == 200 and path.read_text().endswith("the last line\n")


def test_what_failed_is_said_in_words():
    assert crash.describe(FileNotFoundError(2, "No such file or directory", "/h/config.yaml.lock")) == (
        "no such file or directory: /h/config.yaml.lock"
    )
    assert crash.describe(KeyError("x")) == "an internal error"
    assert crash.describe(BrokenPipeError(32, "Broken pipe")) == "broken pipe"


def test_the_debug_variable_is_read_as_a_switch():
    assert crash.debug_wanted({"HERMES_DEBUG": "1"}) and crash.debug_wanted({"HERMES_DEBUG": " Yes "})
    assert not crash.debug_wanted({}) and not crash.debug_wanted({"HERMES_DEBUG": "0"})
