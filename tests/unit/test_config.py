"""A home's config.yaml: plain reads, strict refusals that name the file, and round-trip rewrites
that keep the operator's comments, order and layout."""

from __future__ import annotations

import datetime
import os
import stat
from pathlib import Path

import pytest

from shared.config import (
    CONFIG_FILE,
    MAX_BYTES,
    ConfigError,
    add_key,
    config_path,
    dump_document,
    get,
    load_config,
    load_document,
    remove_key,
    replace_value,
    save_document,
)

HAND_EDITED = """\
# Hermes: edited by hand
# keep this header

model: "hermes-4"   # the default model
toolsets:
  - web
  - 'files'   # local only
update:
  branch: main

  # where a release comes from when git fails
  archive_url: https://example.com/{branch}.zip
limits: {turns: 10, seconds: 30.5}
enabled: true
nothing:
"""


def write(home: Path, text: str | bytes, mode: int = 0o644) -> Path:
    path = config_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    os.chmod(path, mode)
    return path


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# --- plain reads ------------------------------------------------------------------------------


def test_the_file_is_config_yaml_in_the_home(tmp_path):
    assert config_path(tmp_path) == tmp_path / CONFIG_FILE == tmp_path / "config.yaml"


def test_a_missing_empty_or_comment_only_file_is_an_empty_config(tmp_path):
    assert load_config(tmp_path) == {}
    write(tmp_path, "")
    assert load_config(tmp_path) == {}
    write(tmp_path, "# model: hermes-4\n\n")
    assert load_config(tmp_path) == {}


def test_the_config_is_plain_python_data(tmp_path):
    write(tmp_path, HAND_EDITED)
    config = load_config(tmp_path)
    assert config == {
        "model": "hermes-4",
        "toolsets": ["web", "files"],
        "update": {"branch": "main", "archive_url": "https://example.com/{branch}.zip"},
        "limits": {"turns": 10, "seconds": 30.5},
        "enabled": True,
        "nothing": None,
    }
    assert list(config) == ["model", "toolsets", "update", "limits", "enabled", "nothing"]
    assert type(config) is dict and type(config["update"]) is dict and type(config["toolsets"]) is list
    assert type(config["toolsets"][1]) is str and type(config["limits"]["turns"]) is int
    assert type(config["enabled"]) is bool


def test_get_walks_a_dotted_key_and_falls_back_to_the_default(tmp_path):
    config = {"update": {"branch": "main", "retries": 0}, "model": "hermes-4"}
    assert get(config, "update.branch") == "main"
    assert get(config, "update.retries", 5) == 0  # a falsy value is still the value
    assert get(config, "update") == {"branch": "main", "retries": 0}
    assert get(config, "update.missing") is None
    assert get(config, "update.missing", "dflt") == "dflt"
    assert get(config, "model.name", "dflt") == "dflt"  # a string in the middle is not a mapping
    assert get({}, "a.b.c", 1) == 1


def test_an_alias_is_shared_not_expanded(tmp_path):
    # Converted once, a small file of nested aliases cannot expand into an enormous value.
    lines = ["l0: &l0 [x]"] + [f"l{i}: &l{i} [*l{i - 1}, *l{i - 1}, *l{i - 1}]" for i in range(1, 4)]
    write(tmp_path, "\n".join(lines) + "\n")
    config = load_config(tmp_path)
    assert config["l3"][0] is config["l3"][2] is config["l2"]
    assert config["l1"] == [["x"], ["x"], ["x"]]


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, key, why",
    [
        ("model: [unclosed\n", None, "line 2"),
        ("- a\n- b\n", None, "top level is a list, not a mapping"),
        ("just text\n", None, "top level is a str, not a mapping"),
        (b"model: \xff\xfe\n", None, "not UTF-8"),
        ("model: a\nmodel: b\n", None, "duplicate key"),
        ("run: !!python/object/apply:os.system [echo owned]\n", None, "could not determine a constructor"),
        ("model: !custom x\n", None, "could not determine a constructor"),
        ("a: &loop [*loop]\n", "a[0]", "refers to itself"),
        ("update:\n  since: 2024-05-01\n", "update.since", "date is not a config value"),
        ("toolsets: [web, !!binary aGk=]\n", "toolsets[1]", "bytes is not a config value"),
        ("limits:\n  1: x\n", "limits", "the key 1 is not a string"),
    ],
    ids=[
        "syntax",
        "list",
        "scalar",
        "undecodable",
        "duplicate",
        "python-tag",
        "custom-tag",
        "recursive",
        "date",
        "binary",
        "int-key",
    ],
)
def test_an_invalid_file_is_a_config_error_naming_the_file_and_the_key(tmp_path, content, key, why):
    path = write(tmp_path, content)
    for load in (load_config, load_document):
        with pytest.raises(ConfigError) as caught:
            load(tmp_path)
        error = caught.value
        assert error.code == "config_invalid"
        assert (error.path, error.key) == (path, key)
        assert why in error.reason
        assert str(path) in error.message
        if key:
            assert key in error.message
        assert error.detail == {"path": str(path), "key": key, "reason": error.reason}


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path):
    path = write(tmp_path, "model: x\n" + "#" * MAX_BYTES + "\n")
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path)
    assert str(path) in caught.value.message and "larger than" in caught.value.reason
    write(tmp_path, "model: x\n" + "#" * (MAX_BYTES - 20) + "\n")  # just under: read
    assert load_config(tmp_path) == {"model": "x"}


def test_a_file_that_cannot_be_read_is_a_config_error(tmp_path):
    config_path(tmp_path).mkdir()
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path)
    assert caught.value.path == config_path(tmp_path) and "cannot read" in caught.value.reason


