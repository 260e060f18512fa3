"""Task files: the Markdown format of the original detach skill. Frontmatter (``created``,
``channel``, ``chat_id``, ``slug``, optional ``model``; Detach also reads ``cwd``, ``engine``,
``worktree``, ``mode``, ``check``, ``max_usd``, ``subtasks``, ``client`` and ``parent``),
sections ``# Goal``, ``# Constraints``, ``# Question`` and ``# Answer`` (a preflight's question to
the owner and the answer, when it asked), ``# Result``, and a trailing block ``completed``,
``duration_seconds``, ``status`` (and ``check_status``, ``check_round`` for a task with a
check, ``preamble`` for one told the owner's preamble) once the task has finished."""

from __future__ import annotations

import os
import re
import tempfile
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bot.errors import DetachError

HEAD_KEYS = (
    "created",
    "channel",
    "chat_id",
    "slug",
    "model",
    "cwd",
    "engine",
    "worktree",
    "mode",
    "check",
    "max_usd",
    "subtasks",
    "client",
    "parent",
)
OPTION_KEYS = ("model", "cwd", "engine", "worktree", "mode", "check", "max_usd", "subtasks")
TAIL_KEYS = (
    "completed",
    "duration_seconds",
    "status",
    "check_status",
    "check_round",
    "preamble",
)
SECTIONS = ("Goal", "Constraints", "Question", "Answer", "Result")
_LINE = re.compile(r"([a-z_]+):[ \t]*(.*)")


SHELL_CLIENT = "detach add"  # a task file's ``client`` when the shell wrote it


class TaskFileError(DetachError):
    """A task file that cannot be read; the message says why, for the rejected/ note."""


@dataclass(frozen=True, slots=True)
class TaskFile:
    goal: str
    constraints: str = ""
    result: str = ""
    question: str = ""  # the preflight's question to the owner (bot.preflight)
    answer: str = ""  # the owner's answer ("": none came, the agent used its judgement)
    created: datetime | None = None
    channel: str = "telegram"
    chat_id: int | None = None
    slug: str | None = None
    model: str | None = None
    cwd: str | None = None
    engine: str | None = None
    worktree: str | None = None  # yes / no
    mode: str | None = None  # sandbox / ask / auto / readonly
    check: str | None = None  # a command run after the agent (``no``: not even the default)
    max_usd: str | None = None  # the task's budget
    subtasks: str | None = None  # yes: its agent may start sub-tasks
    client: str | None = None  # the program that wrote it (an MCP client), said in the chat
    parent: int | None = None  # the task whose agent started it (`detach mcp --parent`)
    completed: datetime | None = None
    duration_seconds: int | None = None
    status: str | None = None
    check_status: str | None = None  # passed / failed: the last check's verdict
    check_round: int | None = None
    preamble: str | None = None  # the owner's preamble the last turn was told (path, size)

    def options(self) -> dict[str, str]:
        """The task options the file sets (``model``, ``cwd``, ``engine``, ``worktree``,
        ``mode``, ``check``), as a task command's ``key=value`` would."""
        return {key: value for key in OPTION_KEYS if (value := getattr(self, key))}

    @property
    def prompt(self) -> str:
        """What the agent is asked: the goal, then the constraints it must keep, then the
        preflight's question and the owner's answer (or that none came)."""
        prompt = self.goal
        if self.constraints:
            prompt += f"\n\nConstraints:\n{self.constraints}"
        if self.question and self.answer:
            prompt += f"\n\nClarified by the owner: {self.question} → {self.answer}"
        elif self.question:
            prompt += (
                f"\n\nThe owner was asked: {self.question}\nNo answer: use your best judgement."
            )
        return prompt


def _pairs(lines: list[str], known: tuple[str, ...], where: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in lines:
        if not _uncommented(line).strip():
            continue
        match = _LINE.fullmatch(_uncommented(line).strip())
        if match is None:
            raise TaskFileError(f"{where}: not a 'key: value' line: {line.strip()[:80]!r}")
        key, value = match.groups()
        if key not in known:
            raise TaskFileError(f"{where}: unknown key {key!r} (known: {', '.join(known)})")
        found[key] = value.strip().strip('"').strip("'")
    return found


def _uncommented(line: str) -> str:
    """A ``key: value`` line without its comment: ``#`` at the start or after a space, outside
    quotes, up to the end of the line (as YAML reads it)."""
    quote = None
    for index, char in enumerate(line):
        if quote is not None:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index]
    return line


def _time(value: str | None, key: str) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise TaskFileError(f"{key}: not an ISO date and time: {value!r}") from None


