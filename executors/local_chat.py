"""The local engine's model calls: one streamed Chat Completions request through the official
``openai`` SDK, its pieces assembled (text, tool calls, usage), retried on rate limits and
server errors with the endpoint's Retry-After or a growing delay (each retry announced as an
event); other errors are a clear ``AgentCrashed``. An answer is bounded by characters, by
pieces and by time (``Bounds``), and the event loop is handed back every ``YIELD_PIECES``
pieces: one endpoint never holds the bot's other chats for more than a few ms."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.errors import AgentCrashed, Bound, StreamBounded
from bot.events import Retrying, Usage
from bot.models import Phrase
from executors.local_pieces import Bounds, Pieces, Reply
from executors.local_tools import SCHEMAS

if TYPE_CHECKING:
    from openai import AsyncOpenAI

log = logging.getLogger(__name__)

RETRY_DELAYS_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
ANSWER_S = 1200.0  # one answer, request to last piece (a CPU model: 4096 tokens at 5/s is 820 s)
YIELD_PIECES = 4  # the SDK takes ~0.2 ms of the loop per piece: hand it back every ~1 ms
YIELD_S = 0.001  # a real pause: the loop idles, and threads waiting for the GIL get it


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
    bounds: Bounds | None = None,
    *,
    tools: Sequence[dict[str, Any]] = (),
) -> AsyncGenerator[Retrying, None]:
    """One streamed model call, retried on rate limits and server errors: a ``Retrying``
    before each wait (the progress line says so); the reply is left in ``answer``. An answer
    past ``bounds`` (by default ``Bounds.of(max_tokens, 1200)``) is ``StreamBounded``.
    ``tools``: functions offered beside the engine's own (its MCP servers')."""
    bounds = bounds or Bounds.of(max_tokens, ANSWER_S)
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
            answer.reply = await _timed(client, endpoint, messages, max_tokens, bounds, tools)
            return
        except (AuthenticationError, PermissionDeniedError) as exc:
            variable = str(endpoint.api_key_env or "api_key_env")
            raise AgentCrashed(
                f"the endpoint {endpoint.base_url} refused the key ({exc.status_code}): "
                f"check {endpoint.api_key_env or 'the preset api_key_env'}",
                None,
                "",
                Phrase(
                    "agent.key_refused",
                    {"url": endpoint.base_url, "status": exc.status_code, "variable": variable},
                ),
            ) from exc
        except APITimeoutError as exc:
            said = Phrase("agent.endpoint_timeout", {"url": endpoint.base_url})
            raise AgentCrashed(
                f"the endpoint {endpoint.base_url} timed out", None, "", said
            ) from exc
        except APIConnectionError as exc:
            cause = exc.__cause__ or exc
            kind = {"url": endpoint.base_url, "error": type(cause).__name__}  # as /status says
            raise AgentCrashed(
                f"cannot reach the endpoint {endpoint.base_url}: {cause}",
                None,
                "",
                Phrase("agent.endpoint_unreachable", kind),
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


async def _timed(
    client: AsyncOpenAI,
    endpoint: Endpoint,
    messages: list[dict[str, Any]],
    max_tokens: int,
    bounds: Bounds,
    tools: Sequence[dict[str, Any]] = (),
) -> Reply:
    """``_stream`` within ``bounds.seconds``, request to last piece."""
    timer = asyncio.timeout(bounds.seconds)
    try:
        async with timer:
            return await _stream(client, endpoint, messages, max_tokens, bounds, tools)
    except TimeoutError as exc:
        if not timer.expired():
            raise
        source = f"the endpoint {endpoint.base_url}"
        said = Phrase(
            "agent.bounded.answer_seconds",
            {"url": endpoint.base_url, "limit": f"{bounds.seconds:g}"},
        )
        raise StreamBounded(Bound.SECONDS, bounds.seconds, "one answer", source, said) from exc


async def _stream(
    client: AsyncOpenAI,
    endpoint: Endpoint,
    messages: list[dict[str, Any]],
    max_tokens: int,
    bounds: Bounds,
    tools: Sequence[dict[str, Any]] = (),
) -> Reply:
    """The model's text, its tool calls (assembled from the stream's pieces) and its usage
    (estimated from the characters when the endpoint reports none). ``max_tokens`` bounds
    one answer: llama-server and others otherwise let a small model ramble to its context's
    end. A text or a call's arguments past STREAM_CAP characters ends the answer there (the
    call is refused, the model told); past ``bounds``' pieces it ends the turn."""
    stream = await client.chat.completions.create(  # type: ignore[call-overload]
        model=endpoint.model,
        messages=messages,
        tools=[*SCHEMAS, *tools],
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces = Pieces(bounds, endpoint.base_url)
    async with contextlib.aclosing(stream) as chunks:  # type: ignore[type-var]
        async for chunk in chunks:
            if pieces.count() % YIELD_PIECES == 0:
                await asyncio.sleep(YIELD_S)  # the other chats (and threads: the GIL) go first
            if chunk.usage is not None:
                pieces.usage = Usage(
                    input_tokens=chunk.usage.prompt_tokens or 0,
                    output_tokens=chunk.usage.completion_tokens or 0,
                )
            if not all(pieces.add(choice.delta) for choice in chunk.choices):
                break  # past the cap: the rest of the answer is not read
    return pieces.reply(messages)


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
