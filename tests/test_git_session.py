"""``GitGuard.batch`` (executors/gitsession.py): the configuration's listing and the commands
that need its overrides in one bubblewrap start. It must give what a jail per command gives,
hand every override to git literally (a driver's name is the repository's choice), run no
command in a repository it refuses, and start one process for a turn's baseline."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psutil
import pytest

from bot.errors import UserInputError
from bot.events import SessionStarted, ToolCalled, TurnFinished, Usage
from bot.git.repository import Heads
from bot.git.worktrees import Worktrees
from bot.store import Store
from bot.turns.baseline import STATUS, TOPLEVEL, opening, prepare
from bot.turns.openings import Openings
from executors.gitguard import GitGuard
from executors.gitscope import FETCHES
from executors.gitwarm import SLOTS, WarmJail
from tests.support.fake_engine import FakeEngine, Until
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_approvals_e2e import buttons
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
    """Every process started (asyncio's ``create_subprocess_exec``), once it is: a jail
    started ahead is seen when it waits, not while its start is still under way (when the
    next baseline would not find it yet; so a loaded machine once failed this file)."""
    seen: list[str] = []
    spawn = asyncio.create_subprocess_exec

    async def counting(program: str, *args: Any, **kwargs: Any) -> Any:
        proc = await spawn(program, *args, **kwargs)
        seen.append(program)
        return proc

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


async def test_a_baseline_waits_for_the_jail_being_started_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new worktree's jail is started as its task is created, and its first turn's baseline
    may come before that start ended: it waits for that jail (bounded) and takes it, rather
    than start a second one beside it."""
    top = make_repo(tmp_path / "repo")
    spawn = asyncio.create_subprocess_exec
    gate, entered = asyncio.Event(), asyncio.Event()
    seen: list[str] = []

    async def first_held(program: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(program)
        if len(seen) == 1:
            entered.set()
            await gate.wait()
        return await spawn(program, *args, **kwargs)

    monkeypatch.setattr(asyncio, "create_subprocess_exec", first_held)
    guard = GitGuard(warm=True)
    try:
        ahead = asyncio.ensure_future(prepare(guard, str(top)))
        await asyncio.wait_for(entered.wait(), 10)
        baseline = asyncio.ensure_future(opening(guard, str(top)))
        await asyncio.sleep(0.3)  # bounded: time enough for a second jail's start
        assert not baseline.done() and len(seen) == 1
        gate.set()
        before, scope = await asyncio.wait_for(baseline, 10)
        await ahead
        assert len(seen) == 1  # the jail started ahead, taken
        monkeypatch.setattr(asyncio, "create_subprocess_exec", spawn)
        assert (before, scope) == await opening(GIT, str(top))
    finally:
        gate.set()
        await guard.aclose()


async def test_a_jail_started_ahead_is_not_taken_when_anything_differs(
    tmp_path: Path, started: list[str]
) -> None:
    top, other = make_repo(tmp_path / "repo"), make_repo(tmp_path / "other")
    denied: list[Path] = []
    guard = GitGuard(lambda: denied, warm=True)
    try:
        await prepare(guard, str(top))
        await opening(guard, str(other))  # another directory: its own jail; top's still waits
        assert len(started) == 2
        await opening(guard, str(top))
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


async def test_jails_started_ahead_at_once_leave_one_waiting_for_each_read(
    tmp_path: Path, started: list[str]
) -> None:
    """Two starts ahead at once for the same read (a turn's card and its next baseline): one
    jail waits, the other is stopped (it used to be forgotten, waiting its 600 s); starts for
    more reads than ``SLOTS`` leave the newest waiting."""
    top, *others = (make_repo(tmp_path / f"repo{n}") for n in range(SLOTS + 1))
    guard = GitGuard(warm=True)
    try:
        await asyncio.gather(prepare(guard, str(top)), prepare(guard, str(top)))
        assert len(started) == 2
        await settled(1)
        for other in others:
            await prepare(guard, str(other))
        assert len(started) == 2 + SLOTS
        await settled(SLOTS)
        await opening(guard, str(top))  # the oldest was stopped: a jail of its own
        assert len(started) == 3 + SLOTS
        await opening(guard, str(others[-1]))
        assert len(started) == 3 + SLOTS
    finally:
        await guard.aclose()
    assert waiting() == 0


async def test_a_jail_wanted_again_is_the_last_stopped(tmp_path: Path, started: list[str]) -> None:
    """A start ahead for a read whose jail waits already makes that jail the newest: the
    in-place directory's next baseline, wanted again at each of its turns, is not the one a
    run of new worktrees stops."""
    top, *others = (make_repo(tmp_path / f"repo{n}") for n in range(SLOTS + 1))
    guard = GitGuard(warm=True)
    try:
        await prepare(guard, str(top))
        for other in others[:-1]:
            await prepare(guard, str(other))
        await prepare(guard, str(top))  # waiting already: no start, the newest now
        assert len(started) == SLOTS
        await prepare(guard, str(others[-1]))  # one more: the oldest, others[0], stopped
        await settled(SLOTS)
        await opening(guard, str(top))
        assert len(started) == SLOTS + 1
        await opening(guard, str(others[0]))
        assert len(started) == SLOTS + 2
    finally:
        await guard.aclose()
    assert waiting() == 0


def waiting() -> int:
    """bubblewrap children of this process still waiting (a stopped one may be a zombie)."""
    return sum(
        1
        for child in psutil.Process().children()
        if child.name() == "bwrap" and child.status() != psutil.STATUS_ZOMBIE
    )


async def settled(count: int) -> None:
    for _ in range(500):  # bounded: 5 s
        if waiting() == count:
            break
        await asyncio.sleep(0.01)
    assert waiting() == count


async def test_a_jail_whose_start_the_close_cancels_is_stopped_once_made() -> None:
    """The bot closes while a jail ahead is being created: its creation is not cancelled
    (Python 3.11 then waited forever: a close hung 30 s), the close waits for it, bounded,
    and stops it."""
    warm = WarmJail()
    gate = asyncio.Event()
    made: list[asyncio.subprocess.Process] = []

    async def spawn(argv: list[str], env: Any) -> asyncio.subprocess.Process:
        await gate.wait()
        proc = await asyncio.create_subprocess_exec(
            "cat", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        made.append(proc)
        return proc

    warm.later(
        0, "/", [("true",)], lambda: warm.prepare("/", [("true",)], lambda t: ["x", t], {}, spawn)
    )
    await asyncio.sleep(0.05)  # in its spawn now
    closing = asyncio.create_task(warm.aclose())
    await asyncio.sleep(0.05)
    assert not closing.done()  # it waits for the creation
    gate.set()
    await asyncio.wait_for(closing, 10)
    assert len(made) == 1 and made[0].returncode is not None


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


async def test_an_acting_turn_s_card_takes_a_jail_started_while_its_agent_worked(
    tmp_path: Path, started: list[str]
) -> None:
    """The jail its card reads the repository in starts at the agent's first event: by the
    verdict it is waiting, and the card starts none (it took 35 ms of a tool turn's verdict
    -> card)."""
    top = make_repo(tmp_path / "repo")
    gate = asyncio.Event()
    engine = FakeEngine(
        [
            SessionStarted("s1", "m"),
            ToolCalled("t1", "Bash", "touch x"),
            Until(gate, seconds=60),  # longer than the wait below
            TurnFinished(False, "the answer", "s1", 0.01, Usage(1, 1)),
        ]
    )

    def jails() -> int:
        return sum(Path(program).name == "bwrap" for program in started)

    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", top)
        async with running_bot(settings, {}, {"claude": engine}):
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude mode=auto go", OWNER)
            for _ in range(3000):  # bounded: 30 s
                if jails() >= 2:
                    break
                await asyncio.sleep(0.01)
            assert jails() == 2  # the baseline's, and the card's while the agent works
            gate.set()
            await fake.wait_text(OWNER, "the answer", 30)
            assert jails() == 2  # the card took it


async def test_a_worktree_turn_s_card_reads_its_offer_in_the_jail_started_beside_its_agent(
    tmp_path: Path, started: list[str]
) -> None:
    """A worktree's head, configuration and git directories are read in one jail, its cut in
    a second, its baseline in a third; the card's Merge and Discard, acting turn or not, in
    the jail started at its agent's first event (no git after the verdict: it took ~20 ms of a
    sandboxed turn's verdict -> card). They say what the worktree holds: a new file, then
    nothing of its own."""
    top = make_repo(tmp_path / "repo")
    gate = asyncio.Event()
    engine = FakeEngine(
        [
            SessionStarted("s1", "m"),
            Until(gate, seconds=60),
            TurnFinished(False, "the answer", "s1", 0.01, Usage(1, 1)),
        ]
    )

    def jails() -> int:
        return sum(Path(program).name == "bwrap" for program in started)

    async with FakeTelegram() as fake:  # (the chat's pace must not hold a card for 1 s)
        settings = make_settings(tmp_path / "data", fake, "claude", top, outbox_chat_interval_s=0.1)
        async with running_bot(settings, {}, {"claude": engine}):
            await fake.wait_call("setMyCommands")
            for n, plants in enumerate((True, False)):
                seen = jails()
                gate.clear()
                await fake.user_message(f"/claude worktree=yes go {n}", OWNER)
                for _ in range(3000):  # bounded: 30 s
                    if jails() - seen >= 4:
                        break
                    await asyncio.sleep(0.01)
                assert jails() - seen == 4  # head and dirs, cut, baseline, the card's
                if plants:
                    (tree,) = (tmp_path / "data" / "worktrees").iterdir()
                    (tree / "NEW.txt").write_text("the agent's\n")
                mark = len(fake.calls)
                gate.set()
                card = await fake.wait_text(OWNER, "the answer", 30, after=mark)
                # the card took its jail (a card with work then reads the repository's remote
                # for its pull request's button, bot.prs, in one more)
                assert jails() - seen == 4 + plants
                offered = {"🔀 Merge", "🗑 Discard"} <= set(buttons(card))
                assert offered == plants


async def test_a_cut_takes_the_configuration_read_with_its_head_once(
    tmp_path: Path, started: list[str]
) -> None:
    """A worktree cut right after its head was read takes the configuration and directories
    read with it: one jail for the cut; a second cut of the same head reads them again."""
    repo = make_repo(tmp_path / "repo")
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}")
    try:
        trees = Worktrees(store, tmp_path / "wt", GitGuard())
        head = await trees.head(repo)
        seen = len(started)
        first = await trees.create(1, "one", repo, head)
        assert len(started) - seen == 1
        seen = len(started)
        second = await trees.create(2, "two", repo, head)
        assert len(started) - seen == 2
        for made in (first, second):
            assert (made.cwd / "plain.txt").read_text() == "plain.txt v1\n"
            assert made.row.base_commit == head.commit
    finally:
        await store.close()


async def test_a_decoy_git_below_the_top_does_not_vouch_for_the_top(tmp_path: Path) -> None:
    """A directory whose ``.git`` names another's repository, and an empty ``.git`` in the
    task's subdirectory (git skips it; the bot's own look at the nearest ``.git`` does not): the
    configuration read with the head was judged at the decoy, so the cut reads it again at the
    top, and the other's repository is refused as before; nothing is written into it."""
    other = make_repo(tmp_path / "other")
    top = tmp_path / "w"
    (top / "sub" / ".git").mkdir(parents=True)
    (top / ".git").write_text(f"gitdir: {other / '.git'}\n")
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}")
    try:
        trees = Worktrees(store, tmp_path / "wt", GitGuard())
        head = await trees.head(top / "sub")
        assert head.top == top.resolve()
        with pytest.raises(UserInputError) as refused:
            await trees.create(1, "decoy", top / "sub", head)
        assert refused.value.key == "worktree.failed"
    finally:
        await store.close()
    assert "detach/1-decoy" not in sh_git(other, "branch", "--list")
    assert not (other / ".git" / "worktrees").exists()


async def test_a_worktree_s_offer_is_read_in_one_jail(tmp_path: Path, started: list[str]) -> None:
    """Whether a worktree holds work (its card's Merge and Discard) is on every worktree
    turn's way to its card: one jail for the configuration, the status and the commits (was
    three), and the same answers."""
    repo = make_repo(tmp_path / "repo")
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}")
    try:
        trees = Worktrees(store, tmp_path / "wt", GitGuard())
        path = Path((await trees.create(1, "feature", repo)).row.path)
        seen = len(started)
        assert not await trees.offers(1)
        assert len(started) - seen == 1
        (path / "NEW.txt").write_text("one\n")
        assert await trees.offers(1)  # uncommitted
        sh_git(path, "add", "NEW.txt")
        sh_git(path, "commit", "-qm", "one")
        assert await trees.offers(1)  # a commit its base does not have
    finally:
        await store.close()


