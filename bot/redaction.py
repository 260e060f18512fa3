"""Secret values out of agent-made text: the one redactor every boundary applies (the store, as
text is written and read back; the outbox, as it is queued for Telegram; the log's handlers).

A value is replaced by ``REDACTED`` wherever it appears, also escaped (as a message's HTML shows
it, quotes escaped or not; inside a JSON string) and cut short by a shortened line: its first or
last ``MIN_SECRET_CHARS`` or more characters next to an ellipsis, or at the very end or start of
the text."""

from __future__ import annotations

import contextlib
import html
import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 8  # shorter values would blot out ordinary words
CUT = "…"  # what ``bot.telegram.render.shorten`` puts where it cut

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Redactor:
    """``secrets``: the values to hide, longest first (a secret holding another goes whole)."""

    secrets: tuple[str, ...] = ()

    @classmethod
    def of(cls, values: Iterable[Any]) -> Redactor:
        """The values worth redacting (strings of ``MIN_SECRET_CHARS`` or more), and each as
        HTML shows it (quotes kept or escaped) and as a JSON string holds it."""
        kept = {v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET_CHARS}
        kept |= {form for v in kept for form in _forms(v)}
        return cls(tuple(sorted(kept, key=len, reverse=True)))

    def __call__(self, value: T) -> T:
        """``value`` (text, or lists and mappings of it, as an entry's body) redacted."""
        if not self.secrets:
            return value
        return self._redacted(value)  # type: ignore[no-any-return]

    def document(self, data: bytes) -> bytes:
        """A file's bytes redacted when they are UTF-8 text (what the bot sends: answers,
        transcripts, checks' output); other bytes as they are."""
        if not self.secrets:
            return data
        try:
            text = data.decode()
        except UnicodeDecodeError:
            return data
        return self._text(text).encode()

    def _redacted(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, dict):
            return {k: self._redacted(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._redacted(v) for v in value]
        return value

    def _text(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        for secret in self.secrets:
            if secret[:MIN_SECRET_CHARS] in text or secret[-MIN_SECRET_CHARS:] in text:
                text = _cut_short(text, secret)
        return text


def _forms(secret: str) -> tuple[str, ...]:
    """``secret`` as text that escaped it shows it: HTML without and with its quotes escaped
    (a message, a patch sent inline), inside a JSON string (``"`` as ``\\"``), and such a JSON
    string escaped as HTML (an approval card's tool input)."""
    in_json = (json.dumps(secret, ensure_ascii=False)[1:-1], json.dumps(secret)[1:-1])
    return (
        html.escape(secret, quote=False),
        html.escape(secret),
        *in_json,
        *(html.escape(j, quote=q) for j in in_json for q in (False, True)),
    )


def _cut_short(text: str, secret: str) -> str:
    """``text`` without the part of ``secret`` a cut left: a head before an ellipsis or at
    the end, a tail after an ellipsis or at the start."""
    for size in range(len(secret) - 1, MIN_SECRET_CHARS - 1, -1):
        head, tail = secret[:size], secret[-size:]
        text = text.replace(head + CUT, REDACTED + CUT).replace(CUT + tail, CUT + REDACTED)
        if text.endswith(head):
            text = text[:-size] + REDACTED
        if text.startswith(tail):
            text = REDACTED + text[size:]
    return text


NOTHING = Redactor()  # redacts nothing: a store opened without the bot's settings (tests, tools)


class LogRedaction(logging.Filter):
    """A log handler's filter: the record's message and traceback, redacted (an engine logs a
    line of unexpected shape, which may name a command)."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self._redact = redact

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError, KeyError):  # malformed: the handler reports it
            return True
        record.msg, record.args = self._redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self._redact(record.exc_text)
        return True


@contextlib.contextmanager
def redacted_logs(redact: Redactor, logger: logging.Logger | None = None) -> Iterator[None]:
    """While open, every handler of ``logger`` (the root: where every module's lines end)
    writes its records redacted."""
    if not redact.secrets:
        yield
        return
    handlers, redacting = (logger or logging.getLogger()).handlers[:], LogRedaction(redact)
    for handler in handlers:
        handler.addFilter(redacting)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(redacting)
