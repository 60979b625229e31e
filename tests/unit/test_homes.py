"""Home and profile resolution, the private run dir, and IPC endpoint placement."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from shared import homes
from shared.homes import (
    DEFAULT_PROFILE,
    IPC_PATH_MAX,
    InvalidProfileName,
    ProfileNotFound,
    UnsafeRunDir,
    active_home,
    active_profile,
    check_run_dir,
    endpoint,
    ensure_run_dir,
    list_profiles,
    profile_home,
    root_home,
    service_home,
    validate_profile_name,
)
from tests.support.homes import deep_home


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# --- root and active profile ----------------------------------------------------------------


def test_root_defaults_to_dot_hermes_under_home(monkeypatch, tmp_path):
    monkeypatch.delenv("HERMES_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert root_home() == tmp_path / ".hermes"
    assert active_profile() == DEFAULT_PROFILE
    assert active_home() == tmp_path / ".hermes"


def test_empty_hermes_home_counts_as_unset(tmp_path):
    env = {"HERMES_HOME": "", "HOME": str(tmp_path)}
    assert root_home(env) == tmp_path / ".hermes"


@pytest.mark.parametrize(
    ("hermes_home", "root", "profile"),
    [
        ("{t}/install", "{t}/install", "default"),
        ("{t}/install/", "{t}/install", "default"),
        ("{t}/install/profiles/coder", "{t}/install", "coder"),
        ("{t}/install/profiles/coder/", "{t}/install", "coder"),
        ("{t}/install/profiles/a-b_9", "{t}/install", "a-b_9"),
        # Not a valid profile name: the path is a root home in its own right.
        ("{t}/install/profiles/BAD", "{t}/install/profiles/BAD", "default"),
        ("{t}/install/profiles/.hidden", "{t}/install/profiles/.hidden", "default"),
        # "default" is the root itself, never a directory under profiles/.
        ("{t}/install/profiles/default", "{t}/install/profiles/default", "default"),
        ("{t}/install/profile/coder", "{t}/install/profile/coder", "default"),
        ("~/elsewhere", "{t}/elsewhere", "default"),
        ("~/x/profiles/coder", "{t}/x", "coder"),
    ],
)
def test_root_resolution_table(tmp_path, hermes_home, root, profile):
    env = {"HERMES_HOME": hermes_home.format(t=tmp_path), "HOME": str(tmp_path)}
    assert root_home(env) == Path(root.format(t=tmp_path))
    assert active_profile(env) == profile


def test_relative_hermes_home_is_made_absolute_not_resolved(monkeypatch, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    monkeypatch.chdir(tmp_path)
    env = {"HERMES_HOME": "link/profiles/coder"}
    assert root_home(env) == tmp_path / "link"
    assert active_home(env) == tmp_path / "link" / "profiles" / "coder"


def test_environment_is_read_when_no_mapping_is_given(monkeypatch, tmp_path):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "profiles" / "coder"))
    assert root_home() == tmp_path
    assert active_profile() == "coder"
    assert profile_home("other") == tmp_path / "profiles" / "other"


def test_service_home_follows_scope(tmp_path):
    env = {"HERMES_HOME": str(tmp_path / "profiles" / "coder")}
    assert service_home("gateway", env) == tmp_path / "profiles" / "coder"
    assert service_home("updater", env) == tmp_path
    with pytest.raises(ValueError):
        service_home("nope", env)


# --- profile names and listing --------------------------------------------------------------


@pytest.mark.parametrize("name", ["default", "a", "0", "coder", "a-b", "a_b", "9lives", "x" * 64])
def test_valid_profile_names(name):
    assert validate_profile_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "Coder",
        "-coder",
        "_coder",
        "x" * 65,
        "..",
        ".",
        "a/b",
        "../etc",
        "a b",
        " coder",
        "coder\n",
        "tab\t",
        "café",
        "ｃoder",
        "a.b",
        None,
        7,
        b"coder",
    ],
)
def test_invalid_profile_names(name):
    with pytest.raises(InvalidProfileName) as info:
        validate_profile_name(name)
    assert info.value.code == "invalid_profile_name"
    assert info.value.to_dict()["code"] == "invalid_profile_name"


def test_profile_home(tmp_path):
    assert profile_home("default", tmp_path) == tmp_path
    assert profile_home("coder", tmp_path) == tmp_path / "profiles" / "coder"
    with pytest.raises(InvalidProfileName):
        profile_home("../escape", tmp_path)


def test_profile_home_must_exist(tmp_path):
    with pytest.raises(ProfileNotFound) as info:
        profile_home("coder", tmp_path, must_exist=True)
    assert info.value.code == "profile_not_found"
    (tmp_path / "profiles" / "coder").mkdir(parents=True)
    assert profile_home("coder", tmp_path, must_exist=True) == tmp_path / "profiles" / "coder"
    assert profile_home("default", tmp_path / "absent", must_exist=True) == tmp_path / "absent"


def test_a_filled_profile_appears_whole_or_not_at_all(tmp_path):
    root = tmp_path / "root"

    def fill(home):
        (home / "config.yaml").write_text("model: x\n")

    home = homes.create_profile(root, "coder", fill=fill)
    assert (home / "config.yaml").read_text() == "model: x\n" and (home / "run").is_dir()
    assert os.listdir(homes.profiles_dir(root)) == ["coder"]  # nothing hidden left beside it

    def fails(home):
        (home / "half.txt").write_text("half")
        raise OSError("the disk is full")

    with pytest.raises(OSError, match="disk is full"):
        homes.create_profile(root, "other", fill=fails)
    assert os.listdir(homes.profiles_dir(root)) == ["coder"]

    def raced(home):  # another creator makes the home while this one fills its own
        (homes.profiles_dir(root) / "raced").mkdir()
        (homes.profiles_dir(root) / "raced" / "theirs").write_text("theirs")

    with pytest.raises(FileExistsError):
        homes.create_profile(root, "raced", fill=raced)
    assert os.listdir(homes.profiles_dir(root) / "raced") == ["theirs"]
    assert sorted(os.listdir(homes.profiles_dir(root))) == ["coder", "raced"]

    def emptied(home):  # even an empty home, which a plain rename would silently replace
        (homes.profiles_dir(root) / "empty").mkdir()

    with pytest.raises(FileExistsError):
        homes.create_profile(root, "empty", fill=emptied)
    assert os.listdir(homes.profiles_dir(root) / "empty") == []
    with pytest.raises(FileExistsError):  # refused before anything is filled
        homes.create_profile(root, "coder", fill=fails)


def test_create_profile_makes_its_home_once(tmp_path):
    root = tmp_path / "root"  # a fresh install: not even the root exists yet
    home = homes.create_profile(root, "coder")
    assert home == profile_home("coder", root)
    assert _mode(home) == _mode(home / "run") == 0o700
    assert (home / "logs").is_dir()
    assert list_profiles(root) == [DEFAULT_PROFILE, "coder"]
    with pytest.raises(FileExistsError):
        homes.create_profile(root, "coder")
    with pytest.raises(ValueError):
        homes.create_profile(root, DEFAULT_PROFILE)
    with pytest.raises(InvalidProfileName):
        homes.create_profile(root, "../x")
    assert list_profiles(root) == [DEFAULT_PROFILE, "coder"]


def _modes_below(top: Path) -> dict[str, str]:
    return {str(p.relative_to(top.parent)): oct(_mode(p)) for p in (top, *top.rglob("*")) if p.is_dir()}


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o000, 0o277], ids=oct)
def test_create_profile_on_a_new_machine_makes_every_directory_0700(tmp_path, umask):
    root = tmp_path / "new" / "root"  # neither the root home nor its parent exists yet
    old = os.umask(umask)
    try:
        home = homes.create_profile(root, "coder")
    finally:
        os.umask(old)
    made = ["new", "new/root", "new/root/profiles", "new/root/profiles/coder"]
    made += ["new/root/profiles/coder/run", "new/root/profiles/coder/logs"]
    assert home == root / "profiles" / "coder"
    assert _modes_below(tmp_path / "new") == dict.fromkeys(made, "0o700")


@pytest.mark.parametrize("umask", [0o022, 0o277], ids=oct)
def test_ensure_home_makes_every_missing_directory_0700_and_leaves_existing_ones(tmp_path, umask):
    os.chmod(tmp_path, 0o755)
    old = os.umask(umask)
    try:
        home = homes.ensure_home(tmp_path / "a" / "b")
        assert homes.ensure_home(home) == home
    finally:
        os.umask(old)
    assert _modes_below(tmp_path / "a") == {"a": "0o700", "a/b": "0o700"}
    assert _mode(tmp_path) == 0o755
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        homes.ensure_home(tmp_path / "file")


def _curve_keys(root: Path) -> None:
    from shared.transport import curve_keys

    curve_keys.init(root, [])


def _mesh_dirs(root: Path) -> None:
    from fleet.supervisors.supervisord.paths import mesh_paths, prepare

    prepare(mesh_paths(root))


@pytest.mark.parametrize("make", [_curve_keys, _mesh_dirs])
def test_a_root_home_first_made_by_the_mesh_or_its_keys_is_0700(tmp_path, make):
    root = tmp_path / "new" / "root"
    old = os.umask(0o022)
    try:
        make(root)
    finally:
        os.umask(old)
    modes = _modes_below(tmp_path / "new")
    assert {"new", "new/root", "new/root/mesh"} <= set(modes)
    assert modes == dict.fromkeys(modes, "0o700")


def test_list_profiles_without_profiles_dir(tmp_path):
    assert list_profiles(tmp_path) == ["default"]


def test_list_profiles_skips_junk(tmp_path):
    profiles = tmp_path / "profiles"
    for name in ("zeta", "alpha", "m-1", "default", "UPPER", ".hidden", "_tmp", "with space"):
        (profiles / name).mkdir(parents=True)
    (profiles / "afile").write_text("not a profile")
    assert list_profiles(tmp_path) == ["default", "alpha", "m-1", "zeta"]


# --- run dir --------------------------------------------------------------------------------


def test_ensure_run_dir_creates_0700_with_parents(tmp_path):
    home = tmp_path / "a" / "b" / "home"
    run = ensure_run_dir(home)
    assert run == home / "run"
    assert _mode(run) == 0o700
    assert check_run_dir(home).ok


def test_ensure_run_dir_is_0700_whatever_the_umask(tmp_path):
    old = os.umask(0o277)
    try:
        run = ensure_run_dir(tmp_path)
    finally:
        os.umask(old)
    assert _mode(run) == 0o700


def test_ensure_run_dir_accepts_existing_private_dir(tmp_path):
    (tmp_path / "run").mkdir(mode=0o700)
    os.chmod(tmp_path / "run", 0o700)
    assert ensure_run_dir(tmp_path) == tmp_path / "run"


def test_check_run_dir_reports_missing_without_creating(tmp_path):
    status = check_run_dir(tmp_path)
    assert status.path == tmp_path / "run"
    assert (status.exists, status.problems, status.ok) == (False, (), False)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("mode", [0o755, 0o750, 0o701, 0o707, 0o770])
def test_group_or_world_accessible_run_dir_is_refused_and_left_alone(tmp_path, mode):
    run = tmp_path / "run"
    run.mkdir()
    os.chmod(run, mode)
    with pytest.raises(UnsafeRunDir) as info:
        ensure_run_dir(tmp_path)
    assert info.value.code == "unsafe_run_dir"
    assert str(run) in info.value.message
    assert f"{mode:04o}" in info.value.message
    assert _mode(run) == mode  # never silently repaired
    assert check_run_dir(tmp_path).problems


def test_symlinked_run_dir_is_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    os.chmod(target, 0o700)
    home = tmp_path / "home"
    home.mkdir()
    (home / "run").symlink_to(target)
    with pytest.raises(UnsafeRunDir, match="symlink"):
        ensure_run_dir(home)
    assert check_run_dir(home).problems == ("is a symlink",)


def test_run_path_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "run").write_text("")
    with pytest.raises(UnsafeRunDir, match="not a directory"):
        ensure_run_dir(tmp_path)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_run_dir_owned_by_another_uid_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    os.chmod(run, 0o700)
    os.chown(run, 65534, -1)
    with pytest.raises(UnsafeRunDir, match="owned by uid 65534"):
        ensure_run_dir(tmp_path)
    assert os.lstat(run).st_uid == 65534


# --- endpoints ------------------------------------------------------------------------------


def test_endpoint_in_run_dir(tmp_path):
    ep = endpoint(tmp_path, "gateway")
    assert ep.fallback is False
    assert ep.directory == tmp_path / "run"
    assert ep.control == f"ipc://{tmp_path}/run/gateway.ctl"
    assert ep.events == f"ipc://{tmp_path}/run/gateway.pub"
    assert ep.lock_path == tmp_path / "run" / "gateway.lock"
    assert _mode(ep.directory) == 0o700


def test_endpoint_without_create_touches_nothing(tmp_path):
    ep = endpoint(tmp_path / "home", "updater", create=False)
    assert ep.directory == tmp_path / "home" / "run"
    assert not (tmp_path / "home").exists()
    deep = endpoint(deep_home(tmp_path), "updater", create=False, env={})
    assert deep.fallback and not deep.directory.exists()


def test_endpoint_refuses_unsafe_run_dir(tmp_path):
    (tmp_path / "run").mkdir()
    os.chmod(tmp_path / "run", 0o755)
    with pytest.raises(UnsafeRunDir):
        endpoint(tmp_path, "gateway")


def test_a_client_refuses_a_present_unsafe_run_dir_and_accepts_an_absent_one(tmp_path):
    assert endpoint(tmp_path, "gateway", create=False).directory == tmp_path / "run"  # absent: nobody listens
    (tmp_path / "run").mkdir(mode=0o700)
    os.chmod(tmp_path / "run", 0o777)
    with pytest.raises(UnsafeRunDir, match="0777") as info:
        endpoint(tmp_path, "gateway", create=False)
    assert info.value.detail == {"path": str(tmp_path / "run"), "problems": list(check_run_dir(tmp_path).problems)}
    assert _mode(tmp_path / "run") == 0o777  # a client repairs nothing either


@pytest.mark.parametrize("unsafe", ["base", "directory"])
def test_a_client_refuses_an_unsafe_fallback_dir(tmp_path, short_dir, unsafe):
    runtime = short_dir / "xdg"  # short, so the sockets fit under it and the host's /tmp/hermes-<uid> is left alone
    runtime.mkdir(mode=0o700)
    env = {"XDG_RUNTIME_DIR": str(runtime)}
    home = deep_home(tmp_path)
    made = endpoint(home, "gateway", env=env)  # as the gateway makes it
    assert made.directory.parent == runtime / "hermes"
    os.chmod(made.directory.parent if unsafe == "base" else made.directory, 0o755)
    with pytest.raises(UnsafeRunDir, match="0755"):
        endpoint(home, "gateway", create=False, env=env)


def test_unknown_service_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="unknown service"):
        endpoint(tmp_path, "nope")


def test_deep_home_falls_back_to_tmp(tmp_path, fallback_dirs):
    home = deep_home(tmp_path)
    ep = endpoint(home, "handoff_retry", env={})
    fallback_dirs.append(ep.directory)
    assert ep.fallback is True
    assert ep.directory.parent == Path(f"/tmp/hermes-{os.geteuid()}")
    assert len(ep.directory.name) == 16
    for address in (ep.control, ep.events):
        assert len(os.fsencode(address.removeprefix("ipc://"))) <= IPC_PATH_MAX
    assert _mode(ep.directory) == 0o700
    assert _mode(ep.directory.parent) & 0o077 == 0
    assert ep.lock_path == ep.directory / "handoff_retry.lock"
    assert endpoint(home, "handoff_retry", env={}) == ep  # deterministic
    other = endpoint(tmp_path / ("f" * 60) / ("g" * 60), "handoff_retry", env={})
    fallback_dirs.append(other.directory)
    assert other.directory != ep.directory


def test_deep_home_prefers_xdg_runtime_dir(tmp_path, short_dir):
    runtime = short_dir / "xdg"  # short, so the sockets fit under it
    runtime.mkdir(mode=0o700)
    ep = endpoint(deep_home(tmp_path), "gateway", env={"XDG_RUNTIME_DIR": str(runtime)})
    assert ep.fallback is True
    assert ep.directory.parent == runtime / "hermes"
    assert _mode(runtime / "hermes") == 0o700
    assert _mode(ep.directory) == 0o700


def test_missing_xdg_runtime_dir_is_ignored(tmp_path, fallback_dirs):
    ep = endpoint(deep_home(tmp_path), "gateway", env={"XDG_RUNTIME_DIR": str(tmp_path / "absent")})
    fallback_dirs.append(ep.directory)
    assert ep.directory.parent == Path(f"/tmp/hermes-{os.geteuid()}")


def test_unsafe_fallback_dir_is_refused(tmp_path, short_dir):
    runtime = short_dir / "xdg"  # short, so the sockets would fit under it
    (runtime / "hermes").mkdir(parents=True)
    os.chmod(runtime / "hermes", 0o777)
    with pytest.raises(UnsafeRunDir):
        endpoint(deep_home(tmp_path), "gateway", env={"XDG_RUNTIME_DIR": str(runtime)})
    assert _mode(runtime / "hermes") == 0o777


def test_too_long_xdg_runtime_dir_falls_through_to_tmp(tmp_path, fallback_dirs):
    runtime = tmp_path / ("x" * 100)
    runtime.mkdir()
    ep = endpoint(deep_home(tmp_path), "gateway", env={"XDG_RUNTIME_DIR": str(runtime)})
    fallback_dirs.append(ep.directory)
    assert ep.directory.parent == Path(f"/tmp/hermes-{os.geteuid()}")


def test_module_exposes_scope_table():
    assert homes.SERVICES["gateway"] == "profile"
    assert {s for s, scope in homes.SERVICES.items() if scope == "root"} == {
        "updater",
        "auth_worker",
        "handoff_retry",
        "hook_reporter",
        "gateway_host",
    }


# --- the served set of a multiplex gateway ----------------------------------------------------


def test_a_served_set_is_one_set_however_it_is_spelled():
    assert homes.parse_served("writer,coder,default") == ("default", "coder", "writer")
    assert homes.parse_served(" coder , writer ") == ("coder", "writer")
    assert homes.parse_served("coder") == ("coder",)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", homes.InvalidServedSet),
        ("  ", homes.InvalidServedSet),
        ("coder,,writer", homes.InvalidServedSet),
        ("coder,", homes.InvalidServedSet),
        ("coder,coder", homes.InvalidServedSet),
        ("Coder", homes.InvalidProfileName),
        ("coder,../x", homes.InvalidProfileName),
        (None, homes.InvalidServedSet),
    ],
)
def test_a_bad_served_set_is_refused_with_a_typed_error(text, error):
    with pytest.raises(error):
        homes.parse_served(text)


def test_a_served_set_has_a_bound():
    with pytest.raises(homes.InvalidServedSet, match="at most"):
        homes.parse_served(",".join(f"p{n}" for n in range(homes.MAX_SERVED + 1)))
