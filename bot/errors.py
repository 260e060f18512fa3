"""The one exception tree of Detach.

    DetachError
    ├── ConfigError            settings are missing or invalid (no bot token, no agent CLI)
    │   └── WeightsRefused     a model file is not the one pinned by content (path, expected, found)
    ├── UserInputError         bad input from a person; carries a locale key and its arguments
    │   ├── TaskNotFound       unknown id, or a task of somebody else (never tell which)
    │   ├── TaskStateError     the task cannot do that now (e.g. archive a running task)
    │   │   └── TaskHeld       the task is held at the terminal (task_id): Take back first
    │   └── TranscriptionFailed  a voice note could not be turned into words (key, reason)
    ├── ToolRefused            an MCP tool call `detach mcp` refuses; the message is for a model
    ├── FileRefused            a file an agent could have planted, not read (path, why, limit)
    ├── AlreadyRunning         another process holds this database and role (what, holder)
    ├── StoreError             the database failed or holds something unexpected
    │   └── TurnTaken          a turn this runner ran was taken over (its lease lapsed)
    └── AgentError             an agent CLI could not be run or broke its protocol
        ├── AgentNotInstalled  the binary is missing or does not answer --version
        ├── AgentCrashed       the CLI ended without a result (exit_code, stderr_tail)
        │   └── StreamBounded  a model's stream passed a bound (bound, limit, part, source)
        ├── SessionNotFound    the session to resume is not on this machine (session_id)
        └── PreflightFailed    the preflight's model gave no usable verdict (reason)

Foreign errors are translated where they enter (``raise ... from exc``); callers branch on the
fields, not on message text.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from bot.models import Phrase


class DetachError(Exception):
    """Root of every error Detach raises on purpose."""


class ConfigError(DetachError):
    """Settings are missing or invalid; ``words``: the reason in any language (a Phrase, said
    in the terminal's by the shell), when it was raised with one instead of an English text."""

    def __init__(self, message: str | Phrase, words: Phrase | None = None) -> None:
        super().__init__(message if isinstance(message, str) else message.key)
        self.words: Phrase | str = words or message


class WeightsRefused(ConfigError):
    """A model file whose SHA-256 (``found``) is not the pinned one (``expected``; "" when
    none is pinned for it): never loaded."""

    def __init__(self, path: str, expected: str, found: str) -> None:
        super().__init__(f"{path}: SHA-256 {found or '?'}, pinned {expected or 'none'}")
        self.path = path
        self.expected = expected
        self.found = found


class UserInputError(DetachError):
    """Input a person sent that we refuse; ``key`` names the localized reply."""

    def __init__(self, key: str, **params: Any) -> None:
        super().__init__(key)
        self.key = key
        self.params = {k: quote(v) if isinstance(v, str) else v for k, v in params.items()}


QUOTE_CHARS = 200


def quote(text: str, limit: int = QUOTE_CHARS) -> str:
    """What a person typed, as a reply may quote it: bounded (a reply must fit Telegram's 4096
    characters whatever was typed) and without lone surrogates (they cannot be sent)."""
    text = clean(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clean(text: str) -> str:
    """``text`` with lone surrogates (which no UTF-8 store or API accepts) replaced."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


class TaskNotFound(UserInputError):
    def __init__(self, task_ref: str) -> None:
        super().__init__("error.task_not_found", ref=task_ref)


class TaskStateError(UserInputError):
    pass


class TranscriptionFailed(UserInputError):
    """A voice note that gave no words: unreadable, no recognizer, the transcription server
    timed out or answered nonsense; ``key`` says which (a localized line), ``reason`` the
    detail when there is one."""


class TaskHeld(TaskStateError):
    """A turn for a task held at the terminal (``task_id``) is refused; the reply offers
    Take back."""

    def __init__(
        self, task_id: int, label: str, since: str, parked: int | None = None, hold: int = 0
    ) -> None:
        super().__init__(
            "terminal.parked" if parked else "terminal.refused", label=label, since=since
        )
        self.task_id = task_id
        self.parked = parked  # the refused reply kept for "Take back and send it" (message id)
        self.hold = hold  # which hold refused it (its start, Unix ms): Take back ends only it


class ToolRefused(DetachError):
    """A tool call of `detach mcp` that cannot be done; the message says why, in English, for
    the calling model (not a person's localized reply)."""


class Unreadable(StrEnum):
    """Why a file was not read (``FileRefused.why``; ``file.<why>`` names its localized line)."""

    MISSING = "missing"
    LINK = "link"  # a symbolic link: never followed
    SPECIAL = "special"  # a FIFO, a device, a socket, a directory: never waited on
    TOO_LARGE = "too_large"
    UNREADABLE = "unreadable"  # permissions, a loop of links, an I/O error (``detail``)


class FileRefused(DetachError):
    """The file at ``path`` was not read: ``why``; ``limit`` the cap in bytes it passed."""

    def __init__(self, path: str, why: Unreadable, limit: int = 0, detail: str = "") -> None:
        said = {
            Unreadable.MISSING: "is missing",
            Unreadable.LINK: "is a symbolic link",
            Unreadable.SPECIAL: "is not a regular file",
            Unreadable.TOO_LARGE: f"is larger than {limit // 1024} KiB",
            Unreadable.UNREADABLE: f"cannot be read ({detail})",
        }[why]
        super().__init__(f"{path} {said}: not read")
        self.path = path
        self.why = why
        self.limit = limit
        self.detail = detail

    @property
    def key(self) -> str:
        return f"file.{self.why}"

    @property
    def params(self) -> dict[str, Any]:
        return {"path": quote(self.path), "kib": self.limit // 1024, "detail": self.detail}


class AlreadyRunning(DetachError):
    """Another live process is this database's bot (or this worker): ``what`` it is, and
    ``holder`` (its pid, host and since when) in words."""

    def __init__(self, what: str, holder: str, words: Phrase | None = None) -> None:
        super().__init__(f"{what} is already running: {holder}; stop it first")
        self.what = what
        self.holder = holder
        self.words = words  # the same in any language (the shell says it in the terminal's)


class StoreError(DetachError):
    pass


class TurnTaken(StoreError):
    """The turn is no longer this runner's: another process took it over when this one's
    lease lapsed; nothing about it may be written any more (``turn_id``)."""

    def __init__(self, turn_id: int) -> None:
        super().__init__(f"turn {turn_id} was taken over")
        self.turn_id = turn_id


class AgentError(DetachError):
    pass


class AgentNotInstalled(AgentError):
    """An engine that cannot run here; ``off``: one that is simply not configured (said so)."""

    def __init__(self, engine: str, binary: str | None, off: Phrase | None = None) -> None:
        super().__init__(
            f"{engine} is off" if off else f"{engine} CLI not found: {binary or '(not on PATH)'}"
        )
        self.engine = engine
        self.binary = binary
        self.off = off


class AgentCrashed(AgentError):
    """``reason`` in English (the log, and the chat when it is the engine's own words);
    ``said``: the same for the chat, in its language."""

    def __init__(
        self, reason: str, exit_code: int | None, stderr_tail: str, said: Phrase | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.said = said
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail


class Bound(StrEnum):
    """What a stream passed (``StreamBounded.bound``)."""

    PIECES = "pieces"  # stream chunks of one answer, or of one part of it
    SECONDS = "seconds"  # the time one answer may stream
    LINE_BYTES = "line_bytes"  # one line of a CLI's output


class StreamBounded(AgentCrashed):
    """A model's answer (or an agent CLI's output) passed ``bound``: more than ``limit`` of it
    in ``part`` (the text, a tool call's arguments, the whole answer, a line) from ``source``
    (an endpoint's URL, a CLI). The turn ends here; nothing past the bound was read."""

    def __init__(
        self, bound: Bound, limit: float, part: str, source: str, said: Phrase | None = None
    ) -> None:
        """``said``: the same for the chat (``agent.bounded.*``)."""
        words = {
            Bound.PIECES: f"streamed {part} in more than {limit:g} pieces",
            Bound.SECONDS: f"streamed {part} for more than {limit:g} s",
            Bound.LINE_BYTES: f"printed {part} longer than {limit / 2**20:g} MiB",
        }[bound]
        super().__init__(f"{source} {words}; the turn stopped there", None, "", said)
        self.bound = bound
        self.limit = limit
        self.part = part
        self.source = source


class SessionNotFound(AgentError):
    """The CLI has no conversation ``session_id`` here: it was never saved (its process was
    killed at once) or it lives on the machine that ran it. The turn can go on in a new
    session told what happened so far."""

    def __init__(self, engine: str, session_id: str) -> None:
        super().__init__(f"{engine} has no session {session_id} on this machine")
        self.engine = engine
        self.session_id = session_id


class PreflightFailed(AgentError):
    """The preflight call failed, timed out or answered something that is not a verdict; the
    task starts as it would have without a preflight."""

    def __init__(self, reason: str, said: Phrase | None = None) -> None:
        """``reason`` in English (the log); ``said``: why, for the chat (by default: the
        model's answer was not a verdict)."""
        super().__init__(reason)
        self.reason = reason
        self.said = said or Phrase("preflight.why.no_verdict")
