"""Pure formatting helpers: labels, durations, money, and splitting long answers."""

from __future__ import annotations

import html
import math
import re
from datetime import datetime

from chatgpt_md_converter import split_html_for_telegram, telegram_format

from bot.models import TaskStatus

TELEGRAM_LIMIT = 4096
CHUNK_CHARS = 3500  # room for the header line and HTML escaping of the first chunk
MAX_CHUNKS = 4  # more than this goes out as a .md document

STATUS_ICONS = {
    TaskStatus.QUEUED: "🕓",
    TaskStatus.RUNNING: "⏳",
    TaskStatus.DONE: "✅",
    TaskStatus.FAILED: "❌",
    TaskStatus.CANCELLED: "⏹",
    TaskStatus.TIMED_OUT: "⏱",
    TaskStatus.BUDGET_EXCEEDED: "💸",
    TaskStatus.INTERRUPTED: "⚠️",
    TaskStatus.CHECK_FAILED: "🧪",
    TaskStatus.WAITING_FOR_LIMIT: "⏸",
    TaskStatus.ARCHIVED: "🗄",
}
WAIT_ICON = "⏸"  # a task that waits on its owner or its engine (bot.models.WaitState)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def age(then: datetime, now: datetime) -> str:
    return duration((now - then).total_seconds())


def money(cost_usd: float | None) -> str | None:
    if cost_usd is None:
        return None
    return usd(cost_usd)


def tokens(count: int) -> str:
    """A token count at a glance: 950, 12.3k, 4.5M."""
    if count < 1000:
        return str(count)
    if count < 1_000_000:
        return f"{count / 1000:.1f}k"
    return f"{count / 1_000_000:.1f}M"


def usd(amount: float) -> str:
    """Dollars, the one way every message writes them: two decimals from $1 (12.50), else
    two significant digits with at least two decimals (0.50, 0.03, 0.012, 0.00023), so a
    small budget never reads as 0.00 and no amount carries noise digits."""
    if amount >= 0.995 or amount <= 0:
        return f"{amount:.2f}"
    decimals = max(2, 1 - math.floor(math.log10(amount)))
    text = f"{amount:.{decimals}f}".rstrip("0")
    return text if len(text.split(".")[1]) >= 2 else f"{amount:.2f}"


def split_text(text: str, limit: int = CHUNK_CHARS) -> list[str]:
    """Split on paragraph, then line, then word boundaries; every chunk is at most ``limit``."""
    chunks: list[str] = []
    rest = text.strip()
    while len(rest) > limit:
        cut = _cut_point(rest, limit)
        chunks.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip("\n")
    if rest:
        chunks.append(rest)
    return chunks


def _cut_point(text: str, limit: int) -> int:
    for separator in ("\n\n", "\n", " "):
        index = text.rfind(separator, limit // 2, limit)
        if index > 0:
            return index + len(separator)
    return limit


HTML_CHUNK_CHARS = 3800  # leaves room for the card's header line on the first chunk
_TAG = re.compile(r"<[^>]+>")


def markdown_chunks(markdown: str, limit: int = HTML_CHUNK_CHARS) -> list[str]:
    """Agent Markdown -> Telegram HTML chunks (tags balanced, code blocks closed and reopened
    across chunks) by a maintained converter, not hand-rolled escaping."""
    rendered = telegram_format(markdown)
    return [c for c in split_html_for_telegram(rendered, max_length=limit) if c.strip()]


def plain(html_text: str) -> str:
    """The text HTML shows (tags stripped, entities decoded): for when Telegram rejects a
    chunk's HTML, and wherever a text goes somewhere that is not HTML."""
    return html.unescape(_TAG.sub("", html_text))


def shorten(text: str, limit: int, *, one_line: bool = False) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis; ``one_line`` folds whitespace."""
    if one_line:
        text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