async def test_a_repositorys_next_head_takes_a_jail_started_after_the_last(
    tmp_path: Path, started: list[str]
) -> None:
    """A /detach in a repository reads its head (planning) and its new worktree's baseline:
    after a head is read, a jail waits for the next head there (a slot of its own: the
    baseline's jail waiting in another directory is not stopped for it)."""
    top, other = make_repo(tmp_path / "repo"), make_repo(tmp_path / "other")
    guard = GitGuard(warm=True)
    heads = Heads(guard)
    try:
        await prepare(guard, str(other))  # a turn's next baseline, elsewhere
        first = await heads.head(top)
        assert len(started) == 2
        for _ in range(500):  # bounded: AHEAD_AFTER_S and a jail's start, within 5 s
            if len(started) == 3:
                break
            await asyncio.sleep(0.01)
        assert len(started) == 3
        assert await heads.head(top) == first
        assert len(started) == 3  # the jail started ahead, taken
        before, _ = await opening(guard, str(other))
        assert len(started) == 3 and before.top == str(other)  # and the baseline's, still there
    finally:
        await guard.aclose()


async def test_a_first_turn_takes_the_baseline_read_as_its_task_was_created(
    tmp_path: Path, started: list[str]
) -> None:
    """``Openings``: the read begun at the task's creation is the turn's baseline (no second
    jail), but only for that turn, in that directory, and while fresh; anything else reads the
    directory as it is now (an edit made since shows)."""
    top, other = make_repo(tmp_path / "repo"), make_repo(tmp_path / "other")

    async def spawned(count: int) -> None:
        for _ in range(500):  # bounded: 5 s
            if len(started) >= count:
                break
            await asyncio.sleep(0.01)
        assert len(started) == count

    openings = Openings(GIT, fresh_s=60.0)  # no timing assumed: fresh for the whole test
    openings.start(7, str(top))
    await spawned(1)
    taken = await openings.open(7, str(top))
    assert len(started) == 1  # the read begun at the creation, nothing more
    assert taken == await opening(GIT, str(top))
    openings.start(8, str(top))
    await spawned(3)
    assert await openings.open(9, str(top)) == taken  # another turn's: read now
    assert len(started) == 4
    edit(other)
    fresh = await opening(GIT, str(other))
    assert await openings.open(8, str(other)) == fresh  # another directory: read now
    assert len(started) == 6
    stale = Openings(GIT, fresh_s=0.0)
    stale.start(10, str(top))
    await spawned(7)
    edit(top)  # after its read began: too old to be the turn's start
    assert await stale.open(10, str(top)) == await opening(GIT, str(top)) != taken
    assert len(started) == 9
    await asyncio.gather(openings.aclose(), stale.aclose())


async def test_a_baseline_read_ahead_and_dropped_leaves_no_jail(
    tmp_path: Path, started: list[str]
) -> None:
    """A creation that failed drops its read (stopped where it is: no jail is left), and the
    bot's close stops any not taken; a turn of that id then reads for itself."""
    top = make_repo(tmp_path / "repo")
    openings = Openings(GIT)
    openings.start(1, str(top))
    openings.drop(1)
    openings.start(2, str(top))
    await openings.aclose()
    await settled(0)
    assert started == []  # both stopped before their jail started
    count = len(started)
    assert await openings.open(1, str(top)) == await opening(GIT, str(top))
    assert len(started) == count + 2
