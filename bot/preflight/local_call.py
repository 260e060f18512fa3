"""The preflight's one call through a /local preset: one streamed Chat Completions request to
an OpenAI-compatible endpoint (the official ``openai`` SDK), no tools, bounded by a timeout;
the model's text is the verdict (read strictly by ``bot.preflight.verdict``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from bot.errors import PreflightFailed
from bot.events import Usage
from bot.models import Phrase, Preset
from bot.preflight.call import FAILED, TIMEOUT_S, Answer, timed_out
from executors.local_client import openai_client

TEXT_MAX = 64_000  # characters of the answer read
MAX_TOKENS = 1024  # the verdict is one small JSON object


class LocalPreflight:
    """Asks the endpoint of ``preset`` (its ``base_url``, else ``base_url`` here: the
    DETACH_LOCAL_* one) with the key held by its ``api_key_env`` in ``environ``. ``price_as``:
    the preset the call's tokens are priced at (an unpriced one: its engine's dearest)."""

    def __init__(
        self,
        environ: Mapping[str, str],
        base_url: str | None,
        api_key_env: str | None,
        price_as: Callable[[Preset], Preset | None],
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self._environ = dict(environ)
        self._base_url = base_url
        self._api_key_env = api_key_env
        self._price_as = price_as
        self.timeout_s = timeout_s

    async def ask(self, prompt: str, preset: Preset) -> Answer:
        """The model's answer; ``PreflightFailed`` on no endpoint, an API error, or no answer
        within ``timeout_s``."""
        base_url = preset.base_url or self._base_url
        if not base_url:
            raise PreflightFailed(
                "no endpoint for the local preflight model", Phrase("preflight.why.no_endpoint")
            )
        key_env = preset.api_key_env or self._api_key_env
        key = self._environ.get(key_env) if key_env else None
        client = await openai_client(base_url, key or "none", timeout=self.timeout_s)
        from openai import APIError  # imported by now

        try:
            async with asyncio.timeout(self.timeout_s):
                text, usage = await self._stream(client, prompt, preset)
        except TimeoutError:
            raise PreflightFailed(
                f"no answer within {self.timeout_s:g} s", timed_out(self.timeout_s)
            ) from None
        except APIError as exc:
            raise PreflightFailed(f"local model failed: {str(exc)[:200]}", FAILED) from exc
        finally:
            await client.close()
        priced = self._price_as(preset)
        return Answer(text, priced.cost_usd(usage) if priced is not None else None)

    async def _stream(self, client: Any, prompt: str, preset: Preset) -> tuple[str, Usage]:
        stream = await client.chat.completions.create(
            model=preset.model,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=MAX_TOKENS,
            stream=True,
            stream_options={"include_usage": True},
        )
        pieces: list[str] = []
        size, usage = 0, Usage()
        async for chunk in stream:
            if chunk.usage is not None:
                usage = Usage(chunk.usage.prompt_tokens or 0, chunk.usage.completion_tokens or 0)
            for choice in chunk.choices or ():
                piece = choice.delta.content or "" if choice.delta is not None else ""
                if size < TEXT_MAX:
                    pieces.append(piece[: TEXT_MAX - size])
                    size += len(piece)
        return "".join(pieces), usage