def _int(value: str | None, key: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise TaskFileError(f"{key}: not a whole number: {value!r}") from None


def _frontmatter(lines: list[str]) -> tuple[dict[str, str], list[str]]:
    """The ``---`` block's keys, and the lines after it."""
    if not lines or lines[0].strip() != "---":
        raise TaskFileError("the file must start with a '---' frontmatter block")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise TaskFileError("the frontmatter block is not closed with '---'") from None
    return _pairs(lines[1:end], HEAD_KEYS, "frontmatter"), lines[end + 1 :]


def _trailing_block(body: list[str]) -> tuple[dict[str, str], list[str]]:
    """The block after the last ``---`` when everything there is a known ``key: value``."""
    marks = [i for i, line in enumerate(body) if line.strip() == "---"]
    if marks:
        after = body[marks[-1] + 1 :]
        keys = {_LINE.fullmatch(line.strip()) for line in after if line.strip()}
        if after and all(m is not None and m.group(1) in TAIL_KEYS for m in keys) and keys:
            return _pairs(after, TAIL_KEYS, "trailing block"), body[: marks[-1]]
    return {}, body


def _sections(body: list[str]) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in body:
        heading = line.strip()[2:].strip() if line.startswith("# ") else None
        if heading in SECTIONS:
            if heading in sections:
                raise TaskFileError(f"the section '# {heading}' appears twice")
            current = heading
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
        elif line.strip():
            raise TaskFileError("text before the '# Goal' section")
    return {name: "\n".join(lines).strip() for name, lines in sections.items()}


def parse(text: str) -> TaskFile:
    head, body = _frontmatter(text.replace("\r\n", "\n").split("\n"))
    tail, body = _trailing_block(body)
    sections = _sections(body)
    goal = sections.get("Goal", "")
    if not goal:
        raise TaskFileError("the '# Goal' section is missing or empty")
    channel = head.get("channel") or "telegram"
    if channel != "telegram":
        raise TaskFileError(f"channel: only 'telegram' is supported, not {channel!r}")
    return TaskFile(
        goal=goal,
        constraints=sections.get("Constraints", ""),
        result=sections.get("Result", ""),
        question=sections.get("Question", ""),
        answer=sections.get("Answer", ""),
        created=_time(head.get("created"), "created"),
        channel=channel,
        chat_id=_int(head.get("chat_id"), "chat_id"),
        slug=head.get("slug") or None,
        model=head.get("model") or None,
        cwd=head.get("cwd") or None,
        engine=head.get("engine") or None,
        worktree=head.get("worktree") or None,
        mode=head.get("mode") or None,
        check=head.get("check") or None,
        max_usd=head.get("max_usd") or None,
        subtasks=head.get("subtasks") or None,
        client=head.get("client") or None,
        parent=_int(head.get("parent"), "parent"),
        completed=_time(tail.get("completed"), "completed"),
        duration_seconds=_int(tail.get("duration_seconds"), "duration_seconds"),
        status=tail.get("status") or None,
        check_status=tail.get("check_status") or None,
        check_round=_int(tail.get("check_round"), "check_round"),
        preamble=tail.get("preamble") or None,
    )


def render(tf: TaskFile) -> str:
    head = [
        ("created", tf.created.isoformat() if tf.created else None),
        ("channel", tf.channel),
        ("chat_id", tf.chat_id),
        ("slug", tf.slug),
        ("model", tf.model),
        ("cwd", tf.cwd),
        ("engine", tf.engine),
        ("worktree", tf.worktree),
        ("mode", tf.mode),
        ("check", tf.check),
        ("max_usd", tf.max_usd),
        ("subtasks", tf.subtasks),
        ("client", tf.client),
        ("parent", tf.parent),
    ]
    out = [
        "---",
        *(f"{k}: {v}" for k, v in head if v is not None),
        "---",
        "",
        "# Goal",
        "",
        tf.goal.strip(),
        "",
        "# Constraints",
        "",
    ]
    if tf.constraints.strip():
        out += [tf.constraints.strip(), ""]
    if tf.question.strip():
        out += ["# Question", "", tf.question.strip(), "", "# Answer", ""]
        out += [tf.answer.strip(), ""] if tf.answer.strip() else []
    out += ["# Result", ""]
    if tf.result.strip():
        out += [tf.result.strip(), ""]
    if tf.status is not None:
        tail = [
            ("completed", tf.completed.isoformat() if tf.completed else None),
            ("duration_seconds", tf.duration_seconds),
            ("status", tf.status),
            ("check_status", tf.check_status),
            ("check_round", tf.check_round),
            ("preamble", tf.preamble),
        ]
        out += ["---", *(f"{k}: {v}" for k, v in tail if v is not None)]
    return "\n".join(out) + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Write under a hidden temporary name, then rename: a reader never sees half a file. The
    file is readable by others (0644), like any file a program writes for people and tools."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".part")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o644)
        f.write(text)
    os.replace(tmp, path)


def drop(inbox: Path, tf: TaskFile, stem: str) -> Path:
    """Put a task file into an inbox under a fresh name; returns its path."""
    inbox.mkdir(parents=True, exist_ok=True)
    path = inbox / f"{stem}-{uuid.uuid4().hex[:8]}.md"
    write_atomic(path, render(tf))
    return path
