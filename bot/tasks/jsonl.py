"""A task's transcript as JSON Lines (``docs/transcript-jsonl.md``): one item of
``bot/turns/items.py`` a line, whole (tool fields not clipped), oldest first, read in batches.
Items carry their ``line`` (a rising event id), so a reader appends what follows the last."""

from __future__ import annotations

import json

from bot.errors import TaskNotFound
from bot.store import Store
from bot.store.transcript import Writer
from bot.turns.items import transcript_item

BATCH = 500  # events per read: the transcript is never loaded whole


async def write_jsonl(store: Store, task_id: int, out: Writer, after: int = 0) -> int:
    """Task ``task_id``'s items after event ``after`` into ``out``, a line each; how many."""
    if await store.tasks.get(task_id) is None:
        raise TaskNotFound(f"#{task_id}")
    written, cursor = 0, after
    while lines := await store.transcript.after(task_id, cursor, BATCH):
        for line in lines:
            if (item := transcript_item(line, clip=False)) is not None:
                out.write(json.dumps(item, ensure_ascii=False) + "\n")
                written += 1
        cursor = lines[-1].line
    return written
