"""The record of voice drafts: a note's transcript kept until its owner starts, edits or cancels
it. Only its owner acts on a draft, and only while it is pending; a draft is closed once (two
taps start one task). ``bot.voice.drafts`` keeps the audio, the messages and their buttons."""

from __future__ import annotations

from bot.rows import DraftStatus, VoiceDraft
from bot.store import Store


class DraftBook:
    def __init__(self, store: Store) -> None:
        self._store = store

    async def of_message(self, chat_id: int, message_id: int) -> VoiceDraft | None:
        """The draft made of this message's note (a note delivered twice makes one)."""
        return await self._store.drafts.of_message(chat_id, message_id)

    async def create(
        self,
        *,
        owner_id: int,
        chat_id: int,
        message_id: int,
        locale: str,
        text: str,
        notes: tuple[str, ...],
        task_id: int | None,
    ) -> VoiceDraft:
        """A pending draft; ``task_id``: the task its topic's note continues."""
        return await self._store.drafts.create(
            owner_id=owner_id,
            chat_id=chat_id,
            message_id=message_id,
            locale=locale,
            text=text,
            notes=notes,
            task_id=task_id,
        )

    async def pending(self, user_id: int, draft_id: int) -> VoiceDraft | None:
        """The user's draft while it waits for a tap; None: another's, started or cancelled."""
        draft = await self._store.drafts.get(draft_id)
        if draft is None or draft.owner_id != user_id or draft.status is not DraftStatus.PENDING:
            return None
        return draft

    async def replied(self, user_id: int, chat_id: int, message_id: int) -> VoiceDraft | None:
        """The user's pending draft whose message in ``chat_id`` is ``message_id``."""
        for draft in await self._store.drafts.pending(chat_id):
            if draft.owner_id != user_id or draft.row_id is None:
                continue
            if await self._store.outbox.message_id_of(draft.row_id) == message_id:
                return draft
        return None

    async def retext(self, draft: VoiceDraft, text: str) -> VoiceDraft | None:
        """The draft with the owner's words instead; None: it is no longer pending."""
        if not await self._store.drafts.set_text(draft.id, text):
            return None
        return await self._store.drafts.get(draft.id)

    async def close(self, draft: VoiceDraft, status: DraftStatus) -> bool:
        """Start or cancel a pending draft, once; False: it was closed already."""
        return await self._store.drafts.settle(draft.id, status)

    async def reopen(self, draft: VoiceDraft) -> None:
        """A started draft whose task was refused (the owner may edit it and start again)."""
        await self._store.drafts.reopen(draft.id)

    async def started(self, draft: VoiceDraft, task_id: int) -> None:
        await self._store.drafts.set_task(draft.id, task_id)

    async def shown(self, draft: VoiceDraft, row_id: int) -> None:
        """The draft's message is the outbox row ``row_id``."""
        await self._store.drafts.set_row(draft.id, row_id)
