"""The multiplex gateway as a real process: one process, several profiles, each in its own
home with its own lock, sockets, state file and scope."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys

import pytest

from shared import exit_codes, homes
from shared.gateways import ops
from shared.mesh_tcp import TCP_ENV
from shared.protocol import RemoteError
from shared.transport.sync_client import SyncClient, connect
from tests.support.cli import hermes, hermes_json
from tests.support.homes import make_profile
from tests.support.processes import ROOT, GatewayProcess, parallel, python_env, read_state, wait_for
from tests.support.tcp import free_port_pair

LAUNCH_KEY = "sk-launch-environment-0001"


def call(root, profile, spec, args=None, **kwargs):
    endpoint = homes.endpoint(homes.profile_home(profile, root), ops.SERVICE, create=False)
    with SyncClient(endpoint.control) as client:
        return client.call(spec, args or {}, **kwargs)


def answers_status(root, profile) -> bool:
    try:
        call(root, profile, ops.STATUS, timeout=5.0)
    except RemoteError:
        return False
    return True


def unanswered_claims(root, profiles):
    """(a profile, a profile its state file names) for every profile a state file of ``profiles``
    says is served, running or draining, whose control socket does not answer ``status``."""
    claims = []
    for profile in profiles:
        state = read_state(homes.profile_home(profile, root))
        if state and state["gateway_state"] in ("running", "draining"):
            claims += [(profile, named) for named in state["served_profiles"] if not answers_status(root, named)]
    return claims


def paused_at(step: str) -> dict[str, str]:
    return python_env(HERMES_FAULT_PAUSE_AT=step)


def once_in_flight(root, profiles, then):
    """A call for ``parallel``: ``then()``, once each of ``profiles`` has one turn in flight."""

    def step():
        wait_for(
            lambda: all(read_state(homes.profile_home(p, root))["active_turns"] == 1 for p in profiles),
            timeout=10,
            what=f"a turn in flight on {', '.join(profiles)}",
        )
        return then()

    return step


def fingerprint(value: str) -> str:
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:16]


def own_files(root, profile: str, *, key: str | None, model: str) -> None:
    home = make_profile(root, profile) if profile != homes.DEFAULT_PROFILE else root
    (home / "config.yaml").write_text(f"model: {model}\n")
    if key is not None:
        (home / ".env").write_text(f"# {profile}'s own\nOPENROUTER_API_KEY={key}\n")


@pytest.fixture
def fleet(root):
    """default, coder and writer with their own models and keys; research with a model and no key."""
    for profile, key in (("default", None), ("coder", "sk-coder-0001"), ("writer", "sk-writer-0001")):
        own_files(root, profile, key=key, model=f"{profile}-model")
    own_files(root, "research", key=None, model="research-model")
    return root


def test_concurrent_turns_of_served_profiles_each_see_only_their_own_home_config_and_secrets(fleet):
    # Launched in the root home with a key in its environment: the launch profile's, no one else's.
    env = python_env(HERMES_HOME=str(fleet), OPENROUTER_API_KEY=LAUNCH_KEY)
    program = (
        "import os, sys; from services.gateway.main import run_gateway; "
        "code = run_gateway(serve='research,writer,coder,default'); "
        "print(os.environ['HERMES_HOME']); sys.exit(code)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", program], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        served = ["default", "coder", "research", "writer"]
        wait_for(
            lambda: all(
                (s := read_state(homes.profile_home(p, fleet))) and s["gateway_state"] == "running" for p in served
            ),
            timeout=20,
            what="every served profile running",
        )
        turns = [
            lambda p=p, i=i: call(fleet, p, ops.TURN, {"text": f"{p}-{i}", "seconds": 0.3})
            for i in range(3)
            for p in served
        ]
        answers = parallel(turns)
        expected = {
            "default": fingerprint(LAUNCH_KEY),
            "coder": fingerprint("sk-coder-0001"),
            "writer": fingerprint("sk-writer-0001"),
            "research": None,  # no key of its own, and the launch environment is not its to borrow
        }
        assert not [a for a in answers if isinstance(a, Exception)], answers
        for answer in answers:
            profile = answer["text"].split("-")[0]
            assert answer["profile"] == profile
            assert answer["home"] == str(homes.profile_home(profile, fleet))
            assert answer["model"] == f"{profile}-model"
            assert answer["provider_key"] == expected[profile]
        # The turns overlapped: all twelve were in flight together in one process.
        starts = max(a["started_at"] for a in answers)
        assert all(a["finished_at"] > starts for a in answers)
        assert len({a["turn_id"] for a in answers}) == 12
        statuses = {p: call(fleet, p, ops.STATUS) for p in served}
        assert {s["pid"] for s in statuses.values()} == {proc.pid}
        assert {s["instance_id"] for s in statuses.values()} != {None} and len(
            {s["instance_id"] for s in statuses.values()}
        ) == 1
        assert all(
            s["served_profiles"] == served and s["home"] == str(homes.profile_home(p, fleet))
            for p, s in statuses.items()
        )
        for secret in ("sk-coder-0001", "sk-writer-0001", LAUNCH_KEY):
            assert secret not in repr(answers) + repr(statuses)
        assert call(fleet, "writer", ops.DRAIN, {"deadline": 5.0})["exit_code"] == exit_codes.PLANNED_RESTART
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == exit_codes.PLANNED_RESTART, err[-2000:]
    assert out.strip() == str(fleet)  # HERMES_HOME stayed the launch profile's throughout


def test_a_served_profile_has_one_owner_either_way(fleet, gateways):
    multiplex = gateways(fleet, "default", serve=["coder", "writer"])
    second = GatewayProcess(fleet, "writer")
    assert second.wait_exit() == exit_codes.DUPLICATE
    assert b"profile 'writer' already has a running gateway" in second.proc.stderr.read()
    other = GatewayProcess(fleet, "default", serve=["writer", "research"])
    assert other.wait_exit() == exit_codes.DUPLICATE
    # The reverse: a per-profile gateway holds research, so a multiplex wanting it starts not at all.
    research = gateways(fleet, "research")
    refused = GatewayProcess(fleet, "default", serve=["default", "research"])
    assert refused.wait_exit() == exit_codes.DUPLICATE
    assert b"profile 'research' already has a running gateway" in refused.proc.stderr.read()
    # It held none of the locks it took on the way: the default profile is free to be served.
    default = gateways(fleet, "default")
    assert call(fleet, "default", ops.STATUS)["pid"] == default.pid
    assert call(fleet, "research", ops.STATUS)["pid"] == research.pid
    for profile in ("coder", "writer"):
        assert call(fleet, profile, ops.STATUS)["pid"] == multiplex.pid


def test_a_drain_on_one_served_profile_drains_every_one_and_the_process_exits_once(fleet, gateways):
    multiplex = gateways(fleet, "default", serve=["coder", "writer", "research"])
    results = parallel(
        [
            lambda: call(fleet, "coder", ops.TURN, {"text": "long coder", "seconds": 1.0}),
            lambda: call(fleet, "writer", ops.TURN, {"text": "long writer", "seconds": 1.0}),
            lambda: call(fleet, "research", ops.TURN, {"text": "endless", "seconds": 120}),
            once_in_flight(
                fleet, ("coder", "writer", "research"), lambda: call(fleet, "writer", ops.DRAIN, {"deadline": 3.0})
            ),
        ]
    )
    coder, writer, research, drained = results
    assert (coder["text"], writer["text"]) == ("long coder", "long writer")
    assert isinstance(research, RemoteError) and research.code == "turn_cut"
    assert sorted(drained["finished"]) == sorted([coder["turn_id"], writer["turn_id"]])
    assert drained["cut"] == [research.detail["turn_id"]]
    assert drained["profiles"] == ["coder", "research", "writer"]
    assert multiplex.wait_exit() == exit_codes.PLANNED_RESTART
    for profile in ("coder", "research", "writer"):
        state = read_state(homes.profile_home(profile, fleet))
        assert (state["gateway_state"], state["restart_requested"]) == ("stopped", True)


def test_a_reexec_brings_every_served_profile_back_in_the_same_pid(fleet, gateways):
    multiplex = gateways(fleet, "default", serve=["coder", "writer"])
    before = call(fleet, "coder", ops.STATUS)["instance_id"]
    assert call(fleet, "coder", ops.REEXEC, {"deadline": 5.0})["profiles"] == ["coder", "writer"]

    def fresh():
        states = [read_state(homes.profile_home(p, fleet)) for p in ("coder", "writer")]
        return all(s["gateway_state"] == "running" and s["instance_id"] != before for s in states)

    wait_for(fresh, timeout=30, what="both profiles served by the re-executed process")
    for profile in ("coder", "writer"):
        status = call(fleet, profile, ops.STATUS)
        assert (status["pid"], status["served_profiles"]) == (multiplex.pid, ["coder", "writer"])
        assert "--serve" in status["argv"]


def test_a_deleted_profile_is_let_go_while_the_others_serve_on(fleet, gateways):
    multiplex = gateways(fleet, "default", serve=["coder", "writer"])
    cut, deleted = parallel(
        [
            lambda: call(fleet, "writer", ops.TURN, {"text": "in flight", "seconds": 120}),
            once_in_flight(fleet, ("writer",), lambda: shutil.rmtree(homes.profile_home("writer", fleet))),
        ]
    )
    assert isinstance(cut, RemoteError) and cut.code == "turn_cut"
    coder_home = homes.profile_home("coder", fleet)
    wait_for(lambda: read_state(coder_home)["served_profiles"] == ["coder"], timeout=15, what="writer let go")
    assert multiplex.proc.poll() is None
    answer = call(fleet, "coder", ops.TURN, {"text": "still here"})
    assert (answer["text"], answer["profile"]) == ("still here", "coder")
    assert call(fleet, "coder", ops.STATUS)["pid"] == multiplex.pid


def test_a_profile_that_cannot_be_served_is_left_out_and_named(fleet, gateways):
    (homes.profile_home("writer", fleet) / ".env").write_text("OPENROUTER_API_KEY sk-broken-value\n")
    multiplex = GatewayProcess(fleet, "default", serve=["coder", "writer", "absent"])
    wait_for(
        lambda: (s := read_state(homes.profile_home("coder", fleet))) and s["gateway_state"] == "running",
        timeout=20,
        what="coder served",
    )
    try:
        assert call(fleet, "coder", ops.STATUS)["served_profiles"] == ["coder"]
        # writer's lock was let go with it: once its file is fixed, its own gateway starts.
        (homes.profile_home("writer", fleet) / ".env").write_text("OPENROUTER_API_KEY=sk-fixed\n")
        writer = gateways(fleet, "writer")
        assert call(fleet, "writer", ops.STATUS)["pid"] == writer.pid
    finally:
        multiplex.kill()
    err = multiplex.proc.stderr.read().decode()
    assert "not serving profile 'writer'" in err and "line 1: not a NAME=value line" in err
    assert "not serving profile 'absent'" in err
    assert "sk-broken-value" not in err


def test_nothing_to_serve_and_a_broken_set_exit_78(fleet):
    (homes.profile_home("coder", fleet) / ".env").write_text("junk line with sk-secret-9\n")
    for serve, message in (
        (["coder", "absent"], b"no profile to serve could be read"),
        (["absent", "gone"], b"none of the profiles to serve has a home"),
        (["Bad"], b"invalid profile name"),
        (["coder", "coder"], b"more than once"),
    ):
        proc = GatewayProcess(fleet, "default", serve=serve)
        assert proc.wait_exit() == exit_codes.CONFIG, serve
        err = proc.proc.stderr.read()
        assert message in err and b"sk-secret-9" not in err
    single = GatewayProcess(fleet, "coder")
    assert single.wait_exit() == exit_codes.CONFIG
    assert b"line 1: not a NAME=value line" in single.proc.stderr.read()


def test_a_released_profile_is_let_go_and_can_be_served_by_its_own_gateway(fleet, gateways):
    multiplex = gateways(fleet, "default", serve=["coder", "writer"])
    turn, answer = parallel(
        [
            lambda: call(fleet, "writer", ops.TURN, {"text": "finishes", "seconds": 0.5}),
            once_in_flight(fleet, ("writer",), lambda: call(fleet, "writer", ops.RELEASE, {"deadline": 10.0})),
        ]
    )
    assert (answer["released"], answer["served_profiles"], answer["finished"]) == (
        "writer",
        ["coder"],
        [turn["turn_id"]],
    )
    writer = gateways(fleet, "writer")  # its lock is free: its own gateway takes it
    assert call(fleet, "writer", ops.STATUS)["pid"] == writer.pid
    assert call(fleet, "coder", ops.STATUS)["served_profiles"] == ["coder"]
    assert call(fleet, "coder", ops.STATUS)["pid"] == multiplex.pid
    with pytest.raises(RemoteError) as refused:
        call(fleet, "coder", ops.RELEASE, {"deadline": 1.0})
    assert refused.value.code == ops.NOT_MULTIPLEX
    assert call(fleet, "coder", ops.TURN, {"text": "on"})["text"] == "on"


def test_profile_delete_has_the_multiplex_gateway_let_the_profile_go_first(fleet, gateways):
    multiplex = gateways(fleet, "default", serve=["coder", "writer"])
    code, out = hermes_json("profile", "delete", "writer", "--yes", home=fleet)
    assert code == 0, out
    assert out["deleted"] == "writer" and out["released_by_multiplex"]["served_profiles"] == ["coder"]
    assert not homes.profile_home("writer", fleet).exists()
    assert (call(fleet, "coder", ops.STATUS)["pid"], multiplex.proc.poll()) == (multiplex.pid, None)
    # A per-profile gateway is not let go: its profile stays and the delete is refused.
    gateways(fleet, "research")
    code, out = hermes_json("profile", "delete", "research", "--yes", home=fleet)
    assert code != 0 and out["error"]["code"] == "profile_busy"
    assert homes.profile_home("research", fleet).is_dir()


def test_served_profiles_on_tcp_each_answer_over_curve_with_their_own_key(fleet, gateways):
    assert hermes("mesh", "keys", "init", home=fleet).returncode == 0
    first, second = free_port_pair(), free_port_pair()
    while abs(first - second) < 2:
        second = free_port_pair()
    env = {TCP_ENV: f"gateway=tcp://127.0.0.1:{first},gateway@coder=tcp://127.0.0.1:{second}"}
    multiplex = gateways(fleet, "default", env=python_env(**env), serve=["default", "coder"])
    assert not (fleet / "run" / "gateway.ctl").exists()  # nothing on ipc
    code, listed = hermes_json("gateway", "status", home=fleet, env_extra=env)
    assert code == 0
    assert [(g["profile"], g["pid"], g["source"]) for g in listed["gateways"]] == [
        ("default", multiplex.pid, "socket"),
        ("coder", multiplex.pid, "socket"),
    ]
    for profile in ("default", "coder"):
        endpoint = homes.endpoint(homes.profile_home(profile, fleet), ops.SERVICE, env=env)
        assert endpoint.key_name == ("gateway" if profile == "default" else "gateway@coder")
        with connect(endpoint) as client:
            assert client.call(ops.TURN, {"text": "over curve"})["profile"] == profile


def test_gateway_drain_of_a_served_profile_says_the_whole_process_drains(fleet, gateways):
    multiplex = gateways(fleet, "default", serve=["coder", "writer"])
    done = hermes("-p", "coder", "gateway", "drain", "--deadline", "1", home=fleet)
    assert done.returncode == 0, done.stderr
    assert (
        f"drained gateway coder (pid {multiplex.pid}), with the profiles its process also serves (writer)"
        in done.stdout
    )
    assert multiplex.wait_exit() == exit_codes.PLANNED_RESTART
    multiplex = gateways(fleet, "default", serve=["coder", "writer"])
    code, out = hermes_json("-p", "writer", "gateway", "drain", "--deadline", "1", home=fleet)
    assert (code, out["profile"], out["profiles"], out["pid"]) == (0, "writer", ["coder", "writer"], multiplex.pid)


def test_a_reexec_tries_again_the_profiles_left_out_at_start(fleet, gateways):
    (homes.profile_home("writer", fleet) / ".env").write_text("OPENROUTER_API_KEY sk-broken-value\n")
    multiplex = GatewayProcess(fleet, "default", serve=["coder", "writer"])
    try:
        coder = homes.profile_home("coder", fleet)
        wait_for(lambda: (s := read_state(coder)) and s["gateway_state"] == "running", timeout=20, what="coder")
        assert call(fleet, "coder", ops.STATUS)["served_profiles"] == ["coder"]
        (homes.profile_home("writer", fleet) / ".env").write_text("OPENROUTER_API_KEY=sk-writer-0001\n")
        call(fleet, "coder", ops.REEXEC, {"deadline": 5.0})
        wait_for(
            lambda: (
                (s := read_state(coder))["served_profiles"] == ["coder", "writer"] and s["gateway_state"] == "running"
            ),
            timeout=30,
            what="writer served after the re-exec",
        )
        answer = call(fleet, "writer", ops.TURN, {"text": "back"})
        assert (answer["profile"], answer["provider_key"]) == ("writer", fingerprint("sk-writer-0001"))
        assert call(fleet, "writer", ops.STATUS)["pid"] == multiplex.pid
    finally:
        multiplex.kill()


@pytest.mark.parametrize(
    ("profile", "serve", "held"),
    [("default", None, "default"), ("default", ["coder", "writer"], "writer")],
    ids=["per-profile", "multiplex"],
)
def test_no_state_file_claims_a_socket_that_is_not_bound_yet(fleet, profile, serve, held):
    gateway = GatewayProcess(fleet, profile, serve=serve, env=paused_at(f"gateway:binding:{held}"))
    try:
        gateway.wait_paused(f"gateway:binding:{held}")
        served = serve or [profile]
        assert not answers_status(fleet, held)
        assert unanswered_claims(fleet, served) == []
        for bound in (p for p in served if p != held):  # serving already, and naming only what answers
            assert call(fleet, bound, ops.STATUS)["served_profiles"] == [bound]
    finally:
        gateway.kill()


def test_a_reexec_claims_a_profile_it_tries_again_only_once_it_answers(fleet):
    (homes.profile_home("writer", fleet) / ".env").write_text("OPENROUTER_API_KEY sk-broken-value\n")
    multiplex = GatewayProcess(fleet, "default", serve=["coder", "writer"], env=paused_at("gateway:binding:writer"))
    try:
        coder = homes.profile_home("coder", fleet)
        wait_for(lambda: (s := read_state(coder)) and s["gateway_state"] == "running", timeout=20, what="coder")
        (homes.profile_home("writer", fleet) / ".env").write_text("OPENROUTER_API_KEY=sk-writer-0001\n")
        call(fleet, "coder", ops.REEXEC, {"deadline": 5.0})
        multiplex.wait_paused("gateway:binding:writer")  # the new image, with coder serving again
        wait_for(lambda: answers_status(fleet, "coder"), timeout=20, what="coder answering the new image")
        assert unanswered_claims(fleet, ["coder", "writer"]) == []
        assert call(fleet, "coder", ops.STATUS)["served_profiles"] == ["coder"]
    finally:
        multiplex.kill()


def test_a_released_profile_is_no_longer_claimed_once_its_socket_is_closed(fleet, gateways):
    multiplex = gateways(fleet, "default", serve=["coder", "writer"], env=paused_at("gateway:closed:writer"))
    assert call(fleet, "writer", ops.RELEASE, {"deadline": 1.0})["served_profiles"] == ["coder"]
    multiplex.wait_paused("gateway:closed:writer")
    assert not answers_status(fleet, "writer")
    assert unanswered_claims(fleet, ["coder", "writer"]) == []
    assert call(fleet, "coder", ops.STATUS)["served_profiles"] == ["coder"]
