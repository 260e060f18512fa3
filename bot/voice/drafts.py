"""Voice notes become task drafts: the note is downloaded, transcribed and shown as one message
"🎤 <text>" with Start, Edit and Cancel. Nothing starts from a transcript nobody saw: only
its owner's Start does, and then exactly as a plain message would (``/detach`` with the chat's
defaults, its preflight when on). Edit: the owner replies to the draft with the corrected
text, which replaces it and is shown again, as a new draft message (the old one loses its
buttons); it still waits for Start. Cancel forgets it.

The transcript is hostile input (whoever spoke near the phone, or a crafted audio file): it
is the goal's plain text, never read for ``key=value`` options or commands, and neither is
the owner's edit (a task with options is a typed ``/detach``).

A draft is a row (``bot.tasks.drafting``), so its buttons and a reply to it work after a
restart; the retention forgets drafts older than its days.

A voice note in the forum topic of one of its sender's tasks continues that task: its draft
is said in the topic, and Start sends the words to the task as a message in the topic would
(a follow-up: ``bot.tasks.followup``, Steer now / Queue while a turn runs). The draft message
follows the chat's /notify policy (it waits for a tap, like a question: silent only under
``quiet``)."""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from aiogram import Bot
from aiogram.exceptions import AiogramError

from bot.errors import TranscriptionFailed, UserInputError
from bot.models import FollowUpDoor, NotifyPolicy, Task, TaskKind
from bot.rows import DraftStatus, VoiceDraft
from bot.tasks.drafting import DraftBook
from bot.tasks.followup import FollowUp
from bot.tasks.requests import ChatRequest
from bot.telegram.callbacks import Id
from bot.telegram.markup import CallbackData, Keyboard
from bot.telegram.outbox import Outbox
from bot.telegram.texts import Texts
from bot.voice.speech import Recognizer, tidy

if TYPE_CHECKING:
    from bot.tasks.usecases import UseCases

log = logging.getLogger(__name__)
ENGLISH = "en"


class DraftButton(StrEnum):
    """What a draft's button does (``VoiceAction.action``; its caption is ``button.voice_*``)."""

    START = "start"
    EDIT = "edit"
    CANCEL = "cancel"


class VoiceAction(CallbackData, prefix="v"):
    action: DraftButton
    draft_id: Id


@dataclass(frozen=True, slots=True)
class VoiceNote:
    """A voice message, an audio file or an audio document: what to download, and how long
    Telegram says it is (None: it does not say)."""

    file_id: str
    filename: str
    size: int | None
    duration_s: float | None


