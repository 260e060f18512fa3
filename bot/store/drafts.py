"""Voice drafts: a voice note's transcript, kept until its owner starts, edits or cancels it
(``bot.voice.drafts``), so its buttons and a reply to it still work after a restart."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from bot.rows import DraftStatus, VoiceDraft
from bot.store.db import Clock, Database
from bot.store.schema import voice_drafts


def _draft(row: Any) -> VoiceDraft:
    return VoiceDraft(
        id=row.id,
        owner_id=row.owner_id,
        chat_id=row.chat_id,
        message_id=row.message_id,
        locale=row.locale,
        text=row.text,
        notes=tuple(n for n in row.notes.split(",") if n),
        status=DraftStatus(row.status),
        row_id=row.row_id,
        task_id=row.task_id,
    )


class VoiceDraftRepo:
    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def create(
        self,
        *,
        owner_id: int,
        chat_id: int,
        message_id: int,
        locale: str,
        text: str,
        notes: tuple[str, ...],
        task_id: int | None = None,
    ) -> VoiceDraft:
        """A pending draft of the voice note ``message_id``; the one it made already when
        Telegram delivers the note twice."""
        known = await self.of_message(chat_id, message_id)
        if known is not None:
            return known
        values = {
            "owner_id": owner_id,
            "chat_id": chat_id,
            "message_id": message_id,
            "locale": locale,
            "text": text,
            "notes": ",".join(notes),
            "status": DraftStatus.PENDING.value,
            "task_id": task_id,
            "created_at": self._clock(),
        }
        async with self._engine.begin() as conn:
            result = await conn.execute(voice_drafts.insert().values(**values))
            draft_id = int(result.inserted_primary_key[0])  # type: ignore[index]
        found = await self.get(draft_id)
        assert found is not None
        return found

    async def get(self, draft_id: int) -> VoiceDraft | None:
        return await self._one(voice_drafts.c.id == draft_id)

    async def of_message(self, chat_id: int, message_id: int) -> VoiceDraft | None:
        return await self._one(
            voice_drafts.c.chat_id == chat_id, voice_drafts.c.message_id == message_id
        )

    async def pending(self, chat_id: int) -> list[VoiceDraft]:
        """The drafts of a chat still waiting for a tap, newest first."""
        query = (
            voice_drafts.select()
            .where(
                voice_drafts.c.chat_id == chat_id,
                voice_drafts.c.status == DraftStatus.PENDING.value,
            )
            .order_by(voice_drafts.c.id.desc())
        )
        async with self._engine.connect() as conn:
            return [_draft(r) for r in await conn.execute(query)]

    async def set_row(self, draft_id: int, row_id: int) -> None:
        await self._update(draft_id, row_id=row_id)

    async def set_text(self, draft_id: int, text: str) -> bool:
        """Replace a pending draft's text (the owner's edit); False: it is no longer pending."""
        return await self._update(draft_id, text=text, notes="", pending_only=True)

    async def settle(self, draft_id: int, status: DraftStatus) -> bool:
        """Close a pending draft (started or cancelled), once; False: closed already."""
        return await self._update(draft_id, status=status.value, pending_only=True)

    async def reopen(self, draft_id: int) -> None:
        """A started draft whose task was refused (the owner may edit it and start again)."""
        await self._update(draft_id, status=DraftStatus.PENDING.value)

    async def set_task(self, draft_id: int, task_id: int) -> None:
        await self._update(draft_id, task_id=task_id)

    async def delete_before(self, before: datetime, limit: int) -> int:
        """Delete up to ``limit`` drafts made before ``before`` (pending ones too: a draft
        nobody tapped for the retention's days is forgotten)."""
        old = (
            sa.select(voice_drafts.c.id)
            .where(voice_drafts.c.created_at < before)
            .order_by(voice_drafts.c.id)
            .limit(limit)
        )
        async with self._engine.begin() as conn:
            found = [r[0] for r in await conn.execute(old)]
            if found:
                await conn.execute(voice_drafts.delete().where(voice_drafts.c.id.in_(found)))
        return len(found)

    async def _one(self, *where: Any) -> VoiceDraft | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(voice_drafts.select().where(*where))).first()
        return _draft(row) if row is not None else None

    async def _update(self, draft_id: int, pending_only: bool = False, **values: Any) -> bool:
        query = voice_drafts.update().where(voice_drafts.c.id == draft_id)
        if pending_only:
            query = query.where(voice_drafts.c.status == DraftStatus.PENDING.value)
        async with self._engine.begin() as conn:
            result = await conn.execute(query.values(**values))
        return result.rowcount == 1
