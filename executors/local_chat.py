"""The local engine's model calls: one streamed Chat Completions request through the official
``openai`` SDK, its pieces assembled (text, tool calls, usage), retried on rate limits and
server errors with the endpoint's Retry-After or a growing delay (each retry announced as an
event); other errors are a clear ``AgentCrashed``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bot.errors import AgentCrashed
from bot.events import Retrying, Usage
from executors.local_tools import SCHEMAS

if TYPE_CHECKING:
    from openai import AsyncOpenAI

log = logging.getLogger(__name__)

CHARS_PER_TOKEN = 3.5  # a rough estimate, for fitting and for endpoints that report no usage
RETRY_DELAYS_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
STREAM_CAP = 1_000_000  # characters of an answer's text, or of one tool call's arguments


@dataclass(frozen=True, slots=True)
class Reply:
    """One model answer: its text, its tool calls as the conversation keeps them, its usage,
    and the calls refused before running (by id: what the model is told instead)."""

    text: str
    calls: list[dict[str, Any]]
    usage: Usage
    refused: dict[str, str]


@dataclass(slots=True)
class Answer:
    """Where ``complete`` leaves the model's reply (the events it yields are its retries)."""

    reply: Reply | None = None

    def got(self) -> Reply:
        if self.reply is None:
            raise AssertionError("a model call ends with its reply or raises")
        return self.reply


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a turn's model is: the task's preset or the DETACH_LOCAL_* settings."""

    base_url: str
    model: str
    api_key_env: str | None
    context_window: int


async def complete(
    client: AsyncOpenAI,
    endpoint: Endpoint,
    messages: list[dict[str, Any]],
    max_tokens: int,
    retry_budget_s: float,
    answer: Answer,
) -> AsyncGenerator[Retrying, None]:
    """One streamed model call, retried on rate limits and server errors: a ``Retrying``
    before each wait (the progress line says so); the reply is left in ``answer``."""
    from openai import (
        APIConnectionError,
        APIStatusError,
        APITimeoutError,
        AuthenticationError,
        PermissionDeniedError,
    )

    waited = 0.0
    for attempt in range(len(RETRY_DELAYS_S) + 1):
        try:
            answer.reply = await _stream(client, endpoint, messages, max_tokens)
            return
        except (AuthenticationError, PermissionDeniedError) as exc:
            raise AgentCrashed(
                f"the endpoint {endpoint.base_url} refused the key ({exc.status_code}): "
                f"check {endpoint.api_key_env or 'the preset api_key_env'}",
                None,
                "",
            ) from exc
        except APITimeoutError as exc:
            raise AgentCrashed(f"the endpoint {endpoint.base_url} timed out", None, "") from exc
        except APIConnectionError as exc:
            raise AgentCrashed(
                f"cannot reach the endpoint {endpoint.base_url}: {exc.__cause__ or exc}",
                None,
                "",
            ) from exc
        except APIStatusError as exc:
            retry = exc.status_code == 429 or exc.status_code >= 500
            delay = _retry_after(exc) or RETRY_DELAYS_S[min(attempt, len(RETRY_DELAYS_S) - 1)]
            spent = attempt == len(RETRY_DELAYS_S) or waited + delay > retry_budget_s
            if not retry or spent:
                what = "rate limit" if exc.status_code == 429 else "error"
                raise AgentCrashed(
                    f"the endpoint answered {exc.status_code} ({what}): {_message(exc)}"
                    + (f"; gave up after retrying for {waited:.0f} s" if retry else ""),
                    None,
                    "",
                ) from exc
            log.info(
                "local: %s from %s; again in %.1f s", exc.status_code, endpoint.base_url, delay
            )
            yield Retrying(exc.status_code, attempt + 1, delay)
            await asyncio.sleep(delay)
            waited += delay
    raise AssertionError("unreachable")


async def _stream(
    client: AsyncOpenAI, endpoint: Endpoint, messages: list[dict[str, Any]], max_tokens: int
) -> Reply:
    """The model's text, its tool calls (assembled from the stream's pieces) and its usage
    (estimated from the characters when the endpoint reports none). ``max_tokens`` bounds
    one answer: llama-server and others otherwise let a small model ramble to its context's
    end. A text or a call's arguments past STREAM_CAP characters ends the answer there (the
    call is refused, the model told)."""
    stream = await client.chat.completions.create(  # type: ignore[call-overload]
        model=endpoint.model,
        messages=messages,
        tools=SCHEMAS,
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces = _Pieces()
    async with contextlib.aclosing(stream) as chunks:  # type: ignore[type-var]
        async for chunk in chunks:
            if chunk.usage is not None:
                pieces.usage = Usage(
                    input_tokens=chunk.usage.prompt_tokens or 0,
                    output_tokens=chunk.usage.completion_tokens or 0,
                )
            if not all(pieces.add(choice.delta) for choice in chunk.choices):
                break  # past the cap: the rest of the answer is not read
    return pieces.reply(messages)


@dataclass(slots=True)
class _Streamed:
    """One tool call as its pieces arrive: joined once, at the end."""

    id: str = ""
    name: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)
    size: int = 0
    over: bool = False


@dataclass(slots=True)
class _Pieces:
    """An answer as it streams in; each part kept as a list of pieces and its size counted, so
    a long one costs linear time and stops at STREAM_CAP."""

    text: list[str] = field(default_factory=list)
    text_size: int = 0
    calls: dict[int, _Streamed] = field(default_factory=dict)
    usage: Usage | None = None

    def add(self, delta: Any) -> bool:
        """Take one delta; False once a part passed the cap (stop reading)."""
        if delta.content:
            self.text.append(delta.content)
            self.text_size += len(delta.content)
        for piece in delta.tool_calls or ():
            call = self.calls.setdefault(piece.index, _Streamed())
            call.id = piece.id or call.id
            if piece.function is not None:
                call.name.append(piece.function.name or "")
                call.arguments.append(piece.function.arguments or "")
                call.size += len(piece.function.arguments or "") + len(piece.function.name or "")
                call.over = call.size > STREAM_CAP
                if call.over:
                    return False
        return self.text_size <= STREAM_CAP

    def reply(self, messages: list[dict[str, Any]]) -> Reply:
        answer = "".join(self.text)[:STREAM_CAP]
        calls, refused = [], {}
        for n, index in enumerate(sorted(self.calls)):
            streamed = self.calls[index]
            call_id = streamed.id or f"call_{uuid.uuid4().hex[:12]}_{n}"
            name = "".join(streamed.name)[:200]
            arguments = "{}" if streamed.over else "".join(streamed.arguments)
            if streamed.over:
                refused[call_id] = (
                    f"the arguments of {name} were longer than {STREAM_CAP} characters; the "
                    "call was not run. Write big content in smaller parts"
                )
            function = {"name": name, "arguments": arguments}
            calls.append({"id": call_id, "type": "function", "function": function})
        usage = self.usage
        if usage is None:
            sent = sum(len(json.dumps(m)) for m in messages)
            made = self.text_size + sum(c.size for c in self.calls.values())
            usage = Usage(int(sent / CHARS_PER_TOKEN), int(made / CHARS_PER_TOKEN))
        return Reply(answer, calls, usage, refused)


def _retry_after(exc: Any) -> float | None:
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    try:
        return min(float(value), 60.0) if value else None
    except ValueError:
        return None


def _message(exc: Any) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    inner = body.get("error") if isinstance(body.get("error"), dict) else body
    return str((inner or {}).get("message") or exc.message)[:300]
