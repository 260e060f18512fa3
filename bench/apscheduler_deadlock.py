"""The start-up deadlock of the scale-out workers before they claimed turns from the app's
tables, reproduced with the pinned APScheduler (4.0.0a6) on the machine's PostgreSQL.

What the workers did then: each ran an APScheduler worker (``SQLAlchemyDataStore`` in schema
``apscheduler``, ``AsyncpgEventBroker``) under a stable identity, so a restarted worker could
reap its own jobs. Here: a worker with a stable identity runs a long job while another worker
is busy too; it is killed with SIGKILL, and restarted under the same identity once its lease
(5 s here) has expired. At start APScheduler runs ``reap_abandoned_jobs`` (job row FOR UPDATE,
UPDATE tasks, DELETE job) and ``cleanup`` (UPDATE tasks, DELETE job) at once on two pool
connections; they lock the same rows in opposite order and PostgreSQL aborts one with
``deadlock detected``, which APScheduler does not retry: "Scheduler crashed".

Prints how many of the restarts crashed. The app no longer has this shape: workers run no
APScheduler at all (they claim turns from ``turns`` with SKIP LOCKED; the bot fires schedules
from an in-memory APScheduler), so there is no job store to reap. Not part of ``make bench``
(it takes about two minutes): ``.venv/bin/python -m bench.apscheduler_deadlock [cycles]``."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import asyncpg
from apscheduler import AsyncScheduler, SchedulerRole, TaskDefaults
from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore
from apscheduler.eventbrokers.asyncpg import AsyncpgEventBroker
from sqlalchemy.ext.asyncio import create_async_engine

ADMIN = os.environ.get("DETACH_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
LEASE_S = 5.0
JOB_S = 600.0
TASK = "bench.apscheduler_deadlock:long_job"


async def long_job() -> None:
    await asyncio.sleep(JOB_S)


def scheduler(dsn: str, role: SchedulerRole, identity: str) -> AsyncScheduler:
    engine = create_async_engine(dsn.replace("postgresql://", "postgresql+asyncpg://"))
    store = SQLAlchemyDataStore(engine, schema="apscheduler")
    return AsyncScheduler(
        store,
        AsyncpgEventBroker.from_async_sqla_engine(engine),
        role=role,
        identity=identity,
        lease_duration=timedelta(seconds=LEASE_S),
        task_defaults=TaskDefaults(max_running_jobs=None),
    )


async def worker(dsn: str, identity: str) -> None:
    """What a scale-out worker was: an APScheduler worker under a stable identity."""
    async with scheduler(dsn, SchedulerRole.worker, identity) as sched:
        await sched.configure_task(TASK, func=long_job, max_running_jobs=None)
        print("ready", flush=True)
        await sched.run_until_stopped()


async def acquired_by(conn: asyncpg.Connection, identity: str) -> int:
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM apscheduler.jobs WHERE acquired_by = $1", identity
        )
    )


async def spawn(dsn: str, identity: str, log: str) -> asyncio.subprocess.Process:
    out = open(log, "ab")  # noqa: SIM115 (the child owns it)
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.apscheduler_deadlock",
        "worker",
        dsn,
        identity,
        stdout=out,
        stderr=out,
    )


async def cycle(front: AsyncScheduler, conn, dsn: str, n: int) -> bool:  # type: ignore[no-untyped-def]
    """One kill and restart under the same identity; True when the restart crashed."""
    log = f"/tmp/aps-deadlock-{os.getpid()}-{n}.log"
    stable = await spawn(dsn, "worker-stable", log)
    await front.add_job(TASK)
    await front.add_job(TASK)
    deadline = time.monotonic() + 30
    while await acquired_by(conn, "worker-stable") == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    stable.send_signal(signal.SIGKILL)
    await stable.wait()
    await asyncio.sleep(LEASE_S + 2)  # its lease expired; the other worker is busy
    restarted = await spawn(dsn, "worker-stable", log)
    try:
        await asyncio.wait_for(restarted.wait(), 8)
    except TimeoutError:
        restarted.send_signal(signal.SIGTERM)
        await restarted.wait()
    text = Path(log).read_text(errors="replace")
    os.unlink(log)
    return "deadlock detected" in text


async def main(cycles: int) -> None:
    admin = await asyncpg.connect(ADMIN)
    name = f"aps_deadlock_{uuid.uuid4().hex[:8]}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = f"{ADMIN.rsplit('/', 1)[0]}/{name}"
    try:
        conn = await asyncpg.connect(dsn)
        async with scheduler(dsn, SchedulerRole.scheduler, "front") as front:  # makes the schema
            await front.configure_task(TASK, func=long_job, max_running_jobs=None)
            await front.start_in_background()
            other = await spawn(dsn, "worker-other", f"/tmp/aps-deadlock-other-{os.getpid()}.log")
            crashed = 0
            for n in range(cycles):
                hit = await cycle(front, conn, dsn, n)
                crashed += hit
                print(f"restart {n + 1}: {'crashed: deadlock detected' if hit else 'ok'}")
            other.send_signal(signal.SIGTERM)
            await other.wait()
        await conn.close()
        print(
            f"APScheduler 4.0.0a6, PostgreSQL: {crashed} of {cycles} restarts under the same "
            "identity crashed with 'deadlock detected'"
        )
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        asyncio.run(worker(sys.argv[2], sys.argv[3]))
    else:
        asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10))
