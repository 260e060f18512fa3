"""The offline recognizer: pocketsphinx with the US English model its wheel ships (37 MB; no
download at run time; measured in shared/reference/stt-measured.md). English only.

Decoding is blocking CPU work: it runs in one thread of its own (one note at a time, the next
waits its turn), in one-second chunks, and stops at the first chunk past its deadline. The
model is loaded per note (0.4 s) and dropped after it, its memory handed back to the system:
nothing of pocketsphinx is imported before the first voice note, and its model is not kept
while the bot is idle (bench/footprint.py)."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import importlib.util
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bot.errors import TranscriptionFailed
from bot.voice.audio import RATE, decode
from bot.voice.speech import Transcript

CHUNK_BYTES = RATE * 2  # one second of 16-bit samples


class OfflineRecognizer:
    english_only = True

    def __init__(self, *, timeout_s: float, max_s: float) -> None:
        self._timeout_s = timeout_s
        self._max_s = max_s
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stt")
        self._turn = asyncio.Lock()

    @staticmethod
    def installed() -> bool:
        """pocketsphinx and soundfile can be imported (found, not imported: no memory spent)."""
        return all(importlib.util.find_spec(m) is not None for m in ("pocketsphinx", "soundfile"))

    async def transcribe(self, sound: bytes, filename: str, duration_s: float | None) -> Transcript:
        loop = asyncio.get_running_loop()
        async with self._turn:
            deadline = time.monotonic() + self._timeout_s
            stop = threading.Event()
            work = loop.run_in_executor(self._thread, self._recognize, sound, deadline, stop)
            try:
                return await asyncio.wait_for(work, self._timeout_s + 1.0)
            except TimeoutError:
                stop.set()
                raise TranscriptionFailed(
                    "voice.too_slow", seconds=f"{self._timeout_s:g}"
                ) from None
            finally:
                stop.set()  # cancelled (the bot stops): the thread ends at its next chunk

    def _recognize(self, sound: bytes, deadline: float, stop: threading.Event) -> Transcript:
        try:
            return self._decode(sound, deadline, stop)
        finally:
            _give_back()

    def _decode(self, sound: bytes, deadline: float, stop: threading.Event) -> Transcript:
        pcm = decode(sound, self._max_s)
        try:
            from pocketsphinx import Decoder
        except ImportError as exc:  # a broken install: say so rather than fail silently
            raise TranscriptionFailed("voice.no_recognizer") from exc
        decoder = Decoder()  # the packaged en-us model; a fresh one: repeatable per note
        decoder.start_utt()
        for start in range(0, len(pcm.data), CHUNK_BYTES):
            if stop.is_set() or time.monotonic() > deadline:
                raise TranscriptionFailed("voice.too_slow", seconds=f"{self._timeout_s:g}")
            decoder.process_raw(pcm.data[start : start + CHUNK_BYTES], False, False)
        decoder.end_utt()
        hypothesis = decoder.hyp()
        return Transcript(hypothesis.hypstr if hypothesis is not None else "", pcm.cut)


def _give_back() -> None:
    """Return the freed model's memory to the system: glibc keeps the ~50 MB a decoder
    allocated (in this thread's arena) otherwise, and the process stays that much larger
    after every note (measured: 112 MB idle, 163 after a note, 114 after this)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``; None elsewhere (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None
