"""Ordered migrations of the app's tables (defined in ``schema``) with a version table."""

from __future__ import annotations

import json
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from bot.models import CopyOf
from bot.store.schema import (
    audit,
    chat_settings,
    engine_limits,
    engine_sessions,
    engine_windows,
    forum_topics,
    grants,
    message_links,
    metadata,
    outbox,
    pending_copies,
    pending_questions,
    preflight_holds,
    runner_engines,
    runner_projects,
    runners,
    schedules,
    schema_version,
    spend,
    stall_notices,
    task_checks,
    task_files,
    task_prs,
    task_topics,
    tasks,
    terminal_holds,
    transcript,
    turns,
    update_journal,
    user_settings,
    voice_drafts,
    worktrees,
)

V1_TABLES = [tasks, turns, transcript, message_links, pending_questions, spend, audit]


def _v1(conn: Connection) -> None:
    metadata.create_all(conn, tables=V1_TABLES)


def _add_column(conn: Connection, table: str, column: str, ddl: str) -> None:
    """Add a column unless the table already has it (tables are created in their latest shape)."""
    inspector = sa.inspect(conn)
    if inspector.has_table(table) and column not in {
        c["name"] for c in inspector.get_columns(table)
    }:
        conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN {column} {ddl}"))


def _v2(conn: Connection) -> None:
    """Approvals: remembered grants, the task's approval mode, a question's answer."""
    grants.create(conn, checkfirst=True)
    _add_column(conn, "tasks", "approval_mode", "VARCHAR(16) NOT NULL DEFAULT 'ask'")
    _add_column(conn, "pending_questions", "answer", "TEXT")


def _v3(conn: Connection) -> None:
    """Money: the task's preset and budget, the chat's default preset."""
    chat_settings.create(conn, checkfirst=True)
    _add_column(conn, "tasks", "preset", "VARCHAR(64)")
    _add_column(conn, "tasks", "max_usd", "FLOAT")


def _v4(conn: Connection) -> None:
    """Per-user settings: the /lang override."""
    user_settings.create(conn, checkfirst=True)


def _v5(conn: Connection) -> None:
    """The chat's default working directory (/cd)."""
    _add_column(conn, "chat_settings", "cwd", "TEXT")


def _v6(conn: Connection) -> None:
    """The durable outbox of Telegram sends and edits."""
    outbox.create(conn, checkfirst=True)


def _v7(conn: Connection) -> None:
    """Worktrees: a task's own git worktree and branch."""
    worktrees.create(conn, checkfirst=True)


def _v8(conn: Connection) -> None:
    """Task files: what a task dropped into the inbox asked for."""
    task_files.create(conn, checkfirst=True)


def _v9(conn: Connection) -> None:
    """Schedules (/every, /at) and the user's time zone (/tz)."""
    schedules.create(conn, checkfirst=True)
    _add_column(conn, "user_settings", "tz", "VARCHAR(64)")


def _v10(conn: Connection) -> None:
    """Scale-out workers: which process runs a turn, and a stop asked of it from elsewhere."""
    _add_column(conn, "turns", "runner", "VARCHAR(128)")
    _add_column(conn, "turns", "stop_requested", "BOOLEAN NOT NULL DEFAULT false")


def _v11(conn: Connection) -> None:
    """The update journal: a Telegram update is stored before its receipt is confirmed; an
    outbox message that is removed once its moment passed (progress) says so."""
    update_journal.create(conn, checkfirst=True)
    _add_column(conn, "outbox", "retired_at", "TIMESTAMP")


def _v12(conn: Connection) -> None:
    """Checks: a task's check command, the round a turn belongs to, and every check's result."""
    _add_column(conn, "tasks", "check_command", "TEXT")
    _add_column(conn, "turns", "check_round", "INTEGER NOT NULL DEFAULT 1")
    task_checks.create(conn, checkfirst=True)


def _v13(conn: Connection) -> None:
    """A chat's notification policy (/notify)."""
    _add_column(conn, "chat_settings", "notify", "VARCHAR(8)")


