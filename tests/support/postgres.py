"""A throwaway PostgreSQL database on the machine's server (127.0.0.1:5432, trust auth), or a skip
saying why; DETACH_TEST_POSTGRES_DSN points elsewhere."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.store import Store
from bot.store.db import Clock

DSN = os.environ.get("DETACH_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


@contextlib.asynccontextmanager
async def postgres_database() -> AsyncIterator[str]:
    asyncpg = pytest.importorskip("asyncpg")
    try:
        admin = await asyncpg.connect(DSN, timeout=5)
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.skip(f"no PostgreSQL at {DSN}: {exc}")
    name = f"detach_test_{uuid.uuid4().hex[:12]}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    base = DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    try:
        yield f"{base}/{name}"
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


STORE_KINDS = ("sqlite", "postgresql")


@contextlib.asynccontextmanager
async def opened_store(
    kind: str, tmp_path: Path, clock: Clock | None = None
) -> AsyncIterator[Store]:
    """The same Store code on a real SQLite file (``kind`` "sqlite") or on a throwaway database
    of the machine's PostgreSQL; ``clock``: the store's (else the real one)."""
    clocked = () if clock is None else (clock,)
    if kind == "sqlite":
        store = await Store.open(f"sqlite+aiosqlite:///{tmp_path}/detach.sqlite", *clocked)
        try:
            yield store
        finally:
            await store.close()
        return
    async with postgres_database() as url:
        store = await Store.open(url, *clocked)
        try:
            yield store
        finally:
            await store.close()
