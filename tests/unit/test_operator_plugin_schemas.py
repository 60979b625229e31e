"""The tools' schemas: the three mode sets, the shape each schema has, and every refusal
naming the field at fault."""

from __future__ import annotations

import json

import pytest

from tests.support.operator_plugin import argument_fields, arguments_around, payload, with_argument

schemas = payload("schemas")
errors = payload("errors")

SESSION_TOOLS = [
    name for name in schemas.FULL_TOOLS if name not in ("pohunek_hosts", "pohunek_sessions", "pohunek_session_start")
]
# The smallest valid arguments of each tool.
MINIMAL = {
    "pohunek_hosts": {},
    "pohunek_sessions": {},
    "pohunek_session_wait": {"session": "s", "timeout_ms": 1},
    "pohunek_session_start": {"agent_profile": "hermes", "name": "n", "project": {"label": "p"}},
    "pohunek_session_send": {"session": "s", "input": "hi"},
    "pohunek_session_resize": {"session": "s", "cols": 80, "rows": 24},
    "pohunek_session_rename": {"session": "s", "name": "n"},
    "pohunek_session_set_metadata": {"session": "s", "metadata": {"label": "x"}},
}
PAIR = {"worker_instance_id": "w-1", "runtime_generation": "1"}  # the runtime a cursor came with


def minimal(name):
    return dict(MINIMAL.get(name, {"session": "s"}))


def refused(name, args):
    with pytest.raises(errors.ToolError) as caught:
        schemas.validate(name, args)
    assert caught.value.code == "plugin_invalid_request"
    return caught.value.detail["field"]


def test_the_modes_register_7_14_and_16_tools_in_seed_order():
    assert [len(schemas.tools_for(m)) for m in ("read_only", "manage", "full")] == [7, 14, 16]
    assert schemas.tools_for("full")[:7] == schemas.READ_TOOLS
    assert schemas.tools_for("full")[-2:] == ("pohunek_session_stop", "pohunek_session_remove")
    assert set(schemas.SCHEMAS) == set(schemas.FULL_TOOLS)


@pytest.mark.parametrize("name", schemas.FULL_TOOLS)
def test_each_schema_is_a_closed_function_object(name):
    schema = schemas.SCHEMAS[name]
    assert schema["name"] == name and schema["description"]
    params = schema["parameters"]
    assert params["type"] == "object" and params["additionalProperties"] is False
    words = " ".join(str(k) for k in _keys(params)).lower()
    for forbidden in ("argv", "method", "force", "attach", "executable", "socket", "env"):
        assert forbidden not in words
    assert schemas.validate(name, minimal(name)) == minimal(name)


def _keys(schema):
    for key, value in schema.get("properties", {}).items():
        yield key
        if isinstance(value, dict):
            yield from _keys(value)


def test_hints_mark_reads_and_the_destructive_two():
    assert all(schemas.ANNOTATIONS[n]["readOnlyHint"] for n in schemas.READ_TOOLS)
    destructive = {n for n, hints in schemas.ANNOTATIONS.items() if hints["destructiveHint"]}
    assert destructive == {"pohunek_session_stop", "pohunek_session_remove"}


@pytest.mark.parametrize("name", schemas.FULL_TOOLS)
def test_unknown_arguments_and_non_objects_are_refused(name):
    assert refused(name, {**minimal(name), "zz_extra": 1}) == "zz_extra"
    assert refused(name, ["not", "an", "object"]) == ""


@pytest.mark.parametrize("name", SESSION_TOOLS)
def test_session_references_are_typed_bounded_and_unqualified(name):
    assert refused(name, {**minimal(name), "session": 7}) == "session"
    assert refused(name, {**minimal(name), "session": "x" * 129}) == "session"
    assert refused(name, {**minimal(name), "session": "desktop/s-1"}) == "session"
    assert refused(name, {**minimal(name), "session": ""}) == "session"
    assert refused(name, {**minimal(name), "host": "Bad_Host"}) == "host"
    del_session = minimal(name)
    del del_session["session"]
    assert refused(name, del_session) == "session"