def _v14(conn: Connection) -> None:
    """A task's messages are looked up by task (its acknowledgement is edited as it moves)."""
    conn.execute(sa.text("CREATE INDEX IF NOT EXISTS ix_outbox_task_id ON outbox (task_id)"))


def _v15(conn: Connection) -> None:
    """Conversations an engine keeps in the app's database (the local engine's history)."""
    engine_sessions.create(conn, checkfirst=True)


def _v16(conn: Connection) -> None:
    """An engine's usage limit, until it resets (turns of that engine wait)."""
    engine_limits.create(conn, checkfirst=True)


def _v17(conn: Connection) -> None:
    """A turn's wait for its engine's usage limit: since when (its card says how long), and how
    many times (the retries of a limit without a reset time back off)."""
    stamp = "TIMESTAMP WITH TIME ZONE" if conn.dialect.name == "postgresql" else "TIMESTAMP"
    _add_column(conn, "turns", "parked_at", stamp)
    _add_column(conn, "turns", "limit_parks", "INTEGER NOT NULL DEFAULT 0")


def _v18(conn: Connection) -> None:
    """Sub-tasks: a task's parent, and whether its agent may start sub-tasks."""
    _add_column(conn, "tasks", "parent_id", "INTEGER")
    _add_column(conn, "tasks", "subtasks", "BOOLEAN NOT NULL DEFAULT FALSE")
    conn.execute(sa.text("CREATE INDEX IF NOT EXISTS ix_tasks_parent_id ON tasks (parent_id)"))


def _v19(conn: Connection) -> None:
    """Scale-out liveness: the runners' leases, a question's outbox row (so a takeover can
    edit a question whose message id its dead worker never learned), and the index every
    claim of the shared queue walks."""
    runners.create(conn, checkfirst=True)
    _add_column(conn, "pending_questions", "row_id", "INTEGER")
    if sa.inspect(conn).has_table("turns"):
        conn.execute(
            sa.text(
                "CREATE INDEX IF NOT EXISTS ix_turns_queue ON turns (submitted_at, id) "
                "WHERE status = 'queued'"
            )
        )


def _v20(conn: Connection) -> None:
    """A repository's check needs the owner's consent: where a task's check came from, and
    a check that did not run because it was not approved."""
    _add_column(conn, "tasks", "check_repository", "TEXT")
    _add_column(conn, "task_checks", "approved", "BOOLEAN NOT NULL DEFAULT TRUE")


def _v21(conn: Connection) -> None:
    """Every engine priced: the model a turn was priced as and whether it had no known price,
    on the turn and its spend row (with its engine, filled in for the rows already there)."""
    _add_column(conn, "turns", "model", "VARCHAR(128)")
    _add_column(conn, "turns", "unpriced", "BOOLEAN NOT NULL DEFAULT FALSE")
    _add_column(conn, "spend", "engine", "VARCHAR(16)")
    _add_column(conn, "spend", "model", "VARCHAR(128)")
    _add_column(conn, "spend", "unpriced", "BOOLEAN NOT NULL DEFAULT FALSE")
    if sa.inspect(conn).has_table("spend"):
        conn.execute(
            sa.text(
                "UPDATE spend SET engine = (SELECT engine FROM tasks WHERE tasks.id = "
                "spend.task_id) WHERE engine IS NULL"
            )
        )


def _v22(conn: Connection) -> None:
    """A walk-away task held by its preflight's question or refusal."""
    preflight_holds.create(conn, checkfirst=True)


def _v23(conn: Connection) -> None:
    """A voice note's transcript, a draft until its owner starts, edits or cancels it."""
    voice_drafts.create(conn, checkfirst=True)


def _v24(conn: Connection) -> None:
    """A topic per task: the forum topics the bot opened, and which one each task's
    messages go to."""
    forum_topics.create(conn, checkfirst=True)
    task_topics.create(conn, checkfirst=True)


def _v25(conn: Connection) -> None:
    """Hand-off: tasks held at the terminal."""
    terminal_holds.create(conn, checkfirst=True)


def _v26(conn: Connection) -> None:
    """The usage windows engines report, and which of them were warned about."""
    engine_windows.create(conn, checkfirst=True)


