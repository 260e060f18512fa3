"""What the agents of one sub-task tree may say to each other, through the lineage only: a
sub-task ``report``s to its parent, a sub-task ``message``s a sibling (another child of the
same parent), and each reads what came to it (``inbox``). Anything else is refused with the
reason and changes nothing. A note is kept as an event of the addressee's transcript (its
owner sees it there too); the text is the agent's: capped, never run, redacted by the store."""

from __future__ import annotations

from typing import Any

from bot.errors import ToolRefused
from bot.models import Task
from bot.store import Store

NOTE_CHARS = 4000
REPORTED = "Reported"  # a child's report, in its parent's transcript
MESSAGED = "Messaged"  # a sibling's message, in the addressee's transcript
KINDS = (REPORTED, MESSAGED)
INBOX_PAGE = 50


class TaskFamily:
    def __init__(self, store: Store, me: Task) -> None:
        """``me``: the task whose agent calls (`detach mcp --parent <me>`)."""
        self._store = store
        self._me = me

    async def report(self, text: str) -> dict[str, Any]:
        """``text`` to this task's parent; refused for a task that has none."""
        if self._me.parent_id is None:
            raise ToolRefused("report is for a sub-task: this task has no parent to report to")
        parent = await self._store.tasks.get(self._me.parent_id)
        assert parent is not None  # a parent is never deleted before its children
        await self._deliver(parent, REPORTED, _text(text))
        return {"reported_to": parent.id}

    async def message(self, task_id: int, text: str) -> dict[str, Any]:
        """``text`` to a sibling: another sub-task of this task's parent, and no other."""
        text = _text(text)
        sibling = await self._store.tasks.get(task_id) if 0 < task_id < 2**53 else None
        if (
            self._me.parent_id is None
            or sibling is None
            or sibling.id == self._me.id
            or sibling.parent_id != self._me.parent_id
            or sibling.owner_id != self._me.owner_id
        ):
            raise ToolRefused(
                f"#{task_id} is no sibling of this task: a message goes only to another "
                "sub-task of the same parent (see list on your parent's side). Nothing was sent"
            )
        await self._deliver(sibling, MESSAGED, text)
        return {"sent_to": sibling.id}

    async def inbox(self, cursor: int = 0) -> dict[str, Any]:
        """The reports and messages that came to this task after ``cursor``."""
        if cursor < 0:
            raise ToolRefused("cursor must be 0 or a cursor an earlier call returned")
        notes: list[dict[str, Any]] = []
        while True:
            events = await self._store.transcript.after(self._me.id, cursor, 500)
            for event in events:
                cursor = event.line
                if event.kind in KINDS and len(notes) < INBOX_PAGE:
                    notes.append({"kind": event.kind.lower(), **event.body})
            if len(events) < 500 or len(notes) >= INBOX_PAGE:
                break
        return {"cursor": cursor, "notes": notes}

    async def _deliver(self, to: Task, kind: str, text: str) -> None:
        turn = await self._store.tasks.last_turn(to.id)
        if turn is None:
            raise ToolRefused(f"#{to.id} has no turn yet: nothing was sent")
        body = {"from": self._me.id, "from_label": self._me.label, "text": text}
        await self._store.transcript.append(to.id, turn.id, [(kind, body)])


def _text(text: str) -> str:
    text = text.replace("\x00", "").strip()
    if not text:
        raise ToolRefused("the text is empty: nothing was sent")
    if len(text) > NOTE_CHARS:
        raise ToolRefused(
            f"the text has {len(text)} characters; at most {NOTE_CHARS}: put the rest in a "
            "file in your working directory and name it. Nothing was sent"
        )
    return text
