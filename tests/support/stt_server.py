"""A scripted transcription server on 127.0.0.1 with OpenAI's ``POST /v1/audio/transcriptions``
(multipart: file, model, response_format): it records what it received and answers from a
script (a transcript, a slow answer, an error status, or garbage)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import web


@dataclass
class Answer:
    text: str | None = None  # the transcript (JSON {"text": ...})
    status: int = 200
    raw: bytes | None = None  # instead of JSON: these bytes (garbage)
    delay_s: float = 0.0


@dataclass
class Received:
    fields: dict[str, str]
    file: bytes
    filename: str
    authorization: str | None


@dataclass
class SttServer:
    answers: list[Answer] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    base_url: str = ""

    async def __aenter__(self) -> Self:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _transcribe(self, request: web.Request) -> web.Response:
        fields: dict[str, str] = {}
        file, filename = b"", ""
        async for part in await request.multipart():
            if part.name == "file":
                filename = part.filename or ""  # type: ignore[union-attr]
                file = await part.read()  # type: ignore[union-attr]
            elif part.name:
                fields[part.name] = await part.text()  # type: ignore[union-attr]
        self.received.append(Received(fields, file, filename, request.headers.get("Authorization")))
        answer = self.answers.pop(0) if self.answers else Answer(text="")
        await asyncio.sleep(answer.delay_s)
        if answer.raw is not None:
            return web.Response(status=answer.status, body=answer.raw, content_type="text/html")
        body: dict[str, Any] = {"text": answer.text}
        return web.Response(status=answer.status, text=json.dumps(body))
