"""The board's JSON API (aiohttp handlers behind ``Gate.signed_in``): who is signed in and the
page's texts, the task list and one task's page, transcript, diff and event streams, and the
actions (answer a question, follow up, cancel, merge, discard, a held task's choice). A task is
the signed-in user's or ``TaskNotFound`` (404, exactly like a missing one); numbers and bodies
are read through ``bot.board.inputs`` (a malformed one is ``Malformed``, 400)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from bot.board.actions import BoardActions
from bot.board.events import Streams
from bot.board.gate import SESSION_KEY
from bot.board.inputs import body_flag, body_int, query_int, read_json, task_id
from bot.board.views import BoardData
from bot.errors import TaskNotFound, UserInputError
from bot.models import ApprovalAnswer, Task
from bot.telegram.render import plain

# the texts the page shows (locales/*/detach.po, msgids ``board.*``)
PAGE_TEXTS = (
    "title", "tasks", "archived", "show_archived", "empty", "goal", "transcript", "turns",
    "checks", "diff", "no_diff", "pending", "allow", "deny", "always", "always_confirm",
    "followup_label", "send", "cancel", "merge", "discard", "discard_confirm", "cost", "age",
    "engine", "model", "mode", "directory", "new_file", "deleted_file", "passed", "failed",
    "no_output", "turn", "live", "offline", "back", "signin_needed", "filter", "all", "active",
    "finished", "done_toast", "diff_checkout", "merged", "discarded", "worktree_merged",
    "worktree_discarded", "steer_now", "queue", "always_rule", "audit", "push", "open_pr",
)  # fmt: skip


class BoardApi:
    """The handlers of ``/api/...``; each reads the session ``Gate`` put on the request."""

    def __init__(
        self, data: BoardData, actions: BoardActions, streams: Streams, json_depth: int
    ) -> None:
        self._data = data
        self._actions = actions
        self._streams = streams
        self._json_depth = json_depth

    # -- JSON ----------------------------------------------------------------------------------
    async def me(self, request: web.Request) -> web.StreamResponse:
        session = request[SESSION_KEY]
        locale = await self._data.locale(session.user_id)
        texts = {k: self._data.texts.template(locale, f"board.{k}") for k in PAGE_TEXTS}
        return web.json_response(
            {"user": session.user_id, "csrf": session.csrf, "locale": locale, "texts": texts}
        )

    async def tasks(self, request: web.Request) -> web.StreamResponse:
        archived = request.query.get("archived") == "1"
        rows = await self._data.tasks(request[SESSION_KEY].user_id, archived)
        return web.json_response({"tasks": rows})

    async def hosts(self, request: web.Request) -> web.StreamResponse:
        """The hosts of a shared database (every signed-in user sees the machines; which
        host runs a task shows on that task's own row only)."""
        return web.json_response(await self._data.hosts(request[SESSION_KEY].user_id))

    async def tasks_stream(self, request: web.Request) -> web.StreamResponse:
        archived = request.query.get("archived") == "1"
        return await self._streams.tasks(request, request[SESSION_KEY].user_id, archived)

    async def task(self, request: web.Request) -> web.StreamResponse:
        user_id, task = await self._own(request)
        return web.json_response(await self._data.page(user_id, task))

    async def transcript(self, request: web.Request) -> web.StreamResponse:
        user_id, task = await self._own(request)
        start, limit = query_int(request, "cursor", 0), query_int(request, "limit", 500)
        items, cursor = await self._data.transcript(user_id, task.id, start, limit)
        more = cursor != start and bool(await self._data.reads.lines(user_id, task.id, cursor, 1))
        return web.json_response({"items": items, "cursor": cursor, "more": more})

    async def diff(self, request: web.Request) -> web.StreamResponse:
        _user, task = await self._own(request)
        return web.json_response(await self._data.diff(task))

    async def task_stream(self, request: web.Request) -> web.StreamResponse:
        user_id, task = await self._own(request)
        cursor = query_int(request, "cursor", 0)
        return await self._streams.task(request, user_id, task.id, cursor)

    # -- actions -------------------------------------------------------------------------------
    async def answer(self, request: web.Request) -> web.StreamResponse:
        user_id, task = await self._own(request)
        body = await self._json(request)
        qid, option = body_int(body, "qid", 0), body_int(body, "option", -1)
        if await self._data.reads.question(user_id, task.id, qid) is None:
            raise UserInputError("callback.stale")
        if "option" in body:
            key = await self._actions.pick(user_id, qid, option)
        else:
            try:
                answer = ApprovalAnswer(str(body.get("answer")))
            except ValueError as exc:
                raise UserInputError("callback.stale") from exc
            key = await self._actions.approve(user_id, qid, answer)
        return await self._done(user_id, key)

    async def followup(self, request: web.Request) -> web.StreamResponse:
        """A follow-up; ``steer`` (true or false) while a turn runs: into it, or after it."""
        user_id, task = await self._own(request)
        body = await self._json(request)
        prompt, steer = str(body.get("prompt", "")), body_flag(body, "steer")
        done = await self._actions.follow_up(user_id, task.id, prompt, steer)
        key = "board.followup_behind" if done.behind else "board.followup_sent"
        key = f"toast.steer_{done.steer}" if done.steer is not None else key
        found = {"turn": done.turn.seq, "behind": done.behind, "steer": done.steer}
        return await self._done(user_id, key, **found)

    async def hold(self, request: web.Request) -> web.StreamResponse:
        """A held task's choice: ``{"choice": n}`` as its buttons in the chat carry it."""
        user_id = request[SESSION_KEY].user_id
        hold_id = task_id(request)  # the path's {id}, bounded as a task's
        choice = body_int(await self._json(request), "choice", -1)
        return await self._done(user_id, await self._actions.hold(user_id, hold_id, choice))

    async def cancel(self, request: web.Request) -> web.StreamResponse:
        user_id, task = await self._own(request)
        await self._actions.cancel(user_id, task.id)
        return web.json_response({"ok": True})

    async def merge(self, request: web.Request) -> web.StreamResponse:
        user_id, task = await self._own(request)
        return await self._told(user_id, await self._actions.merge(user_id, task.id), "merge")

    async def discard(self, request: web.Request) -> web.StreamResponse:
        user_id, task = await self._own(request)
        confirmed = bool((await self._json(request)).get("confirmed"))
        done = await self._actions.discard(user_id, task.id, confirmed)
        return await self._told(user_id, done, "discard")

    async def push(self, request: web.Request) -> web.StreamResponse:
        user_id, task = await self._own(request)
        return await self._told(user_id, await self._actions.push(user_id, task.id), "push")

    async def open_pr(self, request: web.Request) -> web.StreamResponse:
        user_id, task = await self._own(request)
        done = await self._actions.open_pr(user_id, task.id)
        return await self._told(user_id, done, "open_pr")

    async def _told(self, user_id: int, done: bool, action: str) -> web.StreamResponse:
        """A merge or discard said as Telegram's toast says it (refused: why is in the chat)."""
        locale = await self._data.locale(user_id)
        text = self._data.texts.get(locale, f"toast.{action}{'' if done else '_refused'}")
        return web.json_response({"ok": done, "text": plain(text)})

    async def _done(self, user_id: int, key: str, **more: object) -> web.StreamResponse:
        locale = await self._data.locale(user_id)
        text = plain(self._data.texts.get(locale, key))
        return web.json_response({"ok": True, "text": text, **more})

    async def _own(self, request: web.Request) -> tuple[int, Task]:
        user_id = request[SESSION_KEY].user_id
        task = await self._data.own(user_id, task_id(request))
        if task is None:
            raise TaskNotFound(request.match_info["id"])
        return user_id, task

    async def _json(self, request: web.Request) -> dict[str, Any]:
        return await read_json(request, self._json_depth)
