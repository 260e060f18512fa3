"""Voice notes (a voice message, an audio file, an audio document without a caption) in a
private chat become task drafts; their Start, Edit and Cancel buttons; a reply to a draft
replaces its text (``bot.voice.drafts``)."""

from __future__ import annotations

from typing import Any, Literal

from aiogram import F, Router
from aiogram.filters import Filter
from aiogram.types import CallbackQuery, Message

from bot.tasks.lookup import TaskLookup
from bot.telegram.render import plain
from bot.telegram.reply import Reply
from bot.voice.drafts import VoiceAction, VoiceDraft, VoiceDrafts, VoiceNote
from handlers.taps import Tapped

router = Router(name="voice")
AUDIO_DOCUMENT = F.document.mime_type.startswith("audio/") & ~F.caption


def voice_note(message: Message) -> VoiceNote | None:
    """The sound a message carries, and its length as Telegram says."""
    if message.voice is not None:
        v = message.voice
        return VoiceNote(v.file_id, "voice.ogg", v.file_size, float(v.duration))
    if message.audio is not None:
        a = message.audio
        return VoiceNote(a.file_id, a.file_name or "audio", a.file_size, float(a.duration))
    if message.document is not None:
        d = message.document
        return VoiceNote(d.file_id, d.file_name or "audio", d.file_size, None)
    return None


class DraftReply(Filter):
    """A reply with text to one of the user's pending drafts (handing it on as ``draft``);
    any other reply goes on to the other handlers."""

    async def __call__(
        self, message: Message, voice: VoiceDrafts, user_id: int
    ) -> Literal[False] | dict[str, Any]:
        replied = message.reply_to_message
        if replied is None or not message.text or message.text.startswith("/"):
            return False
        draft = await voice.replied(user_id, message.chat.id, replied.message_id)
        return {"draft": draft} if draft is not None else False


@router.message(F.chat.type == "private", F.voice | F.audio | AUDIO_DOCUMENT)
async def on_voice(
    message: Message, voice: VoiceDrafts, lookup: TaskLookup, user_id: int, locale: str
) -> None:
    """A note's draft; in the topic of one of the sender's tasks it is said there, and its
    Start continues that task."""
    note = voice_note(message)
    if note is None or message.bot is None:
        return
    thread = message.message_thread_id if message.is_topic_message else None
    task = await lookup.task_in_topic(message.chat.id, thread, user_id) if thread else None
    await voice.take(
        message.bot,
        note,
        owner_id=user_id,
        chat_id=message.chat.id,
        message_id=message.message_id,
        locale=locale,
        thread_id=thread,
        task_id=task.id if task is not None else None,
    )


@router.message(F.chat.type == "private", F.reply_to_message, DraftReply())
async def on_draft_edited(
    message: Message, draft: VoiceDraft, voice: VoiceDrafts, reply: Reply
) -> None:
    """The owner's correction replaces the draft's text; the draft is shown again."""
    thread = message.message_thread_id if message.is_topic_message else None
    if not await voice.edit(draft, message.text or "", thread):
        await reply("voice.gone")


@router.callback_query(Tapped(VoiceAction))
async def on_draft_button(
    query: CallbackQuery,
    callback_data: VoiceAction,
    voice: VoiceDrafts,
    user_id: int,
    reply: Reply,
) -> None:
    key = await voice.tap(user_id, callback_data.draft_id, callback_data.action)
    await query.answer(plain(reply.text(key)))
