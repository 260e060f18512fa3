"""/pending's copies of a held task's preflight message (its question, its refusal, or its
estimate over the budget), with the original's buttons: the newest one per chat stays live,
and every copy loses its buttons when the hold settles, as the original does."""

from __future__ import annotations

from bot.models import CopyOf
from bot.store import PendingCopy, Store
from bot.store.preflights import PENDING
from bot.telegram.outbox import Outbox
from bot.telegram.texts import Texts


async def record_hold_copy(
    store: Store, outbox: Outbox, texts: Texts, hold_id: int, copy: PendingCopy
) -> None:
    """/pending showed ``copy`` of hold ``hold_id``: the copies it replaces say so in one line;
    a hold settled meanwhile takes the copy's buttons away."""
    hold = await store.preflights.get(hold_id)
    if hold is None:
        return
    for old in await store.copies.add(CopyOf.HOLD, hold_id, copy):
        key = "pending.shown_again" if old.chat_id == copy.chat_id else "pending.shown_elsewhere"
        await outbox.edit(old.chat_id, None, texts.get(hold.locale, key), row_id=old.row_id)
    fresh = await store.preflights.get(hold_id)
    if fresh is None or fresh.status != PENDING:
        await outbox.edit_markup(copy.chat_id, copy.row_id, None)


async def close_hold_copies(store: Store, outbox: Outbox, hold_id: int) -> None:
    """The hold settled: its copies keep their text and lose their buttons."""
    for copy in await store.copies.of(CopyOf.HOLD, hold_id):
        await outbox.edit_markup(copy.chat_id, copy.row_id, None)
