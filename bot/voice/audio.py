"""A sound file (a Telegram voice note is OGG/Opus at 48 kHz) as what a recognizer takes:
16 kHz mono 16-bit PCM, cut at a bound. soundfile's wheel bundles libsndfile, which reads
OGG/Opus, OGG/Vorbis, FLAC, WAV and MP3; numpy resamples. Both are imported when the first
note arrives, never at idle (bench/footprint.py)."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from bot.errors import TranscriptionFailed

RATE = 16_000  # what Whisper and pocketsphinx's US English model take


@dataclass(frozen=True, slots=True)
class Pcm:
    """``data``: 16 kHz mono signed 16-bit little-endian samples; ``cut``: the sound was
    longer than the bound and only its start is here; ``duration_s``: the whole sound's."""

    data: bytes
    duration_s: float
    cut: bool


def decode(sound: bytes, max_s: float) -> Pcm:
    """``sound`` (any format libsndfile reads) as 16 kHz PCM, at most ``max_s`` of it.
    Raises TranscriptionFailed when it is not a sound this can read. Blocking: run it off
    the event loop."""
    samples, rate, frames = _read(sound, max_s)
    duration_s = frames / rate if rate else 0.0
    mono = samples.mean(axis=1) if samples.ndim == 2 else samples
    resampled = _resample(mono, rate, RATE)
    return Pcm(_pcm16(resampled), duration_s, cut=duration_s > max_s)


def encode_flac(pcm: Pcm) -> bytes:
    """The PCM as a FLAC file (what a transcription server is sent when a note was cut)."""
    import numpy as np
    import soundfile

    out = io.BytesIO()
    samples = np.frombuffer(pcm.data, dtype="<i2")
    soundfile.write(out, samples, RATE, format="FLAC", subtype="PCM_16")
    return out.getvalue()


MAX_RATE = 48_000  # Telegram's voice notes are 48 kHz Opus; speech needs no more
MAX_CHANNELS = 2


def _read(sound: bytes, max_s: float) -> tuple[Any, int, int]:
    import soundfile

    try:
        with soundfile.SoundFile(io.BytesIO(sound)) as f:
            rate, frames = f.samplerate, f.frames
            if not 0 < rate <= MAX_RATE or not 0 < f.channels <= MAX_CHANNELS:
                # a small file can declare a huge rate or many channels: the read below would
                # allocate for them before decoding a sample
                raise ValueError(f"{rate} Hz, {f.channels} channels: not a voice note")
            wanted = min(frames, int(max_s * rate)) if frames > 0 else int(max_s * rate)
            samples = f.read(wanted, dtype="float32", always_2d=True)
    except (RuntimeError, TypeError, ValueError) as exc:  # soundfile.LibsndfileError
        raise TranscriptionFailed("voice.unreadable", reason=str(exc)[:200]) from exc
    return samples, rate, frames if frames > 0 else len(samples)


def _resample(samples: Any, rate: int, target: int) -> Any:
    """Linear interpolation onto the target rate (speech below 8 kHz survives it; the
    measured recognition did not depend on the resampler, stt-measured.md)."""
    import numpy as np

    if rate == target or len(samples) == 0:
        return samples
    count = int(len(samples) * target / rate)
    positions = np.arange(count, dtype="float64") * (rate / target)
    return np.interp(positions, np.arange(len(samples), dtype="float64"), samples)


def _pcm16(samples: Any) -> bytes:
    import numpy as np

    clipped = np.clip(samples, -1.0, 1.0)
    return (clipped * 32767.0).astype("<i2").tobytes()
