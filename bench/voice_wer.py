"""The offline recognizers, measured: a fixed set of phrases of the kind people say to the bot,
in English and Russian, spoken by espeak-ng and made Telegram-like voice notes (OGG/Opus,
48 kHz, by opusenc, as tests/test_voice_offline.py does), heard by each offline engine whose
packages are installed, through the bot's own reading of a note (bot/voice/audio.py) and with
the chat's language as the hint. Prints one row per engine and language: the word error rate
over all the phrases (tests/support/wer.py), the mean seconds per phrase (a fresh model per
note, as the bot does) and the model's size; BENCH_VOICE_SHOW=1 prints every transcript.
Needs espeak-ng and opusenc (make voice-tools)."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.voice import whisper  # noqa: E402
from bot.voice.audio import decode  # noqa: E402
from bot.voice.offline import POCKETSPHINX, WHISPER_BASE, WHISPER_TINY_EN, Engine  # noqa: E402
from tests.support.wer import corpus_wer, wer  # noqa: E402

ENGLISH = (
    "fix the failing test in the parser",
    "write a short summary of the meeting notes",
    "what changed since yesterday",
    "run the tests and tell me what broke",
    "update the readme with the new install steps",
    "check the server logs and report the errors",
    "please list the files in the project folder",
    "add a unit test for the login form",
    "rename the function to make it clearer",
    "review the pull request and leave comments",
    "why does the build fail on the main branch",
    "make the page load faster",
    "delete the old backup files",
    "show me the last commit",
    "explain how the cache works",
    "count the lines in the main python file",
    "write a script that sends a daily report",
    "find where the password is stored",
    "stop the running task",
    "translate the error messages into russian",
    "move the settings into a separate file",
    "what is the status of my tasks",
)
RUSSIAN = (
    "исправь падающий тест в парсере",
    "напиши краткое содержание заметок со встречи",
    "что изменилось со вчерашнего дня",
    "запусти тесты и скажи что сломалось",
    "обнови инструкцию по установке",
    "проверь логи сервера и сообщи об ошибках",
    "покажи список файлов в папке проекта",
    "добавь тест для формы входа",
    "переименуй функцию чтобы было понятнее",
    "посмотри запрос на слияние и оставь комментарии",
    "почему сборка падает на главной ветке",
    "сделай чтобы страница загружалась быстрее",
    "удали старые резервные копии",
    "покажи последний коммит",
    "объясни как работает кэш",
    "напиши скрипт который присылает отчёт каждый день",
    "найди где хранится пароль",
    "останови текущую задачу",
    "переведи сообщения об ошибках на английский",
    "какой статус у моих задач",
)
VOICES = {"en": "en-us", "ru": "ru"}
SPEED_WPM = 140


def spoken(folder: Path, sentence: str, language: str) -> bytes:
    """``sentence`` as a voice note: espeak-ng's WAV resampled to 48 kHz (opusenc keeps the
    input's rate in its header), then OGG/Opus at 32 kbit/s."""
    wav, wav48, ogg = folder / "said.wav", folder / "said48.wav", folder / "said.ogg"
    voice = ["-v", VOICES[language], "-s", str(SPEED_WPM)]
    subprocess.run(["espeak-ng", *voice, "-w", str(wav), sentence], check=True, timeout=60)
    samples, rate = soundfile.read(wav, dtype="float32")
    count = int(len(samples) * 48_000 / rate)
    up = np.interp(np.arange(count) * (rate / 48_000), np.arange(len(samples)), samples)
    soundfile.write(wav48, up, 48_000, subtype="PCM_16")
    subprocess.run(["opusenc", "--quiet", "--bitrate", "32", str(wav48), str(ogg)], check=True)
    return ogg.read_bytes()


def size_mb(engine: Engine) -> float:
    if engine is POCKETSPHINX:
        import pocketsphinx

        model = Path(pocketsphinx.__file__).parent / "model" / "en-us"
        return sum(p.stat().st_size for p in model.rglob("*") if p.is_file()) / 1e6
    weights = whisper.BASE if engine is WHISPER_BASE else whisper.TINY_EN
    return whisper.size_mb(weights)


def measure(
    engine: Engine, notes: list[tuple[str, bytes]], language: str, folder: Path
) -> tuple[float, float, float]:
    """The engine's WER over ``notes``, its mean seconds per note and its mean CPU seconds
    (all threads; the wall time depends on what else the machine runs)."""
    pairs, seconds, cpu = [], [], []
    for said, note in notes:
        pcm = decode(note, 300)
        start, start_cpu = time.monotonic(), time.process_time()
        heard = engine.hear(pcm, lambda: False, language, folder)
        seconds.append(time.monotonic() - start)
        cpu.append(time.process_time() - start_cpu)
        pairs.append((said, heard))
        if os.environ.get("BENCH_VOICE_SHOW"):
            print(f"  {wer(said, heard):4.2f}  {said!r} -> {heard!r}", flush=True)
    return corpus_wer(pairs), statistics.mean(seconds), statistics.mean(cpu)


def main() -> int:
    if shutil.which("espeak-ng") is None or shutil.which("opusenc") is None:
        print("voice_wer: needs espeak-ng and opusenc (make voice-tools)")
        return 1
    phrases = {"en": ENGLISH, "ru": RUSSIAN}
    with tempfile.TemporaryDirectory() as folder:
        notes = {
            lang: [(s, spoken(Path(folder), s, lang)) for s in said]
            for lang, said in phrases.items()
        }
        return table(notes, Path(folder))


def table(notes: dict[str, list[tuple[str, bytes]]], folder: Path) -> int:
    print(f"offline voice: {len(ENGLISH)} English and {len(RUSSIAN)} Russian phrases (espeak-ng)")
    print(f"{'recognizer':<18}{'lang':<6}{'WER':>6}{'s/phrase':>10}{'CPU s':>8}{'model MB':>10}")
    for engine in (WHISPER_BASE, WHISPER_TINY_EN, POCKETSPHINX):
        if not engine.installed():
            print(f"{engine.name:<18}not installed")
            continue
        languages = ("en",) if engine.english_only else ("en", "ru")
        for lang in languages:
            rate, mean_s, cpu_s = measure(engine, notes[lang], lang, folder)
            size = size_mb(engine)
            print(
                f"{engine.name:<18}{lang:<6}{rate:>6.2f}{mean_s:>10.2f}{cpu_s:>8.2f}{size:>10.0f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
