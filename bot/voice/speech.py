"""What turns a voice note into words: the port the drafts use and its answer (the choice
between a transcription server and the offline recognizer: ``bot.voice.choice``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from bot.errors import clean

MAX_TEXT_CHARS = 3000  # a draft's text: fits one message with its notes (4096)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]+")
_SPACES = re.compile(r"[ \t]+")


@dataclass(frozen=True, slots=True)
class Transcript:
    """``cut``: the note was longer than DETACH_STT_MAX_S and only its start was heard."""

    text: str
    cut: bool


class Recognizer(Protocol):
    """``beyond_english``: the key of the note a draft carries in a chat whose language is not
    English (pocketsphinx hears English only; offline Whisper is modest beyond it), or None."""

    beyond_english: str | None

    async def transcribe(
        self,
        sound: bytes,
        filename: str,
        duration_s: float | None,
        language: str | None = None,
    ) -> Transcript:
        """The words of ``sound`` (``duration_s``: Telegram's, when it says; ``language``: the
        chat's, a hint). Raises TranscriptionFailed with a key that says what went wrong."""
        ...


def tidy(text: str) -> str:
    """A transcript as a draft's text: no control characters, no runs of spaces, bounded.
    It is hostile input all the same: nothing reads options or commands out of it."""
    text = _SPACES.sub(" ", _CONTROL.sub(" ", clean(text))).strip()
    return text if len(text) <= MAX_TEXT_CHARS else text[: MAX_TEXT_CHARS - 1] + "…"
