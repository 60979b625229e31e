"""How parallel workers share the suite (tests/support/parallel.py): the units of work."""

from __future__ import annotations

from tests.support.parallel import HOST, OPERATOR_TOOLS, unit_of


def test_the_host_tiers_and_the_host_modules_are_one_unit():
    assert unit_of("tests/systemd/test_update_fleet.py::test_a") == HOST
    assert unit_of("tests/containers/test_mesh.py::test_b[x]") == HOST
    assert unit_of("tests/e2e/test_two_hosts.py::test_c") == HOST


def test_the_operator_tool_modules_are_one_unit_as_their_last_test_reads_what_all_produced():
    for module in (
        "test_operator_tools",
        "test_operator_tools_cli",
        "test_operator_tools_guard",
        "test_operator_tools_start",
    ):
        assert unit_of(f"tests/e2e/{module}.py::test_x") == OPERATOR_TOOLS


def test_a_fast_tier_or_a_module_fixture_makes_its_module_one_unit():
    assert unit_of("tests/unit/test_protocol.py::test_a[1]") == "tests/unit/test_protocol.py"
    assert unit_of("tests/service/test_pubsub.py::test_b") == "tests/service/test_pubsub.py"
    every = "tests/e2e/test_every_command.py"  # one run of every command, read by each of its tests
    assert unit_of(f"{every}::test_nothing_is_left_running") == every


def test_any_other_test_is_a_unit_alone():
    assert unit_of("tests/e2e/test_version.py::test_packed_refs") == "tests/e2e/test_version.py::test_packed_refs"
