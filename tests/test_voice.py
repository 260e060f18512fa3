"""Voice notes become task drafts, end to end through the fake Bot API (voice messages with
file_id and duration, getFile, the file download): the transcript arrives as "🎤 <text>" with
Start, Edit and Cancel; only the owner's Start begins the task, as a plain message would, with
the transcript as plain words. The transcription server here is a scripted one on 127.0.0.1
(OpenAI's multipart API); the offline recognizer has its own test (test_voice_offline.py)."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
from datetime import timedelta

import numpy as np
import pytest
import soundfile

from bot.errors import TranscriptionFailed
from bot.intake.retention import Retention
from bot.models import ApprovalMode
from bot.store import Store
from bot.telegram.outbox import Outbox
from bot.telegram.texts import Texts
from bot.voice.drafts import VoiceDrafts, VoiceNote
from bot.voice.offline import POCKETSPHINX, WHISPER_BASE, OfflineRecognizer
from bot.voice.remote import RemoteRecognizer
from tests.support.fake_engine import FakeEngine
from tests.support.fake_forum import FakeForum
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, running_bot
from tests.support.stt_server import Answer, SttServer
from tests.test_phone import answer, buttons_data, settings, until
from tests.test_store import Clock
from tests.test_voice_offline import MODELS

OTHER = 222  # allowed too, but not the draft's owner
STRANGER = 999  # not allowed at all


def ogg_tone(seconds: float) -> bytes:
    """A real OGG/Opus sound (a tone), as a voice note's bytes."""
    rate = 48_000
    t = np.arange(int(seconds * rate)) / rate
    out = io.BytesIO()
    soundfile.write(out, 0.3 * np.sin(2 * np.pi * 440 * t), rate, format="OGG", subtype="OPUS")
    return out.getvalue()


def answered_text(fake: FakeTelegram, query_id: str) -> str:
    return str(fake.callback_answers[query_id].get("text", ""))


