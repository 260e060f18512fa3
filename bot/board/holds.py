"""The tasks held by their preflight, as rows of the board's list: the hold's message and its
choices (each suggested answer, Start anyway, Drop), which the board sends back to the same
desk the chat's buttons answer (``bot.preflight.desk``)."""

from __future__ import annotations

from typing import Any

from bot.models import WaitState
from bot.preflight.desk import PreflightDesk
from bot.telegram.texts import Texts


async def held_rows(desk: PreflightDesk, texts: Texts, user_id: int, locale: str) -> list[Any]:
    """The user's held tasks, oldest first, one row each."""
    rows = []
    wait = WaitState.PREFLIGHT
    for hold in await desk.holds_of(user_id):
        text, choices = desk.shown(hold)
        rows.append(
            {
                "hold": hold.id,
                "title": hold.text,
                "status": "held",
                "wait": wait.value,
                "wait_text": texts.wait(locale, wait),
                "badge": wait.value,
                "active": True,
                "text": text,
                "choices": [{"choice": c, "text": caption} for c, caption in choices],
            }
        )
    return rows
