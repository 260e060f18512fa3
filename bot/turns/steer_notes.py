"""What became of a steer, once the running turn's executor said (``SteerTaken`` or
``SteerDeferred``): taken in (its queued turn is gone, in one step with the chat's note, so it
never runs twice; the transcript keeps its words), or it runs as its own next turn."""

from __future__ import annotations

import logging

from bot.events import SteerDeferred, SteerTaken
from bot.models import Task
from bot.store import Store
from bot.telegram.notifier import Notifier
from bot.turns.steering import SteerBox
from bot.turns.transcribe import TranscriptBatch

log = logging.getLogger(__name__)


class SteerNotes:
    def __init__(self, store: Store, notifier: Notifier) -> None:
        self._store = store
        self._notifier = notifier

    async def steered(
        self,
        task: Task,
        event: object,
        inbox: SteerBox,
        step: int,
        transcript: TranscriptBatch,
    ) -> bool:
        """A steer event the executor yields (True), believed once for a steer of this turn's;
        the transcript keeps the words taken in."""
        if not isinstance(event, SteerTaken | SteerDeferred):
            return False
        if inbox.resolve(event.steer_id):
            await self.note(task, event, step)
            if isinstance(event, SteerTaken):
                body = {"steer_id": event.steer_id, "text": inbox.text_of(event.steer_id)}
                await transcript.add(("SteerTaken", body))
        return True

    async def note(self, task: Task, event: SteerTaken | SteerDeferred, step: int) -> None:
        """What became of a steer, on its acknowledgement: taken in (its queued turn is gone,
        in one step with the note, so it never runs twice), or it runs as its own turn."""
        if isinstance(event, SteerDeferred):
            log.info("task %s: steer %s runs as the next turn", task.id, event.steer_id)
            await self._notifier.steer_note(task, event.steer_id, "steer.deferred", final=False)
            return
        log.info("task %s: steer %s taken in at step %s", task.id, event.steer_id, step)
        async with self._store.atomic():
            await self._store.tasks.absorb_turn(task.id, event.steer_id)
            await self._notifier.steer_note(task, event.steer_id, "steer.taken", step=step)
