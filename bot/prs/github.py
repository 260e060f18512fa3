"""GitHub's REST API, as much of it as a task's PR needs: open one (or find the one already
open for its branch), read its state and its head commit's checks. aiohttp against the REST
base (``DETACH_GITHUB_API_URL``: GitHub Enterprise's too); every call bounded; the token
(``bot.prs.token``) is asked at each call and never logged."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from bot.errors import UserInputError
from bot.store.prs import ChecksState, PrState

CALL_TIMEOUT_S = 20.0
FAILED = frozenset({"failure", "timed_out", "cancelled", "action_required", "startup_failure"})
PASSED = frozenset({"success", "neutral", "skipped"})


@dataclass(frozen=True, slots=True)
class Pull:
    number: int
    url: str
    head_sha: str
    state: PrState


@dataclass(frozen=True, slots=True)
class NewPull:
    repo: str  # owner/name
    head: str  # the branch
    base: str
    title: str
    body: str
    draft: bool


class GitHub:
    """``token``: the owner's token, asked at each call (``Token``)."""

    def __init__(self, api_url: str, token: Callable[[], Awaitable[str]]) -> None:
        self._api = api_url.rstrip("/")
        self._token = token

    async def open(self, new: NewPull) -> tuple[Pull, bool]:
        """The PR opened (True), or the one already open for the branch (False); refused: no
        login (``pr.no_login``), GitHub's own reason (``pr.github``)."""
        body = {
            "title": new.title,
            "head": new.head,
            "base": new.base,
            "body": new.body,
            "draft": new.draft,
        }
        status, data = await self._call("POST", f"/repos/{new.repo}/pulls", body)
        if status == 201:
            return _pull(data), True
        if status == 422 and "already exists" in str(data).lower():
            existing = await self.for_branch(new.repo, new.head)
            if existing is not None:
                return existing, False
        raise _refused(status, data)

    async def for_branch(self, repo: str, branch: str) -> Pull | None:
        owner = repo.split("/", 1)[0]
        status, data = await self._call(
            "GET", f"/repos/{repo}/pulls?state=open&head={owner}:{branch}"
        )
        if status != 200:
            raise _refused(status, data)
        return _pull(data[0]) if isinstance(data, list) and data else None

    async def pull(self, repo: str, number: int) -> Pull:
        status, data = await self._call("GET", f"/repos/{repo}/pulls/{number}")
        if status != 200:
            raise _refused(status, data)
        return _pull(data)

    async def checks(self, repo: str, sha: str) -> ChecksState:
        """The check runs of ``sha`` summed up."""
        status, data = await self._call("GET", f"/repos/{repo}/commits/{sha}/check-runs")
        if status != 200:
            raise _refused(status, data)
        runs = (data.get("check_runs") or []) if isinstance(data, dict) else []
        if not runs:
            return ChecksState.NONE
        if any(r.get("conclusion") in FAILED for r in runs):
            return ChecksState.FAILURE
        if all(r.get("status") == "completed" and r.get("conclusion") in PASSED for r in runs):
            return ChecksState.SUCCESS
        return ChecksState.PENDING

    async def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        token = await self._token()
        if not token:
            raise UserInputError("pr.no_login")
        headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }
        timeout = aiohttp.ClientTimeout(total=CALL_TIMEOUT_S)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.request(method, self._api + path, json=body, headers=headers) as answer,
            ):
                text = await answer.text()
                return answer.status, _json(text)
        except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError) as exc:
            raise UserInputError("pr.github", status="-", reason=str(exc)[:200]) from exc


def _json(text: str) -> Any:
    """GitHub's answer, or what a proxy said instead of JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return {"message": text.strip()[:200]}


def _pull(data: Any) -> Pull:
    state = (
        PrState.MERGED if data.get("merged") or data.get("merged_at") else PrState(data["state"])
    )
    return Pull(int(data["number"]), str(data["html_url"]), str(data["head"]["sha"]), state)


def _refused(status: int, data: Any) -> UserInputError:
    if status == 401:
        return UserInputError("pr.no_login")
    message = data.get("message", "") if isinstance(data, dict) else ""
    details = data.get("errors") if isinstance(data, dict) else None
    if details:
        message += " " + "; ".join(str(e.get("message", e)) for e in details if e)
    return UserInputError("pr.github", status=str(status), reason=message.strip()[:300])
