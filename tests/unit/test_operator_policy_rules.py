"""The policy's rules: the exact field set, each field's type and range, the bounds the
installer's flags share, host syntax, the host allowlist and the protocol overlap."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.operator.policy import (
    BOUNDS,
    DEFAULT_REQUEST_TIMEOUT_MS,
    FIELDS,
    LEGACY_REQUEST_TIMEOUT_MS,
    OPTIONAL_FIELDS,
    InvalidPolicy,
    check,
    check_bounds,
    host_allowed,
    overlap,
    to_fields,
    valid_host,
)
from tests.support.operator_plugin import policy_fields

ENDPOINT = "ipc:///run/pohunek/daemon.sock"


def refusal(raw) -> dict:
    """The detail of the ``InvalidPolicy`` that ``raw`` gets; fails the test when it loads."""
    with pytest.raises(InvalidPolicy) as caught:
        check(raw)
    assert caught.value.code == "hermes_invalid_policy"
    return caught.value.detail


def fields(**overrides):
    return {**policy_fields(ENDPOINT), **overrides}


# --- the field set --------------------------------------------------------------------------


def test_a_complete_policy_loads_with_its_values():
    policy = check(fields(allowed_hosts=["local", "build.example"], access_mode="full"))
    assert policy.daemon_endpoint == ENDPOINT
    assert (policy.protocol_min, policy.protocol_max) == (3, 4)
    assert policy.access_mode == "full"
    assert policy.allowed_hosts == ("local", "build.example")
    assert policy.request_timeout_ms == DEFAULT_REQUEST_TIMEOUT_MS


@pytest.mark.parametrize("name", [f for f in FIELDS if f not in OPTIONAL_FIELDS])
def test_each_required_field_missing_is_refused(name):
    raw = fields()
    del raw[name]
    detail = refusal(raw)
    assert detail["field"] == name


def test_a_legacy_policy_without_the_request_timeout_reads_the_legacy_value():
    raw = fields()
    del raw["request_timeout_ms"]
    assert check(raw).request_timeout_ms == LEGACY_REQUEST_TIMEOUT_MS


def test_a_legacy_policy_whose_tool_timeout_is_not_above_the_legacy_value_is_refused():
    raw = fields(tool_timeout_ms=LEGACY_REQUEST_TIMEOUT_MS)
    del raw["request_timeout_ms"]
    assert refusal(raw)["field"] == "request_timeout_ms"


@pytest.mark.parametrize("extra", ["pohunek_cli", "Schema_Version", "hosts"])
def test_an_extra_field_is_refused_and_named(extra):
    detail = refusal({**fields(), extra: 1})
    assert detail["field"] == extra


def test_an_extra_key_that_is_not_a_name_is_never_repeated():
    detail = refusal({**fields(), "my secret token\n": 1})
    assert detail["field"] == "policy"
    assert "secret" not in str(detail)


@pytest.mark.parametrize("raw", [[], "policy", None, 3, [fields()]])
def test_anything_but_an_object_is_refused(raw):
    assert refusal(raw)["field"] == "policy"


# --- types and ranges -----------------------------------------------------------------------

INT_FIELDS = ["protocol_min", "protocol_max", *BOUNDS]


@pytest.mark.parametrize("name", ["schema_version", *INT_FIELDS])
@pytest.mark.parametrize("value", [True, False, "3", 3.0, None, [3]])
def test_an_integer_field_refuses_other_types_and_bools(name, value):
    assert refusal(fields(**{name: value}))["field"] == name


@pytest.mark.parametrize("value", [0, 2, -1])
def test_schema_version_must_be_one(value):
    assert refusal(fields(schema_version=value))["field"] == "schema_version"


@pytest.mark.parametrize("name", INT_FIELDS)
def test_an_integer_field_refuses_zero_and_negatives(name):
    for value in (0, -1):
        assert refusal(fields(**{name: value}))["field"] == name


@pytest.mark.parametrize("name", ["tool_timeout_ms", "max_output_bytes", "max_screen_bytes", "max_concurrency"])
def test_a_bound_takes_its_ceiling_and_refuses_one_more(name):
    ceiling, flag = BOUNDS[name]
    assert getattr(check(fields(**{name: ceiling})), name) == ceiling
    detail = refusal(fields(**{name: ceiling + 1}))
    assert detail["field"] == name
    assert flag in detail["hint"] and str(ceiling) in detail["hint"]


def test_a_bound_of_one_loads():
    policy = check(
        fields(tool_timeout_ms=2, request_timeout_ms=1, max_output_bytes=1, max_screen_bytes=1, max_concurrency=1)
    )
    assert (policy.tool_timeout_ms, policy.request_timeout_ms, policy.max_concurrency) == (2, 1, 1)


@pytest.mark.parametrize("request_ms", [60_000, 60_001])
def test_the_request_timeout_cannot_reach_the_tool_timeouts_ceiling(request_ms):
    detail = refusal(fields(request_timeout_ms=request_ms))
    assert detail["field"] == "request_timeout_ms"
    assert "--request-timeout-ms" in detail["hint"]


@pytest.mark.parametrize("request_ms", [8000, 8001])
def test_the_request_timeout_must_be_below_the_tool_timeout(request_ms):
    detail = refusal(fields(tool_timeout_ms=8000, request_timeout_ms=request_ms))
    assert detail["field"] == "request_timeout_ms"
    assert "--request-timeout-ms" in detail["hint"]


def test_a_tool_timeout_of_8000_with_the_default_request_timeout_names_the_request_flag():
    with pytest.raises(InvalidPolicy) as caught:
        check_bounds(
            tool_timeout_ms=8000,
            request_timeout_ms=DEFAULT_REQUEST_TIMEOUT_MS,
            max_output_bytes=1_048_576,
            max_screen_bytes=262_144,
            max_concurrency=8,
        )
    assert caught.value.detail["field"] == "request_timeout_ms"
    assert "--request-timeout-ms" in caught.value.detail["hint"]


def test_check_bounds_accepts_the_install_defaults():
    ceilings = {name: ceiling for name, (ceiling, _) in BOUNDS.items()}
    assert check_bounds(**{**ceilings, "request_timeout_ms": DEFAULT_REQUEST_TIMEOUT_MS}) is None


def test_protocol_range_bounds():
    assert check(fields(protocol_min=1, protocol_max=2**31 - 1)).protocol_max == 2**31 - 1
    assert refusal(fields(protocol_max=2**31))["field"] == "protocol_max"
    assert refusal(fields(protocol_min=4, protocol_max=3))["field"] == "protocol_max"
    assert check(fields(protocol_min=3, protocol_max=3)).protocol_min == 3


@pytest.mark.parametrize("mode", ["read_only", "manage", "full"])
def test_each_access_mode_loads(mode):
    assert check(fields(access_mode=mode)).access_mode == mode


@pytest.mark.parametrize("mode", ["", "admin", "FULL", "full ", None, 1, ["full"]])
def test_another_access_mode_is_refused(mode):
    assert refusal(fields(access_mode=mode))["field"] == "access_mode"


@pytest.mark.parametrize("endpoint", ["ipc:///tmp/d.ctl", "tcp://daemon.example:7400", "ipc://" + "a" * 506])
def test_a_daemon_endpoint_loads(endpoint):
    assert check(fields(daemon_endpoint=endpoint)).daemon_endpoint == endpoint


@pytest.mark.parametrize(
    "endpoint",
    [
        "",
        "ipc://",
        "tcp://",
        "http://x",
        "/tmp/d.ctl",
        "ipc:///tmp/a b",
        "ipc:///tmp/a\nb",
        "ipc:///tmp/\x00",
        "ipc://" + "a" * 507,
        None,
        7,
        ["ipc:///x"],
    ],
)
def test_a_bad_daemon_endpoint_is_refused(endpoint):
    detail = refusal(fields(daemon_endpoint=endpoint))
    assert detail["field"] == "daemon_endpoint"


def test_a_refusal_never_repeats_the_value():
    detail = refusal(fields(daemon_endpoint="ipc:///secret token"))
    assert detail["field"] == "daemon_endpoint"
    with pytest.raises(InvalidPolicy) as caught:
        check(fields(access_mode="secret-mode"))
    assert "secret" not in str(caught.value) and "secret" not in str(caught.value.detail)


# --- hosts ----------------------------------------------------------------------------------

GOOD_HOSTS = ["local", "build", "build.example", "a-b.c-d.example", "x" * 63 + ".example", "Host.Example"]
BAD_HOSTS = [
    "",
    " ",
    "build example",
    " local",
    "local ",
    "build.example\n",
    "1.2.3.4",
    "127.1",
    "0x7f000001",
    "::1",
    "fe80::1",
    "[::1]",
    "2001:db8::1",
    "-build",
    "build-",
    "build..example",
    ".example",
    "example.",
    "x" * 64 + ".example",
    "b\u00fcild.example",
    "host/path",
    "host:22",
    None,
    5,
    b"local",
]


def test_a_253_char_name_is_valid_and_254_is_not():
    name = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
    assert len(name) == 253 and valid_host(name)
    assert not valid_host(name + "e")


@pytest.mark.parametrize("host", GOOD_HOSTS)
def test_a_good_host(host):
    assert valid_host(host)
    assert check(fields(allowed_hosts=[host])).allowed_hosts == (host,)


@pytest.mark.parametrize("host", BAD_HOSTS)
def test_a_bad_host(host):
    assert not valid_host(host) and not valid_host(host, allow_wildcard=True)
    assert refusal(fields(allowed_hosts=[host]))["field"] == "allowed_hosts"


def test_the_wildcard_is_a_host_only_where_allowed():
    assert not valid_host("*") and valid_host("*", allow_wildcard=True)
    assert not valid_host("*.example", allow_wildcard=True)
    assert check(fields(allowed_hosts=["*"])).allowed_hosts == ("*",)


@pytest.mark.parametrize("hosts", [[], ["local", "local"], ["*", "*"], "local", None, ("local",), {"local": 1}])
def test_a_bad_host_list_is_refused(hosts):
    assert refusal(fields(allowed_hosts=hosts))["field"] == "allowed_hosts"


def test_host_allowed_without_the_wildcard_takes_only_listed_hosts():
    policy = check(fields(allowed_hosts=["local", "build.example"]))
    assert host_allowed(policy, "local") and host_allowed(policy, "build.example")
    assert not host_allowed(policy, "other.example")
    assert not host_allowed(policy, "build.example.")
    assert not host_allowed(policy, "*")


def test_host_allowed_with_the_wildcard_takes_any_valid_name_but_no_ip_or_junk():
    policy = check(fields(allowed_hosts=["*"]))
    assert host_allowed(policy, "local") and host_allowed(policy, "any.example")
    for host in ["10.0.0.2", "::1", "bad host", "", "*", "x" * 254]:
        assert not host_allowed(policy, host)


def test_an_ip_literal_is_never_allowed_even_when_nothing_else_would_stop_it():
    policy = check(fields(allowed_hosts=["local"]))
    forged = dataclasses.replace(policy, allowed_hosts=("10.0.0.2",))
    assert not host_allowed(forged, "10.0.0.2")


# --- overlap and round trip -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("low", "high", "expected"), [(3, 3, (3, 3)), (3, 4, (3, 4)), (1, 2, None), (5, 6, None), (1, 9, (3, 4))]
)
def test_overlap_with_the_client_window(low, high, expected):
    policy = check(fields(protocol_min=low, protocol_max=high))
    assert overlap(policy, (3, 4)) == expected


def test_to_fields_round_trips_through_check():
    policy = check(
        fields(
            access_mode="read_only",
            allowed_hosts=["*", "local"],
            tool_timeout_ms=9000,
            request_timeout_ms=8999,
            operator_cli="/opt/mesh/bin/hermes-operator",
        )
    )
    written = to_fields(policy)
    assert list(written) == list(FIELDS)
    assert check(written) == policy


def test_a_policy_without_the_operator_cli_has_none_and_writes_none():
    policy = check(fields())
    assert policy.operator_cli is None
    assert "operator_cli" not in to_fields(policy)


@pytest.mark.parametrize(
    "value", ["hermes-operator", "./bin/hermes-operator", "", 7, None, "/bin/x\nother", "/" * 4097]
)
def test_an_operator_cli_that_is_not_an_absolute_printable_path_is_refused(value):
    assert refusal(fields(operator_cli=value))["field"] == "operator_cli"


def test_to_fields_writes_the_legacy_request_timeout_out():
    raw = fields()
    del raw["request_timeout_ms"]
    assert to_fields(check(raw))["request_timeout_ms"] == LEGACY_REQUEST_TIMEOUT_MS


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


@given(st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=3))
def test_junk_in_the_known_fields_raises_only_invalid_policy(junk):
    raw = {**fields(), **junk}
    try:
        policy = check(raw)
    except InvalidPolicy as exc:
        assert exc.detail is not None and set(exc.detail) == {"field", "hint"}
    else:
        assert check(to_fields(policy)) == policy


@given(JSON)
def test_any_json_value_raises_only_invalid_policy(raw):
    with pytest.raises(InvalidPolicy):
        check(raw)


@given(st.one_of(st.text(max_size=300), st.integers(), st.none(), st.binary(max_size=10)))
def test_valid_host_is_a_plain_yes_or_no(value):
    result = valid_host(value, allow_wildcard=True)
    assert result is True or result is False
