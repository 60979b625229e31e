"""The operator plugin's payload runs on the standard library alone, as it must inside a Hermes
that has none of this project's packages: it imports nothing else, each rule it carries a copy
of equals its source of truth, its schema check agrees with a full JSON Schema checker, no
schema uses a keyword a host's sanitizer breaks, and its report frames are byte for byte what
msgpack writes."""

from __future__ import annotations

import json

import fastjsonschema
import msgpack
import pytest
from ruamel.yaml import YAML

from hermes_cli import operator_call
from hermes_cli.operator.registration import EXPECTED_HOOKS
from shared import exit_codes, hook_vocabulary, hooks
from shared import protocol as wire
from shared.operator import policy, policy_file, tool_calls, u64
from shared.operator import protocol as p
from tests.support.operator_plugin import PAYLOAD, argument_fields, arguments_around, payload, with_argument
from tests.support.processes import ROOT

contract = payload("contract")
schemas = payload("schemas")
hook_wire = payload("hook_wire")
errors = payload("errors")

MODULES = sorted(path.stem for path in PAYLOAD.glob("*.py") if path.stem != "__init__")


def test_every_copied_value_equals_its_source_of_truth():
    sources = {
        "SESSION_ENV": p.SESSION_ENV,
        "DAEMON_ID_ENV": p.DAEMON_ID_ENV,
        "STATES": p.STATES,
        "ACTIVITIES": p.ACTIVITIES,
        "WAIT_MAX_MS": p.WAIT_MAX_MS,
        "OUTPUT_MAX_BYTES": p.OUTPUT_MAX_BYTES,
        "INPUT_MAX_BYTES": p.INPUT_MAX_BYTES,
        "MAX_COLS": p.MAX_COLS,
        "MAX_ROWS": p.MAX_ROWS,
        "ORIGIN_DENIED": p.ORIGIN_DENIED,
        "SESSION_NOT_LIVE": p.Code.SESSION_NOT_LIVE,
        "SESSION_AMBIGUOUS": p.Code.SESSION_AMBIGUOUS,
        "PROJECT_NOT_FOUND": p.Code.PROJECT_NOT_FOUND,
        "PROJECT_AMBIGUOUS": p.Code.PROJECT_AMBIGUOUS,
        "AGENT_UNKNOWN": p.Code.AGENT_UNKNOWN,
        "AGENT_FORK_UNSUPPORTED": p.Code.AGENT_FORK_UNSUPPORTED,
        "PROTOCOL_INCOMPATIBLE": wire.Code.PROTOCOL_INCOMPATIBLE,
        "MALFORMED_REPLY": wire.Code.MALFORMED_REPLY,
        "UNAVAILABLE": wire.Code.UNAVAILABLE,
        "CONNECTION_RESET": wire.Code.CONNECTION_RESET,
        "SHUTTING_DOWN": wire.Code.SHUTTING_DOWN,
        "TIMEOUT": wire.Code.TIMEOUT,
        "DEADLINE_EXCEEDED": wire.Code.DEADLINE_EXCEEDED,
        "INVALID_FIELD": wire.Code.INVALID_FIELD,
        "MISSING_FIELD": wire.Code.MISSING_FIELD,
        "UNKNOWN_FIELD": wire.Code.UNKNOWN_FIELD,
        "SESSION_OUTPUT_TIMEOUT": p.SESSION_OUTPUT.timeout,
        "SESSION_WAIT_TIMEOUT": p.SESSION_WAIT.timeout,
        "CALL_EXIT_CODES": exit_codes.CALL_CODES,
        "READ_TOOLS": policy.READ_TOOLS,
        "MANAGE_TOOLS": policy.MANAGE_TOOLS,
        "FULL_TOOLS": policy.FULL_TOOLS,
        "MAX_OUTPUT_BYTES": policy.MAX_OUTPUT_BYTES,
        "MAX_POLICY_BYTES": policy_file.MAX_POLICY_BYTES,
        "OPEN_TO_OTHERS": policy_file.OPEN_TO_OTHERS,
        "U64_MAX": u64.MAX,
        "HOOK_VERSION": hook_vocabulary.VERSION,
        "MAX_REPORT_BYTES": hook_vocabulary.MAX_REPORT_BYTES,
        "ID_PATTERN": hook_vocabulary._ID.pattern,
        "ACTIVITY_STATES": hook_vocabulary.ACTIVITY_STATES,
        "ATTENTION_REASONS": hook_vocabulary.ATTENTION_REASONS,
        "RELEASE_REASONS": hook_vocabulary.RELEASE_REASONS,
        "MAX_CONTINUATION_IDS": hook_vocabulary.MAX_CONTINUATION_IDS,
        "HOOK_ENDPOINT_ENV": hooks.ENDPOINT_ENV,
        "LAUNCH_EXE_ENV": hooks.LAUNCH_EXE_ENV,
        "LAUNCH_SCRIPT_ENV": hooks.LAUNCH_SCRIPT_ENV,
        "PTY_ROOT_PID_ENV": hooks.PTY_ROOT_PID_ENV,
        "HOOK_COUNTERS": hooks.COUNTERS,
    }
    ops = {
        n: v for n, v in vars(contract).items() if n.isupper() and isinstance(v, str) and "." in v and n not in sources
    }
    copied = {name for name in vars(contract) if name.isupper()}
    assert copied == set(sources) | set(ops), "every copy has its source here"
    assert {name: getattr(contract, name) for name in sources} == sources
    assert set(ops.values()) == set(tool_calls.TOOL_OPS)  # the ops the tools send, all of them


