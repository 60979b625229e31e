"""The probe's document read strictly: every field and type checked, anything else one typed
``ProbeFailed`` (malformed) that names a field, never what the document held."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_cli.operator.hermes_bin import OUTPUT_CAP
from hermes_cli.operator.probe_client import ProbeFailed, parse_result
from hermes_cli.operator.registration import EXPECTED_HOOKS
from shared.operator.policy import FULL_TOOLS

SECRET = "sk-live the owner's password"
GOOD: dict[str, Any] = {
    "schema": 1,
    "loaded": True,
    "error": None,
    "state": "ready",
    "policy_bound": True,
    "tools": sorted(FULL_TOOLS),
    "skills": ["pohunek"],
    "hooks": list(EXPECTED_HOOKS),
    "hook_dry_run": {
        "calls": 7,
        "forbidden": [],
        "escaped": [],
        "forced_failure_swallowed": True,
        "latency_ms": 4,
    },
}


def raw(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def spoiled(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(GOOD)
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


def test_a_good_document_is_read_into_its_result():
    result = parse_result(raw(GOOD))
    assert (result.loaded, result.error, result.state) == (True, None, "ready")
    assert result.tools == tuple(sorted(FULL_TOOLS)) and result.skills == ("pohunek",)
    assert result.hooks == EXPECTED_HOOKS
    dry = result.hook_dry_run
    assert (dry.calls, dry.forbidden, dry.escaped, dry.forced_failure_swallowed, dry.latency_ms) == (7, (), (), True, 4)


def test_findings_of_a_bad_plugin_are_read_not_refused():
    doc = spoiled(("hook_dry_run", "forbidden"), ["socket.connect", "subprocess.Popen"])
    doc["hook_dry_run"]["escaped"] = ["pre_llm_call"]
    doc.update(loaded=False, error="import_failed", state=None, tools=[], skills=[])
    result = parse_result(raw(doc))
    assert result.hook_dry_run.forbidden == ("socket.connect", "subprocess.Popen")
    assert (result.loaded, result.error, result.hook_dry_run.escaped) == (False, "import_failed", ("pre_llm_call",))


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("schema",), 2),
        (("schema",), True),
        (("loaded",), 1),
        (("error",), SECRET),
        (("error",), 3),
        (("error",), "not_a_load_error"),
        (("state",), ["ready"]),
        (("policy_bound",), "yes"),
        (("policy_bound",), None),
        (("tools",), "pohunek_hosts"),
        (("tools",), ["pohunek_sessions", "pohunek_hosts"]),  # not sorted
        (("tools",), ["pohunek_hosts", "pohunek_hosts"]),
        (("tools",), [f"{SECRET} tool"]),
        (("tools",), [f"t{i}" for i in range(65)]),
        (("skills",), [SECRET]),
        (("hooks",), ["not_a_hermes_hook"]),
        (("hooks",), [None]),
        (("hook_dry_run",), []),
        (("hook_dry_run", "calls"), 7.0),
        (("hook_dry_run", "calls"), -1),
        (("hook_dry_run", "calls"), False),
        (("hook_dry_run", "forbidden"), [SECRET]),
        (("hook_dry_run", "escaped"), ["pre_llm_call: RuntimeError"]),
        (("hook_dry_run", "forced_failure_swallowed"), "true"),
        (("hook_dry_run", "latency_ms"), None),
        (("hook_dry_run", "latency_ms"), 10**12),
    ],
)
def test_a_field_of_the_wrong_kind_is_malformed_and_not_echoed(path, value):
    with pytest.raises(ProbeFailed) as failed:
        parse_result(raw(spoiled(path, value)))
    assert failed.value.code == "plugin_probe_failed" and failed.value.detail == {"reason": "malformed"}
    assert SECRET not in failed.value.message


@pytest.mark.parametrize("where", [(), ("hook_dry_run",)])
def test_a_missing_or_an_extra_field_is_malformed(where):
    extra, missing = copy.deepcopy(GOOD), copy.deepcopy(GOOD)
    for doc, change in ((extra, "add"), (missing, "drop")):
        target = doc
        for key in where:
            target = target[key]
        if change == "add":
            target["payload"] = SECRET
        else:
            target.pop(next(iter(target)))
        with pytest.raises(ProbeFailed) as failed:
            parse_result(raw(doc))
        assert failed.value.detail == {"reason": "malformed"} and SECRET not in failed.value.message


@pytest.mark.parametrize(
    "junk", [b"", b"not json", b"\xff\xfe", b"[" * 100_000, raw(GOOD) + b"\n{}", b"NaN", b"x" * OUTPUT_CAP]
)
def test_what_is_no_single_document_is_malformed(junk):
    with pytest.raises(ProbeFailed) as failed:
        parse_result(junk)
    assert failed.value.detail == {"reason": "malformed"}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_junk_bytes_only_ever_give_the_typed_error(junk):
    with pytest.raises(ProbeFailed):
        parse_result(junk)


@settings(max_examples=300, deadline=None)
@given(path=st.sampled_from([("tools",), ("hooks",), ("hook_dry_run",), ("state",), ("skills",)]), value=JSON)
def test_junk_in_a_field_is_read_or_refused_with_the_typed_error_only(path, value):
    try:
        result = parse_result(raw(spoiled(path, value)))
    except ProbeFailed as failed:
        assert failed.detail == {"reason": "malformed"}
    else:
        assert result.loaded is True
