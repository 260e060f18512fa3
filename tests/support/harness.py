"""Runs the real bot in-process against the fake Bot API server, with long polling."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from bot.app import App, build
from bot.core import Core
from bot.settings import Settings
from bot.worker import build_worker
from tests.support.fake_telegram import TOKEN, FakeTelegram
from tests.support.recording_session import RecordingSession

OWNER = 111
T = TypeVar("T")


def make_settings(
    data_dir: Path, fake: FakeTelegram, claude_bin: str, workdir: Path, **overrides: object
) -> Settings:
    values: dict[str, object] = dict(
        bot_token=TOKEN,
        allowed_users=frozenset({OWNER}),
        data_dir=data_dir,
        telegram_api_url=fake.base_url,
        claude_bin=claude_bin,
        workdir=workdir,
        intake_interval_s=0.2,
        cancel_grace_s=3.0,
        outbox_chat_interval_s=0.05,
        # the product's default is walkaway: each /detach task's agent then starts `detach mcp`
        # (the plain one, ~1.5 s, until the zygote runs), which most drills do not exercise;
        # the tests of the owner tools and tests/test_walkaway_e2e.py set it
        owner_tools="no",
    )
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def front_settings(
    tmp_path: Path,
    fake: FakeTelegram,
    claude_bin: str,
    workdir: Path,
    database_url: str,
    **overrides: object,
) -> Settings:
    """A front bot's settings on a shared database (its workers run the turns)."""
    return make_settings(
        tmp_path / "data",
        fake,
        claude_bin,
        workdir,
        role="front",
        database_url=database_url,
        **overrides,
    )


@contextlib.asynccontextmanager
async def running_bot(
    settings: Settings, environ: Mapping[str, str], executors: Mapping[str, Any] | None = None
) -> AsyncIterator[App]:
    """The real bot, long polling the fake Bot API; ``executors`` replace the engines."""
    async with build(settings, environ=environ, executors=executors) as app:
        polling = asyncio.create_task(
            app.dispatcher.start_polling(
                app.bot, handle_signals=False, close_bot_session=False, polling_timeout=1
            )
        )
        intake = asyncio.create_task(app.intake.run_forever())
        try:
            yield app
        finally:
            intake.cancel()
            with contextlib.suppress(Exception):
                await app.dispatcher.stop_polling()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(polling, 10)
                await intake


async def wait_linked(app: App, chat_id: int, message_id: int, timeout_s: float = 10) -> int:
    """The bot links a message to its task right after Telegram accepted it; a fast test
    user must wait for that, as no human could reply sooner."""
    async with asyncio.timeout(timeout_s):
        while (task_id := await app.store.links.task_for(chat_id, message_id)) is None:
            await asyncio.sleep(0.02)
    return task_id


@contextlib.asynccontextmanager
async def app_in_own_task(settings: Settings, **build_kwargs: object) -> AsyncIterator[App]:
    """APScheduler's anyio cancel scopes must be left by the task that entered them; pytest
    fixtures set up and tear down in different tasks, so the app lives in a task of its own."""
    async with in_own_task(lambda: build(settings, **build_kwargs)) as app:  # type: ignore[arg-type]
        yield app


@contextlib.asynccontextmanager
async def worker_in_own_task(
    settings: Settings, name: str, executors: Mapping[str, Any] | None = None
) -> AsyncIterator[Core]:
    """A scale-out worker (``detach worker NAME``) in this process, beside a front bot on the
    same PostgreSQL database; ``executors`` replace its engines."""
    async with in_own_task(lambda: build_worker(settings, name, executors)) as core:
        yield core


@contextlib.asynccontextmanager
async def in_own_task(
    make: Callable[[], contextlib.AbstractAsyncContextManager[T]],
) -> AsyncIterator[T]:
    """What ``make`` builds, entered and left by a task of its own (see ``app_in_own_task``)."""
    ready: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()

    async def hold() -> None:
        try:
            async with make() as built:
                ready.set_result(built)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    holder = asyncio.create_task(hold())
    built = await asyncio.wait_for(ready, 60)
    try:
        yield built
    finally:
        stop.set()
        await asyncio.wait_for(holder, 30)


def process_env(
    agent_env: Mapping[str, str], fake: FakeTelegram, data_dir: Path, claude_bin: str, workdir: Path
) -> dict[str, str]:
    """The environment of a bot run as its own process (``python -m bot run``)."""
    return {
        "ANTHROPIC_API_KEY": "sk-ant-test",  # a configured machine; a fake agent ignores it
        **agent_env,
        "DETACH_BOT_TOKEN": TOKEN,
        "DETACH_ALLOWED_USERS": str(OWNER),
        "DETACH_DATA_DIR": str(data_dir),
        "DETACH_TELEGRAM_API_URL": fake.base_url,
        "DETACH_CLAUDE_BIN": claude_bin,
        "DETACH_WORKDIR": str(workdir),
    }


async def stop_process(proc: asyncio.subprocess.Process, timeout_s: float = 20) -> None:
    """SIGTERM, as systemd would; SIGKILL if it does not stop in time."""
    if proc.returncode is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()


async def wait_sent(
    session: RecordingSession,
    predicate: Callable[[Any], bool],
    timeout_s: float = 30,
    method: str = "SendMessage",
) -> Any:
    """The first call of ``method`` the recording session saw that matches; a task's status
    changes before its completion card is queued, so tests wait for the card itself."""
    async with asyncio.timeout(timeout_s):
        while True:
            for call in session.sent(method):
                if predicate(call):
                    return call
            await asyncio.sleep(0.05)
