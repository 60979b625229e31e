"""The one permitted start over a real simulator: a late reply is found again by name with
exactly one ``session.new`` sent; a dropped start, a look-alike, two of the name or a runtime
that stays down past the budget remain typed failures. Last, the closed set of codes: every
one is produced by some test of the plugin."""

from __future__ import annotations

import pytest

from shared.operator import protocol as p
from simulators.operator_sim.ops import SIM_CONFIGURE, SIM_COUNTERS
from tests.support.operator_plugin import payload
from tests.support.operator_tools import MAPPING_ONLY, PRODUCED, Tools, code, result, simulator

pytestmark = pytest.mark.slow

BUDGET = {"tool_timeout_ms": 5000, "request_timeout_ms": 1000}
FAULTS = ("start_reply_delay_ms", "start_drop", "start_runtime_delay_ms")


@pytest.fixture(scope="module")
def daemon_sim():
    with simulator(projects=("web", "site"), reporter=False) as sim:  # two labels, one repository
        yield sim


@pytest.fixture
def faults(daemon_sim):
    """Set start faults for one test; all are cleared after it."""
    yield lambda **set_: daemon_sim.daemon.call(SIM_CONFIGURE, set_)
    daemon_sim.daemon.call(SIM_CONFIGURE, dict.fromkeys(FAULTS, 0))


@pytest.fixture(scope="module")
def tools(daemon_sim):
    return Tools(daemon_sim.address, **BUDGET)


def starts(daemon_sim, name):
    return daemon_sim.daemon.call(SIM_COUNTERS)["session_new_by_name"].get(name, 0)


def start_args(name, agent="shell", **extra):
    return {"agent_profile": agent, "name": name, "project": {"label": "web"}, **extra}


def test_a_late_reply_is_recovered_with_exactly_one_start(tools, daemon_sim, faults):
    faults(start_reply_delay_ms=2500)
    recovered = result(tools("pohunek_session_start", start_args("late")))
    assert recovered["recovered"] is True and recovered["session"]["runtime"]["state"] == "live"
    assert recovered["runtime_generation"] == "1" and recovered["worker_instance_id"]
    assert starts(daemon_sim, "late") == 1


def test_a_runtime_that_goes_live_late_is_waited_for(tools, daemon_sim, faults):
    faults(start_reply_delay_ms=2000, start_runtime_delay_ms=2500)
    recovered = result(tools("pohunek_session_start", start_args("slow-live")))
    assert recovered["recovered"] is True and recovered["session"]["state"] == "running"
    assert starts(daemon_sim, "slow-live") == 1


def test_a_dropped_start_is_a_request_timeout_and_never_sent_again(tools, daemon_sim, faults):
    faults(start_drop=1)
    dropped = tools("pohunek_session_start", start_args("dropped"))
    assert code(dropped) == "request_timeout"
    assert dropped["error"]["recover"].startswith("do not start again")
    assert starts(daemon_sim, "dropped") == 1
    assert daemon_sim.daemon.call(p.SESSION_LIST, {"host": "local", "name": "dropped"})["sessions"] == []


def test_a_runtime_down_past_the_budget_is_a_request_timeout(tools, daemon_sim, faults):
    faults(start_reply_delay_ms=2000, start_runtime_delay_ms=60_000)
    assert code(tools("pohunek_session_start", start_args("never-live"))) == "request_timeout"
    assert starts(daemon_sim, "never-live") == 1
    [entry] = daemon_sim.daemon.call(p.SESSION_LIST, {"host": "local", "name": "never-live"})["sessions"]
    assert entry["state"] == "starting"


def test_two_of_the_name_are_ambiguous(tools, daemon_sim, faults):
    project = {"project": "web"}
    daemon_sim.start("twice", **project)
    daemon_sim.start("twice", **project)
    faults(start_drop=1)
    assert code(tools("pohunek_session_start", start_args("twice"))) == "plugin_ambiguous_session"
    assert starts(daemon_sim, "twice") == 3  # the two above, and the tool's one


@pytest.mark.parametrize(
    ("existing", "asked"),
    [
        ({"agent": "shell"}, {"agent": "hermes"}),
        ({"branch": "one"}, {"branch": "two"}),
        ({"branch": None}, {"branch": "three"}),
    ],
    ids=["agent", "branch", "no-worktree"],
)
def test_a_look_alike_is_a_conflict(tools, daemon_sim, faults, existing, asked):
    name = f"alike-{asked.get('agent') or asked['branch']}"
    extra = {"project": "web"} | ({"branch": existing["branch"]} if existing.get("branch") else {})
    daemon_sim.start(name, **extra)
    faults(start_drop=1)
    args = start_args(name, agent=asked.get("agent", "shell"))
    if "branch" in asked:
        del args["project"]
        args["worktree"] = {"project": {"label": "web"}, "branch": asked["branch"]}
    assert code(tools("pohunek_session_start", args)) == "plugin_session_conflict"
    assert starts(daemon_sim, name) == 2


def test_a_finished_session_of_the_name_is_a_conflict(tools, daemon_sim, faults):
    sid = daemon_sim.start("finished", project="web")["id"]
    result(tools("pohunek_session_send", {"session": sid, "input": "exit"}))
    result(tools("pohunek_session_wait", {"session": sid, "states": ["done"], "timeout_ms": 8000}))
    faults(start_drop=1)
    assert code(tools("pohunek_session_start", start_args("finished"))) == "plugin_session_conflict"
    assert starts(daemon_sim, "finished") == 2


def test_projects_resolve_to_one_and_input_is_bounded_in_bytes(tools, daemon_sim):
    [web, site] = sorted(
        daemon_sim.daemon.call(p.PROJECT_LIST, {"host": "local"})["projects"], key=lambda x: x["label"]
    )[::-1]
    assert web["id"] == site["id"]  # two labels of one repository
    by_id = {"agent_profile": "shell", "name": "by-id", "project": {"id": web["id"]}}
    assert code(tools("pohunek_session_start", by_id)) == "plugin_ambiguous_project"
    wide = start_args("wide", initial_input="é" * 40_000)  # 40,000 characters, 80,000 bytes
    refused = tools("pohunek_session_start", wide)
    assert (code(refused), refused["error"]["detail"]) == ("plugin_invalid_request", {"field": "initial_input"})
    assert starts(daemon_sim, "by-id") == starts(daemon_sim, "wide") == 0
    typed = result(tools("pohunek_session_start", start_args("typed", initial_input="echo typed-in")))
    assert typed["session"]["project_id"] == web["id"]


def test_every_code_of_the_closed_set_is_produced(request):
    """Runs last: the other operator tool modules must have run first in this session."""
    modules = {item.module.__name__.rpartition(".")[2] for item in request.session.items}
    before = {
        item.module.__name__.rpartition(".")[2]
        for item in request.session.items[: request.session.items.index(request.node)]
    }
    wanted = {
        "test_operator_tools",
        "test_operator_tools_cli",
        "test_operator_tools_guard",
        "test_operator_tools_start",
    }
    if not wanted <= before | {"test_operator_tools_start"} or not wanted <= modules:
        pytest.skip("needs the whole set of operator tool tests, run before this one")
    errors = payload("errors")
    assert PRODUCED | MAPPING_ONLY == set(errors.RECOVER), sorted(set(errors.RECOVER) - PRODUCED - MAPPING_ONLY)
    assert not PRODUCED & MAPPING_ONLY
