"""The local engine's model calls: one streamed Chat Completions request through the official
``openai`` SDK, its pieces assembled (text, tool calls, usage), retried on rate limits and
server errors with the endpoint's Retry-After or a growing delay; other errors are a clear
``AgentCrashed``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.errors import AgentCrashed
from bot.events import Usage
from executors.local_tools import SCHEMAS

if TYPE_CHECKING:
    from openai import AsyncOpenAI

log = logging.getLogger(__name__)

CHARS_PER_TOKEN = 3.5  # a rough estimate, for fitting and for endpoints that report no usage
RETRY_DELAYS_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)


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
) -> tuple[str, list[dict[str, Any]], Usage]:
    """One streamed model call, retried on rate limits and server errors."""
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
            return await _stream(client, endpoint, messages, max_tokens)
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
            await asyncio.sleep(delay)
            waited += delay
    raise AssertionError("unreachable")


async def _stream(
    client: AsyncOpenAI, endpoint: Endpoint, messages: list[dict[str, Any]], max_tokens: int
) -> tuple[str, list[dict[str, Any]], Usage]:
    """The model's text, its tool calls (assembled from the stream's pieces) and its usage
    (estimated from the characters when the endpoint reports none). ``max_tokens`` bounds
    one answer: llama-server and others otherwise let a small model ramble to its context's
    end."""
    stream = await client.chat.completions.create(  # type: ignore[call-overload]
        model=endpoint.model,
        messages=messages,
        tools=SCHEMAS,
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
    )
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    usage: Usage | None = None
    async with contextlib.aclosing(stream) as chunks:  # type: ignore[type-var]
        async for chunk in chunks:
            if chunk.usage is not None:
                usage = Usage(
                    input_tokens=chunk.usage.prompt_tokens or 0,
                    output_tokens=chunk.usage.completion_tokens or 0,
                )
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                for piece in delta.tool_calls or ():
                    call = calls.setdefault(
                        piece.index,
                        {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                    )
                    if piece.id:
                        call["id"] = piece.id
                    if piece.function is not None:
                        call["function"]["name"] += piece.function.name or ""
                        call["function"]["arguments"] += piece.function.arguments or ""
    answer = "".join(text)
    ordered = [calls[i] for i in sorted(calls)]
    for n, call in enumerate(ordered):
        call["id"] = call["id"] or f"call_{uuid.uuid4().hex[:12]}_{n}"
    if usage is None:
        sent = sum(len(json.dumps(m)) for m in messages)
        made = len(answer) + sum(len(json.dumps(c)) for c in ordered)
        usage = Usage(int(sent / CHARS_PER_TOKEN), int(made / CHARS_PER_TOKEN))
    return answer, ordered, usage


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
