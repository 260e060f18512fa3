"""The layout shows the architecture: handlers -> bot services -> job pool -> executors."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# handlers reply through the outbox (paced, durable), never straight to Telegram
# the packages (and core modules) handlers may use; never the job pool, runner or store
HANDLER_MAY_IMPORT_PACKAGES = (
    "bot.tasks",
    "bot.approvals",
    "bot.money",
    "bot.schedules",
    "bot.worktrees",
    "bot.telegram",
)
HANDLER_MAY_IMPORT_MODULES = {"bot.models", "bot.events", "bot.errors", "bot.fleet.status"}
HANDLER_MAY_NOT_IMPORT = {"bot.telegram.journal", "bot.telegram.notifier"}
# the value types (models: tasks and turns; events: what an agent says as a turn runs)
EXECUTOR_MAY_IMPORT = {"bot.models", "bot.events", "bot.errors", "bot.ports"}


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", modules("handlers"), ids=lambda p: p.name)
def test_handlers_use_only_services_models_errors_and_texts(path):
    used = {m for m in imports(path) if m.startswith("bot.")}
    allowed = {
        m
        for m in used
        if m in HANDLER_MAY_IMPORT_MODULES
        or (m.startswith(HANDLER_MAY_IMPORT_PACKAGES) and m not in HANDLER_MAY_NOT_IMPORT)
    }
    assert used == allowed, used - allowed


@pytest.mark.parametrize("path", modules("executors"), ids=lambda p: p.name)
def test_executors_use_only_models_events_errors_and_ports(path):
    used = {m for m in imports(path) if m.startswith(("bot.", "handlers"))}
    assert used <= EXECUTOR_MAY_IMPORT, used - EXECUTOR_MAY_IMPORT


SENDING_METHODS = {
    "answer",
    "reply",
    "send_message",
    "send_document",
    "edit_text",
    "edit_message_text",
    "edit_reply_markup",
    "delete_message",
    "send_photo",
    "answer_document",
    "copy_message",
    "forward_message",
}


def test_only_the_outbox_sends_edits_or_deletes_messages():
    """Every message goes through the outbox; the one direct call allowed elsewhere is a
    callback query's answer (``query.answer``), which is not a chat message."""
    offenders = []
    for pkg in ("bot", "handlers"):
        for path in modules(pkg):
            # delivery is the outbox's sender; pairing answers /start before any database
            # (so any outbox) exists
            if path.relative_to(ROOT).as_posix() in ("bot/telegram/delivery.py", "bot/pairing.py"):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in SENDING_METHODS
                ):
                    owner = ast.unparse(node.func.value)
                    if (
                        not (node.func.attr == "answer" and owner.endswith("query"))
                        and "outbox" not in owner
                    ):
                        offenders.append(
                            f"{path.relative_to(ROOT)}:{node.lineno} {owner}.{node.func.attr}"
                        )
    assert offenders == []


def test_only_the_process_scheduler_and_its_users_import_apscheduler():
    """One APScheduler per process (``bot/turns/scheduler.py``); the pool and the timer use it
    (the pool through it alone; the timer for its triggers and policies)."""
    users = [
        p.relative_to(ROOT).as_posix()
        for pkg in ("bot", "handlers", "executors")
        for p in modules(pkg)
        if any(m.startswith("apscheduler") for m in imports(p))
    ]
    assert users == ["bot/schedules/timer.py", "bot/turns/scheduler.py"]


def test_a_worker_imports_no_telegram_library_and_no_scheduler():
    """A scale-out worker runs turns with ``bot.core`` alone: what it imports (measured in a
    fresh interpreter) holds neither aiogram nor APScheduler (imported when the worker starts
    it, ``bot/turns/scheduler.py``), so it starts fast and light."""
    probe = (
        "import sys, bot.worker; heavy = {'aiogram', 'apscheduler', 'aiohttp'}; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))"
    )
    assert _fresh(probe) == "[]"


def test_the_bot_on_sqlite_loads_no_orm_no_postgresql_and_no_fuzzy_matcher():
    """Memory the idle bot does without (measured in a fresh interpreter, after opening its
    SQLite store): SQLAlchemy's asyncio extension and ORM and greenlet (6 MB; SQLite runs on
    the sync engine, ``bot/store/sqlite_engine.py``), its PostgreSQL dialect (2 MB), rapidfuzz
    (3.5 MB, loaded by a typo in /model or /tz), anyio (2.6 MB, until the job pool's APScheduler
    starts; the executors shield their clean-up with plain asyncio, ``executors/shield.py``),
    psutil (1.3 MB; agents' process trees are read from /proc, ``executors/tree.py``)."""
    probe = (
        "import asyncio, sys, tempfile, bot.app, bot.cli\n"
        "from bot.store import Store\n"
        "async def main():\n"
        "    with tempfile.TemporaryDirectory() as d:\n"
        "        store = await Store.open(f'sqlite+aiosqlite:///{d}/t.sqlite')\n"
        "        await store.tasks.get(1)\n"
        "        await store.close()\n"
        "asyncio.run(main())\n"
        "unused = ('sqlalchemy.orm', 'sqlalchemy.ext.asyncio', 'greenlet', 'aiosqlite',\n"
        "          'sqlalchemy.dialects.postgresql', 'rapidfuzz', 'anyio', 'psutil')\n"
        "print(sorted(m for m in unused if m in sys.modules))"
    )
    assert _fresh(probe) == "[]"


def test_nothing_is_built_at_import_time():
    """No module-level Bot, Dispatcher, scheduler, engine or Settings()."""
    forbidden = {"Bot", "Dispatcher", "AsyncScheduler", "Settings", "create_async_engine"}
    for pkg in ("bot", "handlers", "executors"):
        for path in modules(pkg):
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(
                    getattr(node, "value", None), ast.Call
                ):
                    func = node.value.func  # type: ignore[union-attr]
                    name = getattr(func, "id", getattr(func, "attr", ""))
                    assert name not in forbidden, f"{path}: module-level {name}()"


def _fresh(probe: str) -> str:
    """What ``probe`` prints in a fresh interpreter (what a process imports, measured)."""
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()
