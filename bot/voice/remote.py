"""A transcription server with OpenAI's API (``POST {base}/audio/transcriptions``, multipart:
the file and the model; a local whisper server or a hosted one): DETACH_STT_BASE_URL,
DETACH_STT_MODEL, DETACH_STT_API_KEY. A note longer than DETACH_STT_MAX_S is cut here first
(decoded and sent as FLAC), so the server never hears more than the bound."""

from __future__ import annotations

import asyncio
import json
import logging

import aiohttp
from pydantic import SecretStr

from bot.errors import TranscriptionFailed
from bot.voice.audio import decode, encode_flac
from bot.voice.speech import Transcript

log = logging.getLogger(__name__)
MAX_ANSWER_BYTES = 1024 * 1024  # a transcript of minutes is a few kB


class RemoteRecognizer:
    beyond_english: str | None = None

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: SecretStr | None,
        *,
        timeout_s: float,
        max_s: float,
    ) -> None:
        self._url = base_url.rstrip("/") + "/audio/transcriptions"
        self._model = model
        self._api_key = api_key
        self._timeout_s = timeout_s
        self._max_s = max_s

    async def transcribe(
        self,
        sound: bytes,
        filename: str,
        duration_s: float | None,
        language: str | None = None,
    ) -> Transcript:
        """``language`` is not sent: the server tells the language itself."""
        sound, filename, cut = await self._bounded(sound, filename, duration_s)
        form = aiohttp.FormData()
        form.add_field("file", sound, filename=filename, content_type="application/octet-stream")
        form.add_field("model", self._model)
        form.add_field("response_format", "json")
        headers = {}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key.get_secret_value()}"
        timeout = aiohttp.ClientTimeout(total=self._timeout_s)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.post(self._url, data=form, headers=headers) as answer,
            ):
                body = await answer.content.read(MAX_ANSWER_BYTES)
                status = answer.status
        except TimeoutError:
            raise TranscriptionFailed("voice.server_slow", seconds=f"{self._timeout_s:g}") from None
        except aiohttp.ClientError as exc:
            raise TranscriptionFailed("voice.server_failed", reason=type(exc).__name__) from exc
        if status != 200:
            log.warning("transcription server answered HTTP %s", status)
            raise TranscriptionFailed("voice.server_failed", reason=f"HTTP {status}")
        return Transcript(_text_of(body), cut)

    async def _bounded(
        self, sound: bytes, filename: str, duration_s: float | None
    ) -> tuple[bytes, str, bool]:
        """The note as sent: itself when Telegram says it is within the bound; else decoded
        and cut (FLAC). A file of unknown length this cannot read is sent as it is."""
        if duration_s is not None and duration_s <= self._max_s:
            return sound, filename, False
        try:
            pcm = await asyncio.to_thread(decode, sound, self._max_s)
        except TranscriptionFailed:
            if duration_s is None:
                return sound, filename, False
            raise
        if not pcm.cut:
            return sound, filename, False
        return await asyncio.to_thread(encode_flac, pcm), "note.flac", True


def _text_of(body: bytes) -> str:
    """The ``text`` of the server's JSON answer; anything else is a clear failure."""
    try:
        answer = json.loads(body)
    except ValueError:
        raise TranscriptionFailed("voice.server_garbage") from None
    text = answer.get("text") if isinstance(answer, dict) else None
    if not isinstance(text, str):
        raise TranscriptionFailed("voice.server_garbage")
    return text
