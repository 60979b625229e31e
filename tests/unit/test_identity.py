"""Process identities (pid + start time) of this process and of pids that are not there."""

from __future__ import annotations

import os

import psutil
import pytest

from shared.identity import (
    ProcessIdentity,
    ancestor_pids,
    current_identity,
    is_alive,
    process_identity,
    read_cmdline,
)

# --- process identity ------------------------------------------------------------------------


def test_current_identity_is_this_process(identity_backend):
    me = current_identity()
    assert me == process_identity(os.getpid())
    assert me.pid == os.getpid()
    assert is_alive(me)


def test_same_pid_other_start_time_is_not_alive(identity_backend):
    me = current_identity()
    assert not is_alive(ProcessIdentity(me.pid, me.start_time + 1))


@pytest.mark.parametrize("pid", [2**31 - 1, 0, -1, True])
def test_missing_or_invalid_pid_has_no_identity(identity_backend, pid):
    assert process_identity(pid) is None
    assert read_cmdline(pid) is None


def test_the_ancestors_are_the_parent_chain_up_to_the_first_process(identity_backend):
    assert ancestor_pids() == {parent.pid for parent in psutil.Process().parents()}
    assert os.getppid() in ancestor_pids()


def test_identity_round_trips_through_dict():
    me = current_identity()
    assert ProcessIdentity.from_dict(me.to_dict()) == me
    assert me.to_dict() == {"pid": me.pid, "start_time": me.start_time}


@pytest.mark.parametrize(
    "data",
    [
        {"pid": True, "start_time": 1},
        {"pid": 1, "start_time": False},
        {"pid": 0, "start_time": 1},
        {"pid": -4, "start_time": 1},
        {"pid": 1, "start_time": -1},
        {"pid": "12", "start_time": 1},
        {"pid": 12.0, "start_time": 1},
        {"pid": 12, "start_time": None},
        {"pid": 12},
        {"start_time": 1},
        {},
        [12, 1],
        None,
    ],
)
def test_from_dict_rejects_malformed(data):
    with pytest.raises(ValueError):
        ProcessIdentity.from_dict(data)
