"""pocketsphinx with the US English model its wheel ships (37 MB; Debian's pocketsphinx-en-us
holds the same acoustic model and language model). English only; the fallback when Whisper's
packages are not installed. Blocking: the caller runs it in a thread."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from bot.voice.audio import RATE

CHUNK_BYTES = RATE * 2  # one second of 16-bit samples


def installed() -> bool:
    """pocketsphinx can be imported (looked up, not imported)."""
    return importlib.util.find_spec("pocketsphinx") is not None


def transcribe(pcm: bytes, expired: Callable[[], bool]) -> str:
    """The words in ``pcm`` (16 kHz mono 16-bit). Raises TimeoutError at the first one-second
    chunk once ``expired()``. A fresh decoder per note: it adapts to what it heard before."""
    from pocketsphinx import Decoder

    decoder = Decoder()  # the packaged en-us model
    decoder.start_utt()
    for start in range(0, len(pcm), CHUNK_BYTES):
        if expired():
            raise TimeoutError
        decoder.process_raw(pcm[start : start + CHUNK_BYTES], False, False)
    decoder.end_utt()
    hypothesis = decoder.hyp()
    return hypothesis.hypstr if hypothesis is not None else ""
