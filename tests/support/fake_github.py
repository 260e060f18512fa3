"""A scripted GitHub REST server on 127.0.0.1 (aiohttp): the pulls and check-runs endpoints a
task's PR uses, recording each request (method, path, JSON body, Authorization)."""

from __future__ import annotations

from typing import Any, Self

from aiohttp import web


class FakeGitHub:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.pulls: dict[int, dict[str, Any]] = {}
        self.runs: list[dict[str, Any]] = []  # the check runs of every commit
        self.next_number = 7
        self.token = ""  # set: any other Authorization is answered 401
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> Self:
        app = web.Application(middlewares=[self._auth])
        app.router.add_post("/repos/{owner}/{name}/pulls", self._create)
        app.router.add_get("/repos/{owner}/{name}/pulls", self._list)
        app.router.add_get("/repos/{owner}/{name}/pulls/{number}", self._get)
        app.router.add_get("/repos/{owner}/{name}/commits/{sha}/check-runs", self._runs)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.token and request.headers.get("Authorization") != f"Bearer {self.token}":
            await self._record(request)
            return web.json_response({"message": "Bad credentials"}, status=401)
        return await handler(request)

    def of(self, method: str, part: str = "") -> list[dict[str, Any]]:
        return [r for r in self.requests if r["method"] == method and part in r["path"]]

    async def _record(self, request: web.Request) -> None:
        body = await request.json() if request.can_read_body else None
        self.requests.append(
            {
                "method": request.method,
                "path": request.path_qs,
                "body": body,
                "auth": request.headers.get("Authorization", ""),
            }
        )

    async def _create(self, request: web.Request) -> web.Response:
        await self._record(request)
        body = self.requests[-1]["body"]
        owner = request.match_info["owner"]
        if any(p["head"]["ref"] == body["head"] for p in self.pulls.values()):
            message = f"A pull request already exists for {owner}:{body['head']}."
            errors = [{"resource": "PullRequest", "code": "custom", "message": message}]
            return web.json_response({"message": "Validation Failed", "errors": errors}, status=422)
        number = self.next_number
        self.next_number += 1
        self.pulls[number] = {
            "number": number,
            "html_url": f"https://github.example/{owner}/{request.match_info['name']}/pull/{number}",
            "state": "open",
            "merged": False,
            "draft": body.get("draft", False),
            "head": {"ref": body["head"], "sha": "0" * 40},
        }
        return web.json_response(self.pulls[number], status=201)

    async def _list(self, request: web.Request) -> web.Response:
        await self._record(request)
        head = request.query.get("head", "").partition(":")[2]
        found = [p for p in self.pulls.values() if p["head"]["ref"] == head]
        return web.json_response(found)

    async def _get(self, request: web.Request) -> web.Response:
        await self._record(request)
        pull = self.pulls.get(int(request.match_info["number"]))
        return web.json_response(pull or {"message": "Not Found"}, status=200 if pull else 404)

    async def _runs(self, request: web.Request) -> web.Response:
        await self._record(request)
        return web.json_response({"total_count": len(self.runs), "check_runs": self.runs})
