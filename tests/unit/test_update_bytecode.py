"""The bytecode sweep: every module of the tree compiled once, checked against its source's
hash (so a rollback's file of the same size and mtime is compiled again), a file that cannot
be compiled named with its reason, and a completion whose sweep failed owes a follow-up and
restarts the fleet all the same."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from services.updater import completion
from services.updater.bytecode import Sweep, compile_tree, is_fresh
from services.updater.completion import Completion
from services.updater.completion_contract import Request, check_result

PACKAGE = ("pkg",)


def tree(path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    return path


def header(source: Path) -> bytes:
    return Path(importlib.util.cache_from_source(str(source))).read_bytes()[:16]


def test_every_module_is_compiled_against_its_sources_hash_and_only_once(tmp_path):
    root = tree(tmp_path, {"pkg/__init__.py": "", "pkg/sub/mod.py": "X = 1\n", "other/skip.py": "Y = 2\n"})
    assert compile_tree(root, PACKAGE) == Sweep(compiled=2, fresh=0, failed=())
    source = root / "pkg" / "sub" / "mod.py"
    # PEP 552: flags 0b11 (hash-based, checked), then the source's hash
    assert header(source)[4:16] == (0b11).to_bytes(4, "little") + importlib.util.source_hash(source.read_bytes())
    assert not (root / "other" / "__pycache__").exists()
    assert compile_tree(root, PACKAGE) == Sweep(compiled=0, fresh=2, failed=())


def test_a_file_brought_back_with_the_same_size_and_mtime_is_compiled_again(tmp_path):
    root = tree(tmp_path, {"pkg/mod.py": "X = 1\n"})
    source = root / "pkg" / "mod.py"
    compile_tree(root, PACKAGE)
    seen = source.stat()
    source.write_text("X = 2\n")  # a rollback's checkout, within the same second
    os.utime(source, ns=(seen.st_atime_ns, seen.st_mtime_ns))
    assert not is_fresh(source)
    assert compile_tree(root, PACKAGE) == Sweep(compiled=1, fresh=0, failed=())
    assert header(source)[8:16] == importlib.util.source_hash(b"X = 2\n")


def test_a_file_that_cannot_be_compiled_is_named_and_the_rest_are_compiled(tmp_path):
    root = tree(
        tmp_path,
        {"pkg/good.py": "X = 1\n", "pkg/broken.py": "def f(:\n", "pkg/stuck/mod.py": "Y = 2\n"},
    )
    (root / "pkg" / "stuck" / "__pycache__").write_text("a file where the directory goes")
    sweep = compile_tree(root, PACKAGE)
    assert sweep.compiled == 1 and is_fresh(root / "pkg" / "good.py")
    reasons = dict(sweep.failed)
    assert sorted(reasons) == ["pkg/broken.py", "pkg/stuck/mod.py"]
    assert reasons["pkg/broken.py"].startswith("SyntaxError: ") and "(line 1)" in reasons["pkg/broken.py"]
    assert reasons["pkg/stuck/mod.py"]
    assert sweep.reason().startswith("2 of the tree's files not compiled: pkg/broken.py: SyntaxError")


def test_a_follow_up_names_the_first_files_that_failed_and_counts_the_rest():
    failed = tuple((f"pkg/m{n}.py", "Read-only file system") for n in range(5))
    assert Sweep(0, 0, failed).reason() == (
        "5 of the tree's files not compiled: pkg/m0.py: Read-only file system; "
        "pkg/m1.py: Read-only file system; pkg/m2.py: Read-only file system; and 2 more"
    )


def test_a_failed_sweep_is_a_follow_up_and_the_fleet_is_restarted_all_the_same(tmp_path, monkeypatch):
    code = tree(tmp_path / "code", {"shared/__init__.py": "", "shared/broken.py": "x = (\n"})
    request = Request.new(
        update_id="test-bytecode",
        root=str(tmp_path / "home"),
        install_root=str(code),
        before="a" * 40,
        after="b" * 40,
        result_path=str(tmp_path / "result.json"),
        dependency_spec=None,  # no pyproject.toml before or after: nothing to sync
    )
    restarted = []
    monkeypatch.setattr(completion, "restart_fleet", lambda root, after, only: restarted.append(after) or [])
    monkeypatch.setattr(completion, "fleet_matrix", lambda root, after, expected_profiles, min_healthy: [])
    result = Completion(request).run()
    check_result(result)
    assert restarted == ["b" * 40]
    steps = {step["name"]: step for step in result["steps"]}
    assert list(steps) == ["bytecode", "restart", "verify"]
    assert steps["bytecode"]["ok"] is False and steps["bytecode"]["detail"] == {"compiled": 1, "fresh": 0, "failed": 1}
    assert [f["step"] for f in result["followups"]] == ["bytecode"]
    assert "shared/broken.py: SyntaxError" in result["followups"][0]["reason"]
