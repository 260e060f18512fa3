"""A throwaway PostgreSQL database on the machine's server (127.0.0.1:5432, trust auth), or a skip
saying why; DETACH_TEST_POSTGRES_DSN points elsewhere."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator

import pytest

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