def _v27(conn: Connection) -> None:
    """A preflight's hold names the task it started (its question and answer, exported)."""
    _add_column(conn, "preflight_holds", "task_id", "INTEGER")


def _v28(conn: Connection) -> None:
    """The stall watchdog's message and its Keep waiting, seen by every process."""
    stall_notices.create(conn, checkfirst=True)


def _v29(conn: Connection) -> None:
    """/pending's copies of a question get a table of their own: the copies kept on the
    payload of a question still open are moved there (the copies of a settled one are done)."""
    pending_copies.create(conn, checkfirst=True)
    open_ones = sa.select(pending_questions.c.id, pending_questions.c.payload).where(
        pending_questions.c.status == "pending"
    )
    for qid, payload in list(conn.execute(open_ones)):
        shown = json.loads(payload or "{}").get("copies") or []
        for chat_id, row_id in shown:
            conn.execute(
                pending_copies.insert().values(
                    of=CopyOf.QUESTION.value,
                    subject_id=qid,
                    chat_id=int(chat_id),
                    row_id=int(row_id),
                )
            )


def _v30(conn: Connection) -> None:
    """A follow-up another process queued may ask to be steered into the running turn."""
    _add_column(conn, "turns", "steer_requested", "BOOLEAN NOT NULL DEFAULT FALSE")


def _v31(conn: Connection) -> None:
    """A preflight's hold keeps the task its door planned (a task file, a schedule's run)."""
    _add_column(conn, "preflight_holds", "task", "TEXT")


def _v32(conn: Connection) -> None:
    """A worktree task's pull request (bot.prs): its number, address, state and checks."""
    task_prs.create(conn, checkfirst=True)


def _v33(conn: Connection) -> None:
    """Hosts: a runner's heartbeat announces its presence; a turn keeps the host that ran it."""
    _add_column(conn, "runners", "presence", "TEXT NOT NULL DEFAULT '{}'")
    _add_column(conn, "turns", "host", "VARCHAR(64)")


def _v34(conn: Connection) -> None:
    """Pinning: a task's host, its session's host and project; a chat's default host."""
    for column in ("host", "session_host", "project"):
        _add_column(conn, "tasks", column, "VARCHAR(64)")
    _add_column(conn, "chat_settings", "host", "VARCHAR(64)")


def _v35(conn: Connection) -> None:
    """Picking the host (#57): each runner's free slots, online deadline, engines with their
    plan left, and projects, where a claim can compare them."""
    _add_column(conn, "runners", "free", "INTEGER NOT NULL DEFAULT 0")
    stamp = "TIMESTAMP WITH TIME ZONE" if conn.dialect.name == "postgresql" else "TIMESTAMP"
    _add_column(conn, "runners", "online_until", stamp)
    runner_engines.create(conn, checkfirst=True)
    runner_projects.create(conn, checkfirst=True)


# Append-only: migration N brings the schema from version N-1 to N. Tables are defined in their
# latest shape, so a step that alters a table checks what is already there.
MIGRATIONS: list[Callable[[Connection], None]] = [
    _v1,
    _v2,
    _v3,
    _v4,
    _v5,
    _v6,
    _v7,
    _v8,
    _v9,
    _v10,
    _v11,
    _v12,
    _v13,
    _v14,
    _v15,
    _v16,
    _v17,
    _v18,
    _v19,
    _v20,
    _v21,
    _v22,
    _v23,
    _v24,
    _v25,
    _v26,
    _v27,
    _v28,
    _v29,
    _v30,
    _v31,
    _v32,
    _v33,
    _v34,
    _v35,
]


def migrate(conn: Connection) -> int:
    """Apply every migration newer than the stored version; returns the version reached."""
    schema_version.create(conn, checkfirst=True)
    current = conn.execute(sa.select(sa.func.max(schema_version.c.version))).scalar() or 0
    for version, step in enumerate(MIGRATIONS[current:], start=current + 1):
        step(conn)
        conn.execute(schema_version.delete())
        conn.execute(schema_version.insert().values(version=version))
    return len(MIGRATIONS)