def test_the_manifest_names_every_tool_and_hook_the_plugin_registers():
    manifest = YAML(typ="safe").load((PAYLOAD / "plugin.yaml").read_text())
    assert manifest["provides_tools"] == list(policy.FULL_TOOLS)
    assert manifest["provides_hooks"] == list(EXPECTED_HOOKS)


def test_the_host_rule_is_the_mesh_module_byte_for_byte():
    assert (PAYLOAD / "hosts.py").read_bytes() == (ROOT / "shared" / "operator" / "hosts.py").read_bytes()


def _keys(schema):
    if isinstance(schema, dict):
        for key, value in schema.items():
            yield key
            yield from _keys(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _keys(item)


def test_no_schema_uses_a_keyword_the_check_does_not_enforce_nor_dependencies():
    for schema in schemas.SCHEMAS.values():
        assert "dependencies" not in set(_keys(schema["parameters"]))
        schemas.schema_check.supported(schema["parameters"])
    with pytest.raises(ValueError, match="dependencies"):
        schemas.schema_check.supported({"type": "object", "dependencies": {"a": ["b"]}})


SAMPLES = ["", "x", "local", "0", "01", "7", "a\nb", "a/b", "\x1b[A", "x" * 300, 0, 1, -1, 80, 8001, 2**70, True, None]


@pytest.mark.parametrize("name", schemas.FULL_TOOLS)
def test_the_schema_check_agrees_with_a_full_json_schema_checker(name):
    """Every argument of every tool, set to each sample, is taken or refused by both alike; the
    rules kept beside the schema (``REQUIRES``) are given to the full checker as ``dependencies``."""
    parameters = schemas.SCHEMAS[name]["parameters"]
    full = fastjsonschema.compile({**parameters, "dependencies": schemas.REQUIRES.get(name, {})})
    for path, _kind in argument_fields(parameters):
        for sample in SAMPLES:
            args = with_argument(arguments_around(name, path, "s-1"), path, sample)
            try:
                full(args)
                expected = True
            except fastjsonschema.JsonSchemaValueException:
                expected = False
            try:
                schemas.schema_check.check(
                    parameters, args, lambda given: schemas._missing(schemas.REQUIRES.get(name, {}), given)
                )
                taken = True
            except schemas.schema_check.Invalid:
                taken = False
            assert taken == expected, (path, sample)


FRAMES = [
    None,
    True,
    False,
    0,
    127,
    128,
    255,
    256,
    65_535,
    65_536,
    2**32,
    2**64 - 1,
    -1,
    -32,
    -33,
    -129,
    -40_000,
    -(2**31) - 1,
    1.5,
    "",
    "x" * 31,
    "x" * 32,
    "é" * 200,
    "x" * 70_000,
    list(range(15)),
    list(range(16)),
    {str(i): i for i in range(20)},
    {
        "v": 1,
        "kind": "native_id",
        "session": "s-1",
        "pid": 4242,
        "start_time": 123456789,
        "at": 1.7e9,
        "native_id": "conv",
        "resumed": False,
        "launch": {"exe": "/usr/bin/python3", "script": None, "root_pid": 7},
    },
]


@pytest.mark.parametrize("value", FRAMES, ids=range(len(FRAMES)))
def test_report_frames_are_what_msgpack_writes(value):
    assert hook_wire.pack(value) == msgpack.packb(value, use_bin_type=True)


def test_the_standalone_sender_outside_a_managed_session_counts_and_sends_nothing():
    reporter = hook_wire.Reporter({})
    assert reporter.report("activity", lambda: {"state": "working"}) is False
    assert reporter.counters()["unmanaged"] == 1


@pytest.mark.parametrize(
    ("argv", "stdin", "exit_code", "field"),
    [
        (["call"], b"", 2, "argv"),
        (["settings", "--policy"], b"", 2, "argv"),
        (["call", "--policy", "/p", "session.remove_accepting_unconfirmed"], b"{}", 2, "op"),
        (["call", "--policy", "/p", "session.list"], b"not json", 2, "request"),
        (["call", "--policy", "/p", "session.list"], b'{"args": {}, "budget_ms": 0}', 2, "budget_ms"),
        (["call", "--policy", "/p", "session.list"], b'{"args": {}, "budget_ms": true}', 2, "budget_ms"),
        (["call", "--policy", "/p", "session.list"], b'{"args": [], "budget_ms": 5}', 2, "args"),
        (["call", "--policy", "/p", "session.list"], b'{"args": {}, "budget_ms": 5, "limit_ms": 0}', 2, "limit_ms"),
        (
            ["call", "--policy", "/p", "session.list"],
            b'{"args": {}, "budget_ms": 5, "origin": {"x": "y"}}',
            2,
            "origin",
        ),
        (["call", "--policy", "/p", "session.list"], b'{"args": {}, "budget_ms": 5, "argv": []}', 2, "request"),
        (["call", "--policy", "relative", "session.list"], b'{"args": {}, "budget_ms": 5}', 3, "policy"),
        (["settings", "--policy", "/nonexistent/policy.json"], b"", 3, "policy"),
    ],
)
def test_the_operator_cli_refuses_a_malformed_call_or_policy_naming_the_field(argv, stdin, exit_code, field):
    code, answer = operator_call.run(argv, stdin)
    assert code == exit_code
    assert answer["ok"] is False and answer["error"]["field"] == field


def test_the_operator_cli_spells_bytes_so_the_plugin_reads_them_back():
    answer = {"data": b"\x00\xff text", "nested": [{"more": b""}], "plain": "text"}
    spelled = json.loads(json.dumps(operator_call.jsonable(answer)))
    assert payload("transport").from_json(spelled) == answer


def test_every_cli_failure_is_a_code_of_the_closed_set():
    runner = payload("cli_runner")
    for code in (
        "pohunek_cli_unavailable",
        "pohunek_cli_failed",
        "pohunek_cli_invalid_envelope",
        "plugin_tool_timeout",
    ):
        assert code in errors.RECOVER
        assert runner.RunFailed(code).code == code


def test_a_deeply_nested_argument_is_refused_naming_it_without_walking_it():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(errors.ToolError) as caught:
        schemas.validate("pohunek_session_wait", {"session": "s", "timeout_ms": 1, "states": [deep, deep]})
    assert caught.value.detail == {"field": "states.0"}


def test_bytes_the_cli_spelled_wrong_are_an_invalid_envelope():
    with pytest.raises(ValueError):
        payload("transport").from_json({"$bytes": "not base64!"})
