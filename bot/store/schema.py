"""The app's tables (the record of truth), in their latest shape; ``migrations`` brings an older
file to it."""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

schema_version = sa.Table(
    "schema_version", metadata, sa.Column("version", sa.Integer, nullable=False)
)

tasks = sa.Table(
    "tasks",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("owner_id", sa.BigInteger, nullable=False, index=True),
    sa.Column("chat_id", sa.BigInteger, nullable=False),
    sa.Column("engine", sa.String(16), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("slug", sa.String(64), nullable=False),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("cwd", sa.Text, nullable=False),
    sa.Column("model", sa.String(128)),
    sa.Column("status", sa.String(16), nullable=False, index=True),
    sa.Column("session_id", sa.String(128)),
    sa.Column("locale", sa.String(8), nullable=False, server_default="en"),
    sa.Column("announced", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column("total_cost_usd", sa.Float, nullable=False, server_default="0"),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("approval_mode", sa.String(16), nullable=False, server_default="ask"),  # v2
    sa.Column("preset", sa.String(64)),  # v3
    sa.Column("max_usd", sa.Float),  # v3
    sa.Column("check_command", sa.Text),  # v12
    # v18: sub-tasks: the task that started this one (through `detach mcp`), and whether this
    # one's agent may start its own
    sa.Column("parent_id", sa.Integer, index=True),
    sa.Column("subtasks", sa.Boolean, nullable=False, server_default=sa.false()),
    # v20: the repository whose .detach.toml named the check (NULL: the owner typed it)
    sa.Column("check_repository", sa.Text),
    # v34 (scale-out): the host the owner pinned it to (``host=``, /host), the host its agent's
    # session lives on (a follow-up goes there), the project (``cwd=project:x``) each host
    # resolves to its own directory
    sa.Column("host", sa.String(64)),
    sa.Column("session_host", sa.String(64)),
    sa.Column("project", sa.String(64)),
)

turns = sa.Table(
    "turns",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("task_id", sa.Integer, sa.ForeignKey("tasks.id"), nullable=False, index=True),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("prompt", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False, index=True),
    sa.Column("result_text", sa.Text),
    sa.Column("error", sa.Text),
    sa.Column("stderr_tail", sa.Text),
    sa.Column("cost_usd", sa.Float),
    sa.Column("input_tokens", sa.Integer),
    sa.Column("output_tokens", sa.Integer),
    sa.Column("runs", sa.Integer, nullable=False, server_default="0"),
    sa.Column("runner", sa.String(128)),  # v10: the process running it (bot or a worker)
    sa.Column("host", sa.String(64)),  # v33: the host that ran it last (scale-out)
    sa.Column("stop_requested", sa.Boolean, nullable=False, server_default=sa.false()),  # v10
    # v30: a follow-up queued by another process (`detach mcp`) asks to go into the running turn
    sa.Column("steer_requested", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("check_round", sa.Integer, nullable=False, server_default="1"),  # v12
    # v17: when the turn first waited for its engine's usage limit, and how often it did
    sa.Column("parked_at", sa.DateTime(timezone=True)),
    sa.Column("limit_parks", sa.Integer, nullable=False, server_default="0"),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("submitted_at", sa.DateTime(timezone=True)),
    sa.Column("started_at", sa.DateTime(timezone=True)),
    sa.Column("finished_at", sa.DateTime(timezone=True)),
    # v21: the model its tokens were priced as, and whether that model had no known price (its
    # cost is then what the caps counted, at the dearest preset's price)
    sa.Column("model", sa.String(128)),
    sa.Column("unpriced", sa.Boolean, nullable=False, server_default=sa.false()),
    # v19: the partial index ix_turns_queue (submitted_at, id WHERE status = 'queued'), the shared
    # queue walked by every claim, is made by the migration only: declared here, its
    # dialect-specific WHERE would load SQLAlchemy's PostgreSQL dialect into every SQLite bot
)

transcript = sa.Table(
    "transcript_events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("task_id", sa.Integer, nullable=False),
    sa.Column("turn_id", sa.Integer, nullable=False),
    sa.Column("kind", sa.String(24), nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Index("ix_transcript_task_id", "task_id", "id"),
)

message_links = sa.Table(
    "message_links",
    metadata,
    sa.Column("chat_id", sa.BigInteger, primary_key=True),
    sa.Column("message_id", sa.BigInteger, primary_key=True),
    sa.Column("task_id", sa.Integer, nullable=False, index=True),
    sa.Column("kind", sa.String(24), nullable=False),
)

pending_questions = sa.Table(
    "pending_questions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("task_id", sa.Integer, nullable=False, index=True),
    sa.Column("turn_id", sa.Integer),
    sa.Column("kind", sa.String(24), nullable=False),
    sa.Column("payload", sa.Text, nullable=False, server_default="{}"),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("chat_id", sa.BigInteger),
    sa.Column("message_id", sa.BigInteger),
    sa.Column("deadline", sa.DateTime(timezone=True)),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("answered_at", sa.DateTime(timezone=True)),
    sa.Column("answer", sa.Text),  # v2
    sa.Column("row_id", sa.Integer),  # v19: its message's outbox row (edited when it expires)
)

# v_pending_copies: the copies of an open question (or preflight hold) that /pending showed,
# each edited with the original when it settles; rows of their own, so a copy never races the
# question's payload (a multi-select's selection), at most one per chat (the newest), a few in all
pending_copies = sa.Table(
    "pending_copies",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("of", sa.String(8), nullable=False),  # what it copies: CopyOf
    sa.Column("subject_id", sa.Integer, nullable=False),  # the question's or hold's id
    sa.Column("chat_id", sa.BigInteger, nullable=False),
    sa.Column("row_id", sa.Integer, nullable=False),  # the copy's outbox row
    sa.Index("ix_pending_copies_subject", "of", "subject_id"),
)

# v22: a walk-away task held by its preflight's question or refusal (bot.preflight): the command
# as typed, so the owner's answer starts it as it would have started
preflight_holds = sa.Table(
    "preflight_holds",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("owner_id", sa.BigInteger, nullable=False),
    sa.Column("chat_id", sa.BigInteger, nullable=False, index=True),
    sa.Column("locale", sa.String(8), nullable=False),
    sa.Column("reply_to", sa.BigInteger),  # the command's message
    sa.Column("text", sa.Text, nullable=False),  # the command's text, options included
    sa.Column("with_options", sa.Boolean, nullable=False),
    sa.Column("decision", sa.String(8), nullable=False),  # ask or refuse
    sa.Column("question", sa.Text, nullable=False, server_default=""),
    sa.Column("answers", sa.Text, nullable=False, server_default="[]"),
    sa.Column("reason", sa.Text, nullable=False, server_default=""),
    sa.Column("cost_usd", sa.Float),
    sa.Column("status", sa.String(12), nullable=False, index=True),
    sa.Column("answer", sa.Text),
    sa.Column("row_id", sa.Integer),  # its message's outbox row
    sa.Column("deadline", sa.DateTime(timezone=True)),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("task_id", sa.Integer),  # v_preflight: the task it started
    # v31: the task as its door planned it (JSON, ``bot.store.preflights.encode_held``): any
    # door's task is held, not only a chat command's
    sa.Column("task", sa.Text),
)

spend = sa.Table(
    "spend",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("user_id", sa.BigInteger, nullable=False),
    sa.Column("day", sa.String(10), nullable=False),
    sa.Column("task_id", sa.Integer, nullable=False),
    sa.Column("turn_id", sa.Integer, nullable=False),
    sa.Column("cost_usd", sa.Float, nullable=False),
    sa.Column("input_tokens", sa.Integer, nullable=False, server_default="0"),
    sa.Column("output_tokens", sa.Integer, nullable=False, server_default="0"),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    # v21: the turn's engine and model, and whether the model had no known price
    sa.Column("engine", sa.String(16)),
    sa.Column("model", sa.String(128)),
    sa.Column("unpriced", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Index("ix_spend_user_day", "user_id", "day"),
)

audit = sa.Table(
    "audit",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("user_id", sa.BigInteger),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("task_id", sa.Integer),
    sa.Column("detail", sa.Text, nullable=False, server_default=""),
    sa.Index("ix_audit_user_action", "user_id", "action"),
)


grants = sa.Table(
    "grants",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("user_id", sa.BigInteger, nullable=False),
    sa.Column("engine", sa.String(16), nullable=False),
    sa.Column("cwd", sa.Text, nullable=False),
    sa.Column("pattern", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("revoked_at", sa.DateTime(timezone=True)),
    sa.Index("ix_grants_scope", "user_id", "engine", "cwd"),
)

chat_settings = sa.Table(
    "chat_settings",
    metadata,
    sa.Column("chat_id", sa.BigInteger, primary_key=True),
    sa.Column("preset", sa.String(64)),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("cwd", sa.Text),  # v5
    sa.Column("notify", sa.String(8)),  # v13: NotifyPolicy
    sa.Column("host", sa.String(64)),  # v34: the host its new tasks are pinned to (/host)
)

user_settings = sa.Table(
    "user_settings",
    metadata,
    sa.Column("user_id", sa.BigInteger, primary_key=True),
    sa.Column("locale", sa.String(8)),
    sa.Column("tz", sa.String(64)),  # v9: /tz
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

outbox = sa.Table(
    "outbox",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("chat_id", sa.BigInteger, nullable=False),
    sa.Column("op", sa.String(16), nullable=False),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("task_id", sa.Integer),
    sa.Column("link_kind", sa.String(24)),
    sa.Column("coalesce_key", sa.String(64)),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("not_before", sa.DateTime(timezone=True), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("sent_at", sa.DateTime(timezone=True)),
    sa.Column("message_id", sa.BigInteger),
    sa.Column("error", sa.Text),
    sa.Column("retired_at", sa.DateTime(timezone=True)),  # v11: a message removed once done
    sa.Index("ix_outbox_status_id", "status", "id"),
    sa.Index("ix_outbox_task_id", "task_id"),  # v14: a task's messages (its ack, its cards)
)

worktrees = sa.Table(
    "worktrees",  # v7: a task's own git worktree and branch
    metadata,
    sa.Column("task_id", sa.Integer, primary_key=True),
    sa.Column("repo_root", sa.Text, nullable=False),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("branch", sa.Text, nullable=False),
    sa.Column("base_branch", sa.Text, nullable=False),
    sa.Column("base_commit", sa.String(64), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),  # active, merged, discarded
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

task_files = sa.Table(
    "task_files",  # v8: the goal and constraints of a task that came as a task file
    metadata,
    sa.Column("task_id", sa.Integer, primary_key=True),
    sa.Column("source", sa.Text, nullable=False),  # the file's name in the inbox
    sa.Column("goal", sa.Text, nullable=False),
    sa.Column("constraints", sa.Text, nullable=False, server_default=""),
    sa.Column("exported_at", sa.DateTime(timezone=True)),  # the finished file written back
)

schedules = sa.Table(
    "schedules",  # v9: /every and /at
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("owner_id", sa.BigInteger, nullable=False),
    sa.Column("chat_id", sa.BigInteger, nullable=False),
    sa.Column("cron", sa.String(128)),  # a crontab line, for /every
    sa.Column("run_at", sa.DateTime(timezone=True)),  # the one time, for /at
    sa.Column("tz", sa.String(64), nullable=False),
    sa.Column("text", sa.Text, nullable=False),  # options and goal, as typed
    sa.Column("locale", sa.String(8), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),  # active, paused, done, deleted
    sa.Column("last_run_at", sa.DateTime(timezone=True)),
    sa.Column("runs", sa.Integer, nullable=False, server_default="0"),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Index("ix_schedules_owner", "owner_id", "state"),
)

update_journal = sa.Table(
    "update_journal",  # v11: a Telegram update, stored before Telegram is told it arrived
    metadata,
    sa.Column("update_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
)

# v12: every run of a task's check, with its (capped) output
task_checks = sa.Table(
    "task_checks",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("task_id", sa.Integer, nullable=False, index=True),
    sa.Column("turn_id", sa.Integer, nullable=False),
    sa.Column("round", sa.Integer, nullable=False),
    sa.Column("command", sa.Text, nullable=False),
    sa.Column("passed", sa.Boolean, nullable=False),
    sa.Column("exit_code", sa.Integer),
    sa.Column("timed_out", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("duration_s", sa.Float, nullable=False),
    sa.Column("output", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    # v20: false: not run, the owner did not approve the repository's check
    sa.Column("approved", sa.Boolean, nullable=False, server_default=sa.true()),
)

# v15: conversations an engine keeps in the app's database (the local engine's history)
engine_sessions = sa.Table(
    "engine_sessions",
    metadata,
    sa.Column("session_id", sa.String(64), primary_key=True),
    sa.Column("engine", sa.String(32), nullable=False),
    sa.Column("messages", sa.Text, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

# v16: an engine's usage limit, until it resets (turns of that engine wait)
engine_limits = sa.Table(
    "engine_limits",
    metadata,
    sa.Column("engine", sa.String(32), primary_key=True),
    sa.Column("until", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

# v26: the latest use an engine reported of each of its plan's windows (five-hour,
# weekly…), and the reset of the window its warning was sent for (one warning per window)
engine_windows = sa.Table(
    "engine_windows",
    metadata,
    sa.Column("engine", sa.String(32), primary_key=True),
    sa.Column("window", sa.String(40), primary_key=True),
    sa.Column("used", sa.Float),  # 0..1; None: the engine did not say
    sa.Column("resets_at", sa.DateTime(timezone=True)),
    sa.Column("warned", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("warned_reset", sa.DateTime(timezone=True)),  # of the window warned about
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

# v19: the processes that run turns (the bot, scale-out workers), each incarnation one row: a
# lease renewed by its heartbeat; a turn whose runner's lease lapsed is taken over by another
runners = sa.Table(
    "runners",
    metadata,
    sa.Column("id", sa.String(128), primary_key=True),  # name@host#incarnation
    sa.Column("name", sa.String(64), nullable=False),
    sa.Column("host", sa.String(64), nullable=False),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("engines", sa.String(256), nullable=False, server_default=""),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
    # heartbeat plus the runner's own lease: past this it has lapsed (each runner says how
    # long its silence may last, so processes with other settings never misjudge it)
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("stopped_at", sa.DateTime(timezone=True)),  # stopped cleanly
    sa.Column("taken_at", sa.DateTime(timezone=True)),  # its turns were taken over
    # what its heartbeat announces (JSON, bot.fleet.presence): engines, sandbox, slots, projects
    sa.Column("presence", sa.Text, nullable=False, server_default="{}"),
    # v35: its free slots as its last heartbeat said, and until when it counts as online (one
    # heartbeat past the one it owes): a claim prefers a better host that is online (#57)
    sa.Column("free", sa.Integer, nullable=False, server_default="0"),
    sa.Column("online_until", sa.DateTime(timezone=True)),
)

# v35: what each runner's heartbeat announces, in rows a claim can join: the engines it runs
# (with the share of its plan left there, 0..1) and its projects (name, path on its host)
runner_engines = sa.Table(
    "runner_engines",
    metadata,
    sa.Column("runner", sa.String(128), primary_key=True),
    sa.Column("engine", sa.String(32), primary_key=True),
    sa.Column("plan_left", sa.Float, nullable=False),
)
runner_projects = sa.Table(
    "runner_projects",
    metadata,
    sa.Column("runner", sa.String(128), primary_key=True),
    sa.Column("project", sa.String(64), primary_key=True),
    sa.Column("path", sa.Text, nullable=False),
)

# a voice note's transcript, shown with Start / Edit / Cancel until its owner taps one
# (bot.voice.drafts); pruned with the retention
voice_drafts = sa.Table(
    "voice_drafts",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("owner_id", sa.BigInteger, nullable=False),
    sa.Column("chat_id", sa.BigInteger, nullable=False),
    sa.Column("message_id", sa.BigInteger, nullable=False),  # the voice note's message
    sa.Column("locale", sa.String(8), nullable=False),
    sa.Column("text", sa.Text, nullable=False),  # the transcript, or the owner's edit of it
    sa.Column("notes", sa.Text, nullable=False, server_default=""),  # cut, language (keys)
    sa.Column("status", sa.String(12), nullable=False),  # pending, started, cancelled
    sa.Column("row_id", sa.Integer),  # its message's outbox row
    sa.Column("task_id", sa.Integer),  # the task Start began
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, index=True),
    sa.UniqueConstraint("chat_id", "message_id", name="uq_voice_drafts_message"),
)

forum_topics = sa.Table(
    "forum_topics",  # a forum topic the bot opened: one per task, or per directory
    metadata,
    sa.Column("chat_id", sa.BigInteger, primary_key=True),
    sa.Column("key", sa.Text, primary_key=True),  # "task:<id>" or "cwd:<directory>"
    sa.Column("thread_id", sa.BigInteger),  # NULL: gone (deleted): the chat itself again
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("closed", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

task_topics = sa.Table(
    "task_topics",  # where a task's messages go, decided at its first message
    metadata,
    sa.Column("task_id", sa.Integer, primary_key=True),
    sa.Column("chat_id", sa.BigInteger, nullable=False),
    sa.Column("key", sa.Text),  # NULL: the chat itself (no topics, or none could be opened)
    sa.Index("ix_task_topics_chat_key", "chat_id", "key"),
)

# hand-off: a task held at the terminal (its owner continues its session there; phone replies
# are refused until taken back): by whom, since when
terminal_holds = sa.Table(
    "terminal_holds",
    metadata,
    sa.Column("task_id", sa.Integer, primary_key=True),
    sa.Column("user_id", sa.BigInteger, nullable=False),
    sa.Column("since", sa.DateTime(timezone=True), nullable=False),
    # replies refused meanwhile, kept for "Take back and send it": {"<message id>": "text"}
    sa.Column("parked", sa.Text, nullable=False, server_default="{}"),
    sa.Column("row_id", sa.Integer),  # the outbox row of the message that says it is held
)

# the stall watchdog's latest message of a running turn, and the owner's answer to it: read
# and written by whichever process runs the turn or handles the tap (bot.store.stalls);
# removed when the turn ends
stall_notices = sa.Table(
    "stall_notices",
    metadata,
    sa.Column("turn_id", sa.Integer, sa.ForeignKey("turns.id"), primary_key=True),
    sa.Column("chat_id", sa.BigInteger, nullable=False),
    sa.Column("row_id", sa.Integer, nullable=False),  # its outbox row
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),  # a StallNoticeState
)

task_prs = sa.Table(
    "task_prs",  # v32: the pull request a worktree task's branch was opened as (bot.prs)
    metadata,
    sa.Column("task_id", sa.Integer, primary_key=True),
    sa.Column("repo", sa.Text, nullable=False),  # owner/name on GitHub
    sa.Column("number", sa.Integer, nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("head_sha", sa.String(64), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),  # a PrState
    sa.Column("checks", sa.String(16), nullable=False),  # a ChecksState
    sa.Column("remote_url", sa.Text, nullable=False, server_default=""),  # pushed to; pinned
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)
