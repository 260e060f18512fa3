"""A chat's choices are read once and kept on SQLite (a round trip fewer on every message's way
to its agent, issue #54): a choice is seen at once after it committed, never before, and a
transaction that rolled back leaves the choice as it was."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.store.schema import chat_settings
from tests.support.postgres import STORE_KINDS, opened_store


class Rollback(Exception):
    pass


@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_a_chats_choice_is_seen_once_committed_and_never_when_rolled_back(
    kind: str, tmp_path: Path
) -> None:
    async with opened_store(kind, tmp_path) as store:
        assert (await store.chats.get(7)).cwd is None  # read, and kept
        await store.chats.set_cwd(7, "/a")
        assert (await store.chats.get(7)).cwd == "/a"
        with pytest.raises(Rollback):
            async with store.atomic():
                await store.chats.set_cwd(7, "/b")
                assert (await store.chats.get(7)).cwd == "/b"  # its own write, in it
                raise Rollback
        assert (await store.chats.get(7)).cwd == "/a"
        async with store.atomic():
            await store.chats.set_preset(7, "fast")
            await store.chats.get(7)  # read inside: not kept before the commit
        assert await store.chats.preset(7) == "fast"
        assert await store.chats.cwd(7) == "/a"


async def test_on_sqlite_a_choice_is_read_from_the_database_once(tmp_path: Path) -> None:
    async with opened_store("sqlite", tmp_path) as store:
        await store.chats.set_notify(7, "quiet")
        assert await store.chats.notify(7) == "quiet"
        async with store.engine.begin() as conn:  # behind the repository's back
            await conn.execute(sa.update(chat_settings).values(notify="loud"))
        assert await store.chats.notify(7) == "quiet"  # kept, not read again