# --- round trip -------------------------------------------------------------------------------


def test_an_unchanged_document_is_written_back_byte_for_byte(tmp_path):
    path = write(tmp_path, HAND_EDITED)
    doc = load_document(tmp_path)
    assert doc.exists
    save_document(tmp_path, doc)
    assert path.read_text() == HAND_EDITED


@pytest.mark.parametrize(
    "text",
    [
        "toolsets:\n- web\n- files\n",  # lists flush with their key
        "toolsets:\n    - web\nupdate:\n    branch: main\n",  # four-space indents
        "# opening\n---\n# after the marker\nmodel: x\n",  # ruamel alone drops what precedes ---
        "# model: x\n# every line commented out\n",
    ],
    ids=["flush-lists", "four-spaces", "explicit-start", "comments-only"],
)
def test_the_files_layout_survives_a_rewrite(tmp_path, text):
    write(tmp_path, text)
    doc = load_document(tmp_path)
    assert dump_document(doc) == text
    doc.data["added"] = 1
    assert dump_document(doc) == text + "added: 1\n"


def test_edits_keep_comments_and_order(tmp_path):
    path = write(tmp_path, HAND_EDITED)
    doc = load_document(tmp_path)
    doc.data["update"]["branch"] = "stable"
    doc.data["toolsets"].append("shell")
    doc.data.insert(0, "config_version", 1)
    save_document(tmp_path, doc)
    text = path.read_text()
    for comment in ("# Hermes: edited by hand", "# the default model", "# local only", "# where a release comes from"):
        assert comment in text
    assert text.index("# keep this header") < text.index("config_version: 1") < text.index("model:")
    assert "  - shell\n" in text and "  branch: stable\n" in text
    assert list(load_config(tmp_path)) == [
        "config_version",
        "model",
        "toolsets",
        "update",
        "limits",
        "enabled",
        "nothing",
    ]


def test_removing_a_key_keeps_the_comment_lines_after_it(tmp_path):
    write(tmp_path, "# head\n\nold: 1  # own\n\n# about model\nmodel: x\nlegacy: y\n# closing\n")
    doc = load_document(tmp_path)
    assert remove_key(doc.data, "old") == 1
    assert remove_key(doc.data, "legacy") == "y"
    assert dump_document(doc) == "# head\n\n\n# about model\nmodel: x\n# closing\n"
    write(tmp_path, "old: 1\n# about model\nmodel: x\n")  # nothing opens the file yet
    doc = load_document(tmp_path)
    remove_key(doc.data, "old")
    assert dump_document(doc) == "# about model\nmodel: x\n"


def test_an_added_key_goes_after_the_comments_that_close_the_mapping(tmp_path):
    write(tmp_path, "update:\n  branch: main  # b\n  # url: https://example.com\nmodel: x\n# end\n")
    doc = load_document(tmp_path)
    add_key(doc.data["update"], "archive_url", "https://example.com/a.zip", "new")
    add_key(doc.data, "extra", True)
    assert dump_document(doc) == (
        "update:\n  branch: main  # b\n  archive_url: https://example.com/a.zip # new\n"
        "  # url: https://example.com\nmodel: x\nextra: true\n# end\n"
    )


def test_a_replaced_value_keeps_the_comment_lines_after_it(tmp_path):
    write(tmp_path, "update:  # settings\n\n# the model\nmodel: x\n")
    doc = load_document(tmp_path)
    section = type(doc.data)()
    section["branch"] = "main"
    replace_value(doc.data, "update", section)
    assert dump_document(doc) == "update:  # settings\n  branch: main\n\n# the model\nmodel: x\n"


def test_a_missing_file_is_an_empty_document_that_saving_creates(tmp_path):
    doc = load_document(tmp_path)
    assert not doc.exists and dict(doc.data) == {}
    doc.data["model"] = "x"
    save_document(tmp_path, doc)
    assert load_config(tmp_path) == {"model": "x"}
    assert mode_of(config_path(tmp_path)) == 0o644


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o644])
def test_saving_keeps_the_files_mode_and_leaves_no_temp(tmp_path, mode):
    path = write(tmp_path, "model: x\n", mode)
    doc = load_document(tmp_path)
    doc.data["model"] = "y"
    save_document(tmp_path, doc)
    assert mode_of(path) == mode
    assert load_config(tmp_path) == {"model": "y"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [CONFIG_FILE]


def test_saving_through_a_symlink_writes_its_target(tmp_path):
    target = tmp_path / "dotfiles" / "hermes.yaml"
    target.parent.mkdir()
    target.write_text("model: x\n")
    os.chmod(target, 0o600)
    home = tmp_path / "home"
    home.mkdir()
    config_path(home).symlink_to(target)
    doc = load_document(home)
    doc.data["model"] = "y"
    save_document(home, doc)
    assert config_path(home).is_symlink()
    assert target.read_text() == "model: y\n" and mode_of(target) == 0o600


def test_a_rewrite_that_would_not_read_back_is_refused_before_the_file_is_touched(tmp_path):
    path = write(tmp_path, "model: x  # keep\n")
    doc = load_document(tmp_path)
    doc.data["since"] = datetime.date(2024, 5, 1)
    with pytest.raises(ConfigError) as caught:
        save_document(tmp_path, doc)
    assert caught.value.key == "since" and "would not read back" in caught.value.reason
    del doc.data["since"]
    doc.data["blob"] = "x" * MAX_BYTES
    with pytest.raises(ConfigError) as caught:
        save_document(tmp_path, doc)
    assert "larger than" in caught.value.reason
    assert path.read_text() == "model: x  # keep\n"
