"""Whisper's weights pinned by content (``bot.voice.pins``): the real model's files pass; a copy
with one byte flipped, put where the loader joins the model (its ``folder``), is refused before
CTranslate2 sees it, by the recognizer as a localized "voice is unavailable" and in the draft
flow through the bot (en and ru); a file that changes after it passed is hashed again; a file
without a pin, or a model read into memory with a flipped byte, is refused too."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bot.errors import TranscriptionFailed, WeightsRefused
from bot.voice import pins, whisper
from bot.voice.offline import WHISPER_BASE, OfflineRecognizer
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, running_bot
from tests.test_phone import answer, settings
from tests.test_voice_offline import MODELS, SENTENCE, spoken_note

pytestmark = pytest.mark.slow  # copies and hashes the 145 MB model


def tampered(folder: Path) -> Path:
    """The model joined under ``folder`` as the loader makes it, then one byte of model.bin
    flipped (same size: the loader keeps a joined copy of the right size)."""
    good = whisper.joined(whisper.BASE, MODELS)
    target = folder / whisper.BASE.name
    shutil.copytree(good, target)
    with (target / "model.bin").open("r+b") as model:
        model.seek(50_000_000)
        byte = model.read(1)
        model.seek(50_000_000)
        model.write(bytes([byte[0] ^ 0x01]))
    return target


def test_the_installed_weights_are_the_pinned_ones():
    good = whisper.joined(whisper.BASE, MODELS)
    pins.check({n: good / n for n in ("model.bin", "config.json", "vocabulary.txt")},
               dict(whisper.BASE.sha256))  # fmt: skip


def test_a_flipped_byte_is_refused_before_loading(tmp_path):
    target = tampered(tmp_path)
    with pytest.raises(WeightsRefused) as refused:
        whisper.transcribe([0.0] * 16_000, lambda: False, folder=tmp_path)
    assert refused.value.path == str(target / "model.bin")
    assert refused.value.expected == dict(whisper.BASE.sha256)["model.bin"]
    assert refused.value.found and refused.value.found != refused.value.expected


def test_a_file_that_changes_after_it_passed_is_hashed_again(tmp_path):
    small = tmp_path / "config.json"
    small.write_bytes(b'{"a": 1}')
    pinned = {"config.json": pins.digest(small)}
    pins.check({"config.json": small}, pinned)
    small.write_bytes(b'{"a": 2}')  # same size, new content
    with pytest.raises(WeightsRefused):
        pins.check({"config.json": small}, pinned)
    with pytest.raises(WeightsRefused) as unpinned:
        pins.check({"tokenizer.json": small}, pinned)
    assert unpinned.value.expected == ""
    with pytest.raises(WeightsRefused):
        pins.check_bytes({"config.json": b'{"a": 2}'}, pinned)
    pins.check_bytes({"config.json": b'{"a": 1}'}, pinned)


async def test_the_recognizer_says_voice_is_unavailable(tmp_path):
    tampered(tmp_path / "models")
    note = spoken_note(tmp_path, SENTENCE)
    recognizer = OfflineRecognizer(WHISPER_BASE, folder=tmp_path / "models", timeout_s=60, max_s=60)
    with pytest.raises(TranscriptionFailed) as failed:
        await recognizer.transcribe(note, "voice.ogg", None, language="en")
    assert failed.value.key == "voice.weights_refused"
    assert isinstance(failed.value.__cause__, WeightsRefused)


async def test_a_voice_note_meets_tampered_weights_in_the_chat(tmp_path, workdir):
    note = spoken_note(tmp_path, SENTENCE)
    async with FakeTelegram() as fake:
        config = settings(tmp_path, fake, workdir)  # no DETACH_STT_BASE_URL: offline
        tampered(config.data_dir / "voice")
        async with running_bot(config, {}, {"claude": FakeEngine(answer("ok"))}) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_voice(note, OWNER, duration_s=4)
            said = await fake.wait_text(OWNER, "Voice notes are unavailable", timeout_s=60)
            assert "not the ones pinned" in said.params["text"]
            mark = len(fake.calls)
            await fake.user_message("/lang ru", OWNER)
            await fake.wait_text(OWNER, "", after=mark)
            mark = len(fake.calls)
            await fake.user_voice(note, OWNER, duration_s=4)
            await fake.wait_text(OWNER, "Голосовые заметки недоступны", timeout_s=60, after=mark)
            assert await app.store.tasks.list_for(None) == []