@pytest.mark.parametrize(
    ("name", "args", "field"),
    [
        ("pohunek_sessions", {"filters": {"state": "asleep"}}, "filters.state"),
        ("pohunek_sessions", {"filters": {"owner": "x"}}, "filters.owner"),
        ("pohunek_session_output", {"session": "s", **PAIR, "after_offset": "01"}, "after_offset"),
        ("pohunek_session_output", {"session": "s", **PAIR, "after_offset": "-0"}, "after_offset"),
        ("pohunek_session_output", {"session": "s", **PAIR, "after_offset": 5}, "after_offset"),
        ("pohunek_session_output", {"session": "s", "wait_ms": 10}, "after_offset"),
        ("pohunek_session_output", {"session": "s", **PAIR, "after_offset": "0", "wait_ms": 8001}, "wait_ms"),
        ("pohunek_session_output", {"session": "s", "after_offset": "0"}, "worker_instance_id"),
        (
            "pohunek_session_output",
            {"session": "s", "after_offset": "0", "worker_instance_id": "w-1"},
            "runtime_generation",
        ),
        ("pohunek_session_output", {"session": "s", "max_bytes": 1_048_577}, "max_bytes"),
        ("pohunek_session_output", {"session": "s", "max_bytes": 0}, "max_bytes"),
        ("pohunek_session_output", {"session": "s", "worker_instance_id": "w"}, "runtime_generation"),
        ("pohunek_session_wait", {"session": "s", "timeout_ms": 8001}, "timeout_ms"),
        ("pohunek_session_wait", {"session": "s", "timeout_ms": 0}, "timeout_ms"),
        ("pohunek_session_wait", {"session": "s"}, "timeout_ms"),
        ("pohunek_session_wait", {"session": "s", "timeout_ms": True}, "timeout_ms"),
        ("pohunek_session_wait", {"session": "s", "timeout_ms": 1, "runtime_generation": "1"}, "worker_instance_id"),
        ("pohunek_session_wait", {"session": "s", "timeout_ms": 1, "states": ["running", "running"]}, "states"),
        ("pohunek_session_wait", {"session": "s", "timeout_ms": 1, "states": ["asleep"]}, "states.0"),
        ("pohunek_session_wait", {"session": "s", "timeout_ms": 1, "activities": []}, "activities"),
        (
            "pohunek_session_wait",
            {"session": "s", "timeout_ms": 1, "after_updated_at": "yesterday"},
            "after_updated_at",
        ),
        (
            "pohunek_session_wait",
            {"session": "s", "timeout_ms": 1, **PAIR, "after_output_offset": "007"},
            "after_output_offset",
        ),
        ("pohunek_session_wait", {"session": "s", "timeout_ms": 1, "after_output_offset": "7"}, "worker_instance_id"),
        (
            "pohunek_session_wait",
            {"session": "s", "timeout_ms": 1, "after_terminal_watermark": "7"},
            "worker_instance_id",
        ),
        ("pohunek_session_start", {"agent_profile": "hermes", "project": {"label": "p"}}, "name"),
        ("pohunek_session_start", {"name": "n", "project": {"label": "p"}}, "agent_profile"),
        ("pohunek_session_start", {"agent_profile": "hermes", "name": "n"}, "project"),
        (
            "pohunek_session_start",
            {**MINIMAL["pohunek_session_start"], "project": {"id": "a", "label": "b"}},
            "project",
        ),
        (
            "pohunek_session_start",
            {**MINIMAL["pohunek_session_start"], "worktree": {"project": {"label": "p"}}},
            "project",
        ),
        (
            "pohunek_session_start",
            {"agent_profile": "hermes", "name": "n", "worktree": {"branch": "b"}},
            "worktree.project",
        ),
        ("pohunek_session_start", {**MINIMAL["pohunek_session_start"], "rows": 201}, "rows"),
        ("pohunek_session_start", {**MINIMAL["pohunek_session_start"], "cols": 501}, "cols"),
        ("pohunek_session_start", {**MINIMAL["pohunek_session_start"], "name": "x" * 129}, "name"),
        ("pohunek_session_start", {**MINIMAL["pohunek_session_start"], "initial_input": "\x1b[A"}, "initial_input"),
        ("pohunek_session_send", {"session": "s", "input": "up\x1b[A"}, "input"),
        ("pohunek_session_send", {"session": "s", "input": "bell\x07"}, "input"),
        ("pohunek_session_send", {"session": "s", "input": "c1\x9b"}, "input"),
        ("pohunek_session_send", {"session": "s", "input": "x" * 65_537}, "input"),
        ("pohunek_session_send", {"session": "s", "input": "x", "submit": "yes"}, "submit"),
        ("pohunek_session_resize", {"session": "s", "cols": 80}, "rows"),
        ("pohunek_session_resize", {"session": "s", "cols": 80, "rows": 1.5}, "rows"),
        ("pohunek_session_rename", {"session": "s", "name": "a/b"}, "name"),
        ("pohunek_session_set_metadata", {"session": "s", "metadata": {}}, "metadata"),
        ("pohunek_session_set_metadata", {"session": "s", "metadata": {"owner": "x"}}, "metadata.owner"),
        ("pohunek_session_set_metadata", {"session": "s", "metadata": {"label": 3}}, "metadata.label"),
        ("pohunek_session_fork", {"session": "s", "name": ""}, "name"),
        ("pohunek_session_resume", {"session": "s", "cols": 0}, "cols"),
    ],
)
def test_each_refusal_names_its_field(name, args, field):
    assert refused(name, args) == field


def test_plain_text_with_tabs_and_newlines_and_null_metadata_pass():
    args = {"session": "s", "input": "a\tb\r\nc é", "submit": False}
    assert schemas.validate("pohunek_session_send", args) == args
    meta = {"session": "s", "metadata": {"priority": None}}
    assert schemas.validate("pohunek_session_set_metadata", meta) == meta
    worktree = {"agent_profile": "shell", "name": "n", "worktree": {"project": {"id": "p-1"}, "branch": "f/x"}}
    assert schemas.validate("pohunek_session_start", worktree) == worktree


FIELDS = [
    (name, path, kind)
    for name in schemas.FULL_TOOLS
    for path, kind in argument_fields(schemas.SCHEMAS[name]["parameters"])
]
BAD = {"integer": 80.0, "string": "a\ud800b"}  # a whole number spelled as a float; a lone surrogate


@pytest.mark.parametrize(("name", "path", "kind"), FIELDS, ids=[f"{n}:{p}" for n, p, _ in FIELDS])
def test_a_float_for_an_integer_and_a_lone_surrogate_in_text_are_refused_naming_the_field(name, path, kind):
    assert refused(name, with_argument(arguments_around(name, path, "s"), path, BAD[kind])) == path


def test_every_tool_takes_only_whole_numbers_and_a_surrogate_key_is_named_escaped():
    assert all(kind in ("string", "integer") for _, _, kind in FIELDS)
    assert '"number"' not in json.dumps(schemas.SCHEMAS)
    assert refused("pohunek_session_get", {"session": "s", "\ud800": 1}) == "\\ud800"
    assert refused("pohunek_sessions", {"filters": {"agent": 1e3}}) == "filters.agent"