class VoiceDrafts:
    def __init__(
        self,
        *,
        book: DraftBook,
        outbox: Outbox,
        texts: Texts,
        tasks: UseCases,
        recognizer: Recognizer | None,
        max_s: float,
        max_bytes: int,
    ) -> None:
        """``recognizer``: None when none is set up (the chat is told how to enable one);
        ``max_s``: DETACH_STT_MAX_S; ``max_bytes``: the largest note downloaded."""
        self._book = book
        self._outbox = outbox
        self._texts = texts
        self._tasks = tasks
        self._recognizer = recognizer
        self._max_s = max_s
        self._max_bytes = max_bytes

    async def take(
        self,
        bot: Bot,
        note: VoiceNote,
        *,
        owner_id: int,
        chat_id: int,
        message_id: int,
        locale: str,
        thread_id: int | None = None,
        task_id: int | None = None,
    ) -> VoiceDraft:
        """Transcribe the note of ``message_id`` and show its draft (a note Telegram delivers
        twice is shown once). ``thread_id``: the forum topic the note came from (the draft is
        said there); ``task_id``: the task of that topic, which Start continues (None: Start
        begins a task). Raises TranscriptionFailed with the line the chat gets."""
        known = await self._book.of_message(chat_id, message_id)
        if known is not None:
            return known
        if self._recognizer is None:
            raise TranscriptionFailed("voice.no_recognizer")
        sound = await self._download(bot, note)
        heard = await self._recognizer.transcribe(
            sound, note.filename, note.duration_s, language=locale
        )
        text = tidy(heard.text)
        if not text:
            raise TranscriptionFailed("voice.no_words")
        notes: tuple[str, ...] = ("voice.cut",) if heard.cut else ()
        if self._recognizer.beyond_english is not None and locale != ENGLISH:
            notes += (self._recognizer.beyond_english,)
        draft = await self._book.create(
            owner_id=owner_id,
            chat_id=chat_id,
            message_id=message_id,
            locale=locale,
            text=text,
            notes=notes,
            task_id=task_id,
        )
        log.info("voice draft %s from message %s in chat %s", draft.id, message_id, chat_id)
        await self._show(draft, reply_to=message_id, thread_id=thread_id)
        return draft

    async def tap(self, user_id: int, draft_id: int, action: DraftButton) -> str:
        """A draft's button, by ``user_id``; the key of the tap's short answer. Only the
        draft's owner may tap; a draft already started or cancelled is gone."""
        draft = await self._book.pending(user_id, draft_id)
        if draft is None:
            return "voice.gone"
        if action is DraftButton.EDIT:
            return "voice.edit_hint"
        if action is DraftButton.CANCEL:
            if await self._book.close(draft, DraftStatus.CANCELLED):
                await self._close(draft, self._line(draft.locale, "voice.cancelled"))
            return "voice.cancelled"
        return await self._start(draft)

    async def edit(self, draft: VoiceDraft, text: str, thread_id: int | None = None) -> bool:
        """The owner's reply to a pending draft: its text becomes the reply's and the draft is
        shown again (a new message, in the reply's topic ``thread_id``; the old one loses its
        buttons); False: no words, or the draft was started or cancelled meanwhile."""
        new_text = tidy(text)
        updated = await self._book.retext(draft, new_text) if new_text else None
        if updated is None:
            return False
        await self._close(draft, self._line(draft.locale, "voice.replaced"))
        await self._show(updated, reply_to=None, thread_id=thread_id)
        return True

    async def _start(self, draft: VoiceDraft) -> str:
        """Start the draft's task as a plain message would; the draft is closed first (two
        taps start one task), and opened again if the task was refused."""
        if not await self._book.close(draft, DraftStatus.STARTED):
            return "voice.gone"
        try:
            task = await self._begin(draft)
        except UserInputError:
            await self._book.reopen(draft)
            raise
        if task is not None:
            await self._book.started(draft, task.id)
            key = "voice.started" if draft.task_id is None else "voice.continued"
            line = self._line(draft.locale, key, label=task.label)
        else:  # held by its preflight: its question is in the chat
            line = self._line(draft.locale, "voice.started_held")
        await self._close(draft, line)
        return "voice.starting"

    async def _begin(self, draft: VoiceDraft) -> Task | None:
        if draft.task_id is not None:  # a note in the task's topic: the words continue it
            asked = FollowUp(
                user_id=draft.owner_id,
                task_id=draft.task_id,
                prompt=draft.text,
                door=FollowUpDoor.VOICE,
                reply_to=draft.message_id,
            )
            done = await self._tasks.follow_up.follow_up(asked)
            return (
                done.task
                if done is not None
                else await self._tasks.lookup.get_own(draft.owner_id, draft.task_id)
            )
        return await self._tasks.create.from_chat(
            ChatRequest(
                draft.owner_id,
                draft.chat_id,
                TaskKind.DETACH,
                draft.text,
                draft.locale,
                "detach",
                reply_to=draft.message_id,
                with_options=False,  # the transcript is the goal's words, nothing else
            )
        )

    async def _download(self, bot: Bot, note: VoiceNote) -> bytes:
        limit_mb = f"{self._max_bytes / 1024 / 1024:g}"
        if note.size is not None and note.size > self._max_bytes:
            raise TranscriptionFailed("voice.too_big", limit=limit_mb)
        target = io.BytesIO()
        try:
            await bot.download(note.file_id, destination=target, timeout=60)
        except AiogramError as exc:
            raise TranscriptionFailed("voice.download_failed", reason=str(exc)[:200]) from exc
        if target.tell() > self._max_bytes:
            raise TranscriptionFailed("voice.too_big", limit=limit_mb)
        return target.getvalue()

    async def replied(self, user_id: int, chat_id: int, replied_id: int) -> VoiceDraft | None:
        """The pending draft of ``user_id`` whose message is ``replied_id`` (None: none)."""
        return await self._book.replied(user_id, chat_id, replied_id)

    async def _show(self, draft: VoiceDraft, reply_to: int | None, thread_id: int | None) -> None:
        quiet = await self._tasks.chat.notify_policy(draft.chat_id) is NotifyPolicy.QUIET
        row_id = await self._outbox.send(
            draft.chat_id,
            self._body(draft),
            markup=self._keyboard(draft),
            reply_to=reply_to,
            silent=quiet,
            thread_id=thread_id,
        )
        await self._book.shown(draft, row_id)

    async def _close(self, draft: VoiceDraft, line: str) -> None:
        """The draft's message with its last word and no buttons."""
        if draft.row_id is not None:
            text = f"{self._body(draft)}\n\n{line}"
            await self._outbox.edit(draft.chat_id, None, text, row_id=draft.row_id)

    def _body(self, draft: VoiceDraft) -> str:
        lines = [self._texts.get(draft.locale, "voice.draft", text=draft.text)]
        seconds = round(self._max_s)
        lines += [self._line(draft.locale, key, seconds=seconds) for key in draft.notes]
        return "\n\n".join(lines)

    def _line(self, locale: str, key: str, **params: object) -> str:
        return self._texts.get(locale, key, **params)

    def _keyboard(self, draft: VoiceDraft) -> Keyboard:
        return Keyboard.of(
            [
                [
                    VoiceAction(action=a, draft_id=draft.id).button(
                        self._texts.get(draft.locale, f"button.voice_{a}")
                    )
                    for a in DraftButton
                ]
            ]
        )
