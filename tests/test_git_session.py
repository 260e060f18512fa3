"""``GitGuard.batch`` (executors/gitsession.py): the configuration's listing and the commands
that need its overrides in one bubblewrap start. It must give what a jail per command gives,
hand every override to git literally (a driver's name is the repository's choice), run no
command in a repository it refuses, and start one process for a turn's baseline."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from bot.turns.baseline import STATUS, TOPLEVEL, opening, prepare
from executors.gitguard import GitGuard
from executors.gitscope import FETCHES
from tests.test_hostile_git import GIT, edit, fake_repository, fired, make_repo, sh_git

pytestmark = pytest.mark.skipif(
    not asyncio.run(GIT.confined()), reason="bubblewrap cannot run here: no jail to share"
)


async def _apart(guard: GitGuard, top: Path, *commands: tuple[str, ...]) -> tuple[Any, list[Any]]:
    scope = await guard.scope(top, 5)
    return scope, [await guard.git(top, *args, within=scope, timeout_s=5) for args in commands]


async def test_one_jail_gives_what_a_jail_per_command_gives(tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    top = fake_repository(tmp_path / "planted", markers)  # every program-running key planted
    together = await GIT.batch(top, TOPLEVEL, STATUS, ("diff", "--stat", "HEAD"), timeout_s=5)
    apart = await _apart(GIT, top, TOPLEVEL, STATUS, ("diff", "--stat", "HEAD"))
    assert together[0] == apart[0]  # the same overrides, the same verdict
    assert [(g.code, g.out) for g in together[1]] == [(g.code, g.out) for g in apart[1]]
    assert together[1][0].out == str(top.resolve()) and "a.t" in together[1][2].out
    assert fired(markers) == []
    failing = await GIT.batch(top, ("rev-parse", "--verify", "nothing-such"), TOPLEVEL)
    assert failing[1][0].code != 0 and failing[1][0].err  # a failure, and why
    assert failing[1][1].code == 0  # the next command still runs


async def test_every_override_reaches_git_literally(tmp_path: Path) -> None:
    """A driver's name holds what a shell or a config parser would act on: each override
    arrives as its own key and value, exactly."""
    top = make_repo(tmp_path / "odd")
    names = ["x=y", "$(touch gotcha)", 'q"uote', "sp ace; `id`", "back\\slash", "ünï"]
    with (top / ".git" / "config").open("a") as config:
        for name in names:
            escaped = name.replace("\\", "\\\\").replace('"', '\\"')
            config.write(f'[filter "{escaped}"]\n\tclean = touch planted\n')
    scope, (listed,) = await GIT.batch(
        top, ("config", "--show-scope", "--null", "--get-regexp", r"^filter\."), timeout_s=5
    )
    given = [entry.split("\0") for entry in listed.out.split("\0command\0")[1:]]
    handed = {tuple(field.split("\n", 1)) for fields in given for field in fields[:1]}
    for name in names:
        assert (f"filter.{name}.clean", "") in handed, (name, handed)
        assert (f"filter.{name}.clean", "") in scope.overrides
    assert not (top / "gotcha").exists() and not (top / "planted").exists()


async def test_a_refused_repository_runs_no_command(tmp_path: Path) -> None:
    top = make_repo(tmp_path / "promisor")
    sh_git(top, "config", "remote.origin.url", "https://example.invalid/x.git")
    sh_git(top, "config", "remote.origin.promisor", "true")
    scope, ran = await GIT.batch(top, STATUS, timeout_s=5)
    assert scope.refusal == FETCHES and ran == []


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every process started (asyncio's ``create_subprocess_exec``)."""
    seen: list[str] = []
    spawn = asyncio.create_subprocess_exec

    async def counting(program: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(program)
        return await spawn(program, *args, **kwargs)

    monkeypatch.setattr(asyncio, "create_subprocess_exec", counting)
    return seen


async def test_a_turns_baseline_is_one_process(tmp_path: Path, started: list[str]) -> None:
    top = make_repo(tmp_path / "repo")
    edit(top)
    before, scope = await opening(GIT, str(top))
    assert len(started) == 1, started  # was 3: the listing, then the top and the status
    assert scope is not None and scope.refusal is None
    assert before.top == str(top.resolve()) and before.head is not None
    assert {"a.t", "new.txt"} <= set(before.dirty) and "new.txt" in before.untracked


async def test_an_unreadable_configuration_is_refused_with_gits_words(tmp_path: Path) -> None:
    top = make_repo(tmp_path / "broken")
    with (top / ".git" / "config").open("a") as config:
        config.write("[core\n\tbroken = \n")
    scope, ran = await GIT.batch(top, STATUS, timeout_s=5)
    apart = await GIT.scope(top, 5)
    assert ran == [] and scope.refusal is not None and "config" in scope.refusal
    assert scope == apart


async def test_a_jail_started_ahead_reads_the_repository_when_taken(
    tmp_path: Path, started: list[str]
) -> None:
    top = make_repo(tmp_path / "repo")
    guard = GitGuard(warm=True)
    try:
        await prepare(guard, str(top))
        assert len(started) == 1
        edit(top)  # after the jail started, before the turn: the turn's baseline has it
        before, scope = await opening(guard, str(top))
        assert len(started) == 1  # the jail started ahead, nothing more
        cold = await opening(GIT, str(top))
        assert (before, scope) == cold
        assert {"a.t", "new.txt"} <= set(before.dirty)
        again = await opening(guard, str(top))  # taken once: the next one starts its own
        assert len(started) == 3 and again == cold
    finally:
        await guard.aclose()


async def test_a_jail_started_ahead_is_not_taken_when_anything_differs(
    tmp_path: Path, started: list[str]
) -> None:
    top, other = make_repo(tmp_path / "repo"), make_repo(tmp_path / "other")
    denied: list[Path] = []
    guard = GitGuard(lambda: denied, warm=True)
    try:
        await prepare(guard, str(top))
        await opening(guard, str(other))  # another directory
        assert len(started) == 2
        await prepare(guard, str(top))
        secret = tmp_path / "secret"
        secret.mkdir()
        denied.append(secret)  # the deny list changed: the jail started ahead lacks it
        await opening(guard, str(top))
        assert len(started) == 4
        await prepare(guard, str(top))
        (secret / "key").write_text("k")
        secret.rename(tmp_path / "gone")  # a denied path that is gone: not mounted over now
        await opening(guard, str(top))
        assert len(started) == 6
        key = tmp_path / "key"
        key.write_text("old")
        denied[:] = [key]
        await prepare(guard, str(top))
        fresh = tmp_path / "key.new"
        fresh.write_text("new")
        fresh.rename(key)  # renamed over: the waiting jail's mask is on the old file
        await opening(guard, str(top))
        assert len(started) == 8
        await prepare(guard, str(top))
        await prepare(guard, str(top))  # one waits already: no second
        assert len(started) == 9
    finally:
        await guard.aclose()


async def test_a_jail_ahead_can_wait_and_is_never_left_behind(
    tmp_path: Path, started: list[str]
) -> None:
    top = make_repo(tmp_path / "repo")
    guard = GitGuard(warm=True)
    try:
        await prepare(guard, str(top), after_s=0.2)
        assert started == []  # not yet: the card goes first
        for _ in range(300):  # bounded: 3 s
            if started:
                break
            await asyncio.sleep(0.01)
        assert len(started) == 1
        await opening(guard, str(top))
        assert len(started) == 1  # the one started late, taken
        await prepare(guard, str(top), after_s=30)
    finally:
        await guard.aclose()  # the pending start is cancelled, not run
    assert len(started) == 1
