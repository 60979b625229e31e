"""Profile scopes in concurrent trio tasks and their threads: each activity sees its own."""

from __future__ import annotations

from pathlib import Path

import trio

from services.gateway import profile_scope
from services.gateway.profile_scope import ProfileScope


def _home(tmp_path: Path, name: str, key: str) -> Path:
    home = tmp_path / name
    home.mkdir()
    (home / ".env").write_text(f"OPENROUTER_API_KEY={key}\n")
    return home


def test_concurrent_activities_each_see_their_own_scope_across_checkpoints_and_threads(tmp_path):
    scopes = [profile_scope.load(name, _home(tmp_path, name, f"sk-{name}")) for name in ("a", "b", "c")]
    seen: dict[str, list[str | None]] = {}

    async def activity(scope: ProfileScope, pause: float) -> None:
        with profile_scope.bound(scope):
            reads = []
            for _ in range(5):
                await trio.sleep(pause)
                reads.append(profile_scope.current().secret("OPENROUTER_API_KEY"))
                reads.append(
                    await trio.to_thread.run_sync(lambda: profile_scope.current().secret("OPENROUTER_API_KEY"))
                )
            seen[scope.profile] = reads

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for n, scope in enumerate(scopes):
                nursery.start_soon(activity, scope, 0.001 * (n + 1))

    trio.run(main)
    assert seen == {name: [f"sk-{name}"] * 10 for name in ("a", "b", "c")}
