"""The cards follow their PRs: an APScheduler schedule looks at every open PR every
``DETACH_PR_POLL_S`` seconds (one look at a time, each bounded) and edits a card in place when
its PR's checks or state changed (merged, closed); nothing buzzes but a check that failed, when
the owner asked for it (``DETACH_PR_NOTIFY_FAILED``)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from bot.errors import UserInputError
from bot.models import MessageKind
from bot.prs.desk import PullRequests
from bot.store import Store
from bot.store.prs import ChecksState, PrRow
from bot.turns.scheduler import JobScheduler

log = logging.getLogger(__name__)
FOLLOW_TASK = "pr-follow"
LOOK_BOUND_S = 120.0  # one look at every open PR, at most


class PrFollower:
    def __init__(self, store: Store, prs: PullRequests, jobs: JobScheduler, every_s: float) -> None:
        self._store = store
        self._prs = prs
        self._jobs = jobs
        self._every_s = every_s

    async def start(self) -> None:
        from apscheduler import CoalescePolicy, ConflictPolicy
        from apscheduler.triggers.interval import IntervalTrigger

        scheduler = await self._jobs.started()
        await scheduler.configure_task(FOLLOW_TASK, func=self.look, max_running_jobs=1)
        await scheduler.add_schedule(
            FOLLOW_TASK,
            IntervalTrigger(seconds=self._every_s),
            id=FOLLOW_TASK,
            conflict_policy=ConflictPolicy.replace,
            coalesce=CoalescePolicy.latest,
        )

    async def look(self) -> None:
        """Every open PR once; one GitHub cannot answer for is left for the next look."""
        try:
            async with asyncio.timeout(LOOK_BOUND_S):
                for pr in await self._store.prs.open_ones():
                    await self._look_at(pr)
        except TimeoutError:
            log.warning("following PRs took longer than %ss", LOOK_BOUND_S)

    async def _look_at(self, pr: PrRow) -> None:
        github = self._prs.github
        try:
            pull = await github.pull(pr.repo, pr.number)
            checks = await github.checks(pr.repo, pull.head_sha)
        except UserInputError as exc:
            log.info("task %s: PR #%s not looked at: %s", pr.task_id, pr.number, exc.key)
            return
        now = replace(pr, state=pull.state, checks=checks, head_sha=pull.head_sha)
        if now == pr:
            return
        await self._store.prs.put(now)
        task = await self._store.tasks.get(pr.task_id)
        if task is None:
            return
        log.info("task %s: PR #%s %s, checks %s", task.id, pr.number, now.state, now.checks)
        await self._prs.show(task, now)
        # right after a push (checks reset to none) GitHub may still report the commit before
        # it, whose failure was told already: no second notice for it
        lagging = pull.head_sha != pr.head_sha and pr.checks is ChecksState.NONE
        failed = (
            checks is ChecksState.FAILURE and pr.checks is not ChecksState.FAILURE and not lagging
        )
        if failed and self._prs.config.notify_failed:
            text = self._prs.texts.get(
                task.locale, "pr.checks_failed", number=pr.number, url=pr.url
            )
            await self._prs.notifier.send(task, text, kind=MessageKind.STATUS)