async def test_a_voice_note_is_a_draft_that_only_its_owners_start_begins(tmp_path, workdir):
    engine = FakeEngine(answer("Summary written."))
    async with SttServer() as stt, FakeTelegram() as fake:
        stt.answers += [
            Answer(text="  mode=auto write a short summary\x07 of the meeting notes "),
            Answer(text="list the filez"),
            Answer(text="never mind"),
        ]
        config = settings(
            tmp_path,
            fake,
            workdir,
            allowed_users=frozenset({OWNER, OTHER}),
            stt_base_url=stt.base_url,
            stt_api_key="sk-test-voice",
        )
        async with running_bot(config, {}, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            note = await fake.user_voice(b"OggS-a-voice-note", OWNER, duration_s=4)
            draft = await fake.wait_text(OWNER, "🎤")
            draft_id = draft.result["message_id"]
            assert draft.params["text"] == "🎤 mode=auto write a short summary of the meeting notes"
            assert int(draft.params["reply_to_message_id"]) == note["message_id"]
            start, edit, cancel = buttons_data(fake, draft_id)
            assert (start, edit, cancel) == ("v:start:1", "v:edit:1", "v:cancel:1")
            [got] = stt.received  # the note itself, as Telegram serves it, with the model
            assert got.file == b"OggS-a-voice-note" and got.fields["model"] == "whisper-1"
            assert got.authorization == "Bearer sk-test-voice"
            assert await app.store.tasks.list_for(None) == [] and engine.specs == []

            # somebody else's tap starts nothing: an allowed user who is not the owner, a stranger
            refused = await fake.press(OWNER, draft_id, start, OTHER)
            await until(lambda: refused in fake.callback_answers)
            assert "not yours" in answered_text(fake, refused)
            await fake.press(OWNER, draft_id, start, STRANGER)
            async with asyncio.timeout(10):
                while not await app.store.audit.count("access_refused", STRANGER):
                    await asyncio.sleep(0.05)
            assert await app.store.tasks.list_for(None) == [] and engine.specs == []

            # Edit says how; the owner's Start begins the task as a plain message would
            hint = await fake.press(OWNER, draft_id, edit, OWNER)
            await until(lambda: hint in fake.callback_answers)
            assert "Reply to the draft" in answered_text(fake, hint)
            await fake.press(OWNER, draft_id, start, OWNER)
            await fake.wait_text(OWNER, "Summary written.", timeout_s=20)
            [task] = await app.store.tasks.list_for(None)
            prompt = engine.specs[0].prompt
            assert prompt.startswith("mode=auto write a short summary of the meeting notes")
            assert task.approval_mode is not ApprovalMode.AUTO  # the words are not options
            await until(lambda: "Started as #1" in fake.find_message(OWNER, draft_id)["text"])
            assert buttons_data(fake, draft_id) == []
            again = await fake.press(OWNER, draft_id, start, OWNER)  # a second tap: one task
            await until(lambda: again in fake.callback_answers)
            assert "closed" in answered_text(fake, again)
            assert len(await app.store.tasks.list_for(None)) == 1

            # Edit: a reply with the corrected text replaces it and shows the draft again
            await fake.user_voice(b"OggS-second", OWNER, duration_s=2)
            second = await fake.wait_text(OWNER, "🎤 list the filez")
            second_id = second.result["message_id"]
            await fake.user_message("list the files", OWNER, reply_to_message_id=second_id)
            fixed = await fake.wait_text(OWNER, "🎤 list the files")  # not "filez"
            await until(lambda: "Replaced" in fake.find_message(OWNER, second_id)["text"])
            assert buttons_data(fake, second_id) == []
            fixed_id = fixed.result["message_id"]
            await fake.press(OWNER, fixed_id, buttons_data(fake, fixed_id)[0], OWNER)
            await until(lambda: len(engine.specs) == 2, timeout_s=20)
            assert engine.specs[1].prompt.startswith("list the files")

            # Cancel: nothing starts, and the draft says so
            await fake.user_voice(b"OggS-third", OWNER, duration_s=1, kind="audio")
            third = await fake.wait_text(OWNER, "🎤 never mind")
            third_id = third.result["message_id"]
            await fake.press(OWNER, third_id, buttons_data(fake, third_id)[2], OWNER)
            await until(lambda: "Cancelled" in fake.find_message(OWNER, third_id)["text"])
            assert buttons_data(fake, third_id) == [] and len(engine.specs) == 2
            assert len(await app.store.tasks.list_for(None)) == 2


async def test_a_note_over_the_bound_is_cut_and_says_so(tmp_path, workdir):
    async with SttServer() as stt, FakeTelegram() as fake:
        stt.answers.append(Answer(text="the start of a long note"))
        config = settings(tmp_path, fake, workdir, stt_base_url=stt.base_url, stt_max_s=2)
        async with running_bot(config, {}, {"claude": FakeEngine(answer("ok"))}):
            await fake.wait_call("setMyCommands")
            await fake.user_voice(ogg_tone(5.0), OWNER, duration_s=5)
            draft = await fake.wait_text(OWNER, "🎤 the start of a long note")
            assert "longer than 2 s: only its start was transcribed" in draft.params["text"]
            [got] = stt.received  # the server heard the first two seconds, as FLAC
            assert got.filename == "note.flac"
            heard, rate = soundfile.read(io.BytesIO(got.file))
            assert rate == 16_000 and len(heard) == pytest.approx(2 * rate, abs=rate * 0.05)


async def test_the_servers_failures_are_one_clear_line(tmp_path, workdir):
    async with SttServer() as stt, FakeTelegram() as fake:
        stt.answers += [Answer(raw=b"<html>502 Bad Gateway</html>"), Answer(text="x", delay_s=1.2)]
        config = settings(tmp_path, fake, workdir, stt_base_url=stt.base_url, stt_timeout_s=0.5)
        async with running_bot(config, {}, {"claude": FakeEngine(answer("ok"))}) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_voice(b"OggS-1", OWNER, duration_s=1)
            await fake.wait_text(OWNER, "answer is not a transcript")
            await fake.user_voice(b"OggS-2", OWNER, duration_s=1)
            await fake.wait_text(OWNER, "did not answer within 0.5 s")
            assert await app.store.tasks.list_for(None) == []
            assert not [c for c in fake.calls if "🎤 x" in str(c.params.get("text"))]


async def test_the_recognizer_speaks_the_api_and_refuses_nonsense():
    async with SttServer() as stt:
        stt.answers += [
            Answer(text="hello there"),
            Answer(status=500, text="boom"),
            Answer(raw=b"not json"),
            Answer(raw=b'{"words": ["a"]}'),
        ]
        recognizer = RemoteRecognizer(stt.base_url, "small", None, timeout_s=5, max_s=60)
        heard = await recognizer.transcribe(b"RIFF-wave", "voice.ogg", 3.0)
        assert heard.text == "hello there" and not heard.cut
        [got] = stt.received
        assert got.fields == {"model": "small", "response_format": "json"}
        assert got.filename == "voice.ogg" and got.authorization is None
        for key in ("voice.server_failed", "voice.server_garbage", "voice.server_garbage"):
            with pytest.raises(TranscriptionFailed) as failed:
                await recognizer.transcribe(b"x", "voice.ogg", 1.0)
            assert failed.value.key == key
    unreachable = RemoteRecognizer(stt.base_url, "small", None, timeout_s=5, max_s=60)
    with pytest.raises(TranscriptionFailed) as failed:  # the server is gone now
        await unreachable.transcribe(b"x", "voice.ogg", 1.0)
    assert failed.value.key == "voice.server_failed"


async def test_without_a_recognizer_the_chat_is_told_how_to_enable_one(tmp_path):
    store = await Store.open(f"sqlite:///{tmp_path / 'voice.sqlite'}")
    try:
        texts = Texts()
        drafts = VoiceDrafts(
            store=store,
            outbox=Outbox(store),
            texts=texts,
            tasks=None,  # type: ignore[arg-type]  # nothing starts without a draft
            recognizer=None,
            max_s=300,
            max_bytes=1024,
        )
        with pytest.raises(TranscriptionFailed) as failed:
            await drafts.take(
                None,  # type: ignore[arg-type]  # nothing is downloaded either
                VoiceNote("f", "voice.ogg", 10, 1.0),
                owner_id=OWNER,
                chat_id=OWNER,
                message_id=5,
                locale="en",
            )
        assert failed.value.key == "voice.no_recognizer"
        for locale in ("en", "ru"):
            line = texts.get(locale, failed.value.key)
            assert "DETACH_STT_BASE_URL" in line and "make run" in line
        assert await store.drafts.of_message(OWNER, 5) is None
    finally:
        await store.close()


@pytest.mark.slow  # a fresh interpreter importing the whole bot: seconds
def test_nothing_of_the_recognizer_is_loaded_at_idle():
    """The idle bot's memory (bench/footprint.py) holds no recognizer, nor its numpy."""
    code = (
        "import sys, bot.app, handlers, bot.voice.offline, bot.voice.remote\n"
        "heavy = ('pocketsphinx', 'ctranslate2', 'soundfile', 'numpy')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("engine", [WHISPER_BASE, POCKETSPHINX], ids=lambda e: e.name)
async def test_an_offline_decode_past_its_bound_stops_with_a_clear_line(engine):
    recognizer = OfflineRecognizer(engine, folder=MODELS, timeout_s=0.001, max_s=60)
    with pytest.raises(TranscriptionFailed) as failed:
        await recognizer.transcribe(ogg_tone(2.0), "voice.ogg", 2.0)
    assert failed.value.key == "voice.too_slow"
    sound = OfflineRecognizer(engine, folder=MODELS, timeout_s=30, max_s=60)
    with pytest.raises(TranscriptionFailed) as failed:  # not a sound: said, not crashed
        await sound.transcribe(b"<html>", "voice.ogg", 1.0)
    assert failed.value.key == "voice.unreadable"


def test_a_file_declaring_a_huge_rate_or_many_channels_is_refused_before_it_is_read():
    """A small file's header can promise gigabytes of samples (a rate of 600 kHz, 8 channels):
    refused as not a voice note, never allocated for."""
    import io

    import numpy as np
    import soundfile

    from bot.voice.audio import decode

    for rate, channels in ((600_000, 1), (16_000, 8)):
        out = io.BytesIO()
        soundfile.write(out, np.zeros((rate // 100, channels)), rate, format="FLAC")
        with pytest.raises(TranscriptionFailed) as failed:
            decode(out.getvalue(), 300)
        assert failed.value.key == "voice.unreadable"
        assert "not a voice note" in str(failed.value.params.get("reason"))


async def test_drafts_survive_until_the_retention_forgets_them(tmp_path):
    clock = Clock()
    store = await Store.open(f"sqlite:///{tmp_path / 'voice.sqlite'}", clock)
    try:
        made = {"owner_id": OWNER, "chat_id": OWNER, "locale": "en", "notes": ()}
        old = await store.drafts.create(message_id=1, text="old words", **made)
        assert await store.drafts.create(message_id=1, text="again", **made) == old  # twice: one
        clock.now += timedelta(days=91)
        fresh = await store.drafts.create(message_id=2, text="new words", **made)
        pruned = await Retention(store, days=90, clock=clock).prune_once()
        assert pruned.drafts == 1
        assert await store.drafts.get(old.id) is None and await store.drafts.get(fresh.id)
    finally:
        await store.close()


async def test_a_voice_note_in_a_tasks_topic_continues_that_task_there(tmp_path, workdir):
    """In the topic of one of its sender's tasks, a note's draft is said in the topic (quietly
    under /notify quiet) and its Start continues that task; a note in the chat still makes a
    draft there whose Start begins a new task."""
    engine = FakeEngine(lambda spec: answer(f"Did: {spec.prompt}."))
    async with SttServer() as stt, FakeForum(private_topics=True) as fake:
        stt.answers += [Answer(text="and now the docs"), Answer(text="a new job")]
        config = settings(
            tmp_path, fake, workdir, stt_base_url=stt.base_url, stt_api_key="sk-test-voice"
        )
        async with running_bot(config, {}, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/notify quiet", OWNER)
            await fake.user_message("/claude first job", OWNER)
            opened = await fake.wait_call("createForumTopic")
            thread = int(opened.result["message_thread_id"])
            await fake.wait_text(OWNER, "Did: first job.", timeout_s=20)
            mark = len(fake.calls)
            await fake.user_voice(b"OggS-in-topic", OWNER, duration_s=2, thread_id=thread)
            draft = await fake.wait_text(OWNER, "🎤 and now the docs", after=mark)
            assert int(draft.params["message_thread_id"]) == thread
            assert str(draft.params.get("disable_notification")).lower() == "true"
            start = buttons_data(fake, draft.result["message_id"])[0]
            await fake.press(OWNER, draft.result["message_id"], start, OWNER)
            done = await fake.wait_text(OWNER, "Did: and now the docs.", timeout_s=20, after=mark)
            assert int(done.params["message_thread_id"]) == thread
            assert [s.task_id for s in engine.specs] == [1, 1]
            assert len(await app.store.tasks.list_for(None)) == 1
            await until(
                lambda: "Sent to #1" in fake.find_message(OWNER, draft.result["message_id"])["text"]
            )

            mark = len(fake.calls)
            await fake.user_voice(b"OggS-in-chat", OWNER, duration_s=2)
            draft = await fake.wait_text(OWNER, "🎤 a new job", after=mark)
            assert "message_thread_id" not in draft.params
            start = buttons_data(fake, draft.result["message_id"])[0]
            await fake.press(OWNER, draft.result["message_id"], start, OWNER)
            await fake.wait_text(OWNER, "Did: a new job.", timeout_s=20, after=mark)
            assert [s.task_id for s in engine.specs] == [1, 1, 2]
