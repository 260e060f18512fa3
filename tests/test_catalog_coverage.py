"""Every message key the code names is in both catalogs, and no Russian message is the English
one: a key missing from a catalog shows another language in that chat (or fails), and a copied
English message reads as English there. Keys are read from the code itself (every string
constant shaped like a key of a catalog's families, and the fixed head of an f-string key)."""

from __future__ import annotations

import ast
import re
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from babel.messages.pofile import read_po

from bot.models import Phrase, TaskStatus, WaitState
from bot.telegram.texts import Texts, catalog_files

ROOT = Path(__file__).resolve().parents[1]
CODE = ("bot", "handlers", "executors")
KEY = re.compile(r"[a-z][a-z0-9_]*(\.[a-z0-9_]+)+")
NOT_KEYS = {  # strings shaped like keys that are something else
    "task.before_commit": "a failpoint's name",
    "tasks.id": "a table's column",
    "voice.ogg": "a file's name",
}
# said to the agent, not to the chat: the models read English
TO_THE_AGENT = {
    "task.interrupted_preamble",
    "approval.deny_message",
    "approval.timeout_message",
    "approval.question_timeout",
    "money.continue_prompt",
}
# words a Russian message may carry in Latin letters: names, and what the owner types
LATIN_WORDS = {"Detach", "Claude", "Code", "Codex", "Telegram", "git", "PID", "bubblewrap", "local"}


def messages(locale: str) -> dict[str, str]:
    """Each key's text (a plural's first form)."""
    with catalog_files()[locale].open("rb") as f:
        return {
            (m.id if isinstance(m.id, str) else m.id[0]): (
                m.string if isinstance(m.string, str) else m.string[0]
            )
            for m in read_po(f)
            if m.id
        }


def keys_in_code(families: set[str]) -> tuple[dict[str, str], dict[str, str]]:
    """The keys the code names, and the fixed heads of the keys it builds (``f"stall.{c}"``),
    each with where it is first named."""
    keys: dict[str, str] = {}
    heads: dict[str, str] = {}

    def family(value: object) -> bool:
        return isinstance(value, str) and "." in value and value.split(".")[0] in families

    for path in sorted(p for top in CODE for p in (ROOT / top).rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        where = str(path.relative_to(ROOT))
        built = [
            node.values[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.JoinedStr) and isinstance(node.values[0], ast.Constant)
        ]
        for head in built:
            if family(head.value):
                heads.setdefault(head.value, f"{where}:{head.lineno}")
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or any(node is head for head in built):
                continue
            if family(node.value) and KEY.fullmatch(node.value) and node.value not in NOT_KEYS:
                keys.setdefault(node.value, f"{where}:{node.lineno}")
    return keys, heads


ENGLISH, RUSSIAN = messages("en"), messages("ru")
FAMILIES = {key.split(".")[0] for key in ENGLISH}
KEYS, HEADS = keys_in_code(FAMILIES)


def test_the_scan_finds_the_keys_it_should():
    """The scan itself sees a plain key, a refusal's key and a built one."""
    assert {"task.sandbox_unavailable", "probe.sandbox_works", "schedule.bad_at"} <= set(KEYS)
    assert {"stall.", "status."} <= set(HEADS)
    assert len(KEYS) > 300


@pytest.mark.parametrize("locale", ["en", "ru"])
def test_every_key_the_code_names_is_in_the_catalog(locale):
    catalog = messages(locale)
    assert {key: where for key, where in KEYS.items() if key not in catalog} == {}
    assert {
        head: where for head, where in HEADS.items() if not any(map_starts(catalog, head))
    } == {}
    for family, values in (("status", TaskStatus), ("wait", WaitState)):
        assert [v.value for v in values if f"{family}.{v.value}" not in catalog] == []


def map_starts(catalog: dict[str, str], head: str):
    return (key.startswith(head) for key in catalog)


def latin_words(text: str) -> list[str]:
    """The words of ``text`` in Latin letters outside placeholders, code, commands, settings'
    names and links (what a Russian message may well carry)."""
    text = re.sub(r"\{[^}]*\}|<code>.*?</code>|<pre>.*?</pre>|<[^>]+>", " ", text, flags=re.S)
    text = re.sub(r"https?://\S+|/[a-z_]+|\b[A-Z][A-Z0-9_]{2,}\b|`[^`]*`", " ", text)
    return [w for w in re.findall(r"[A-Za-z][A-Za-z']+", text) if w not in LATIN_WORDS]


def test_no_russian_message_is_left_in_english():
    copied = {
        key: text
        for key, text in RUSSIAN.items()
        if key not in TO_THE_AGENT
        and (not text or (text == ENGLISH.get(key) and latin_words(text)))
    }
    assert copied == {}


def test_a_phrase_nests_in_the_readers_language():
    texts = Texts()

    line = Phrase(
        "probe.local",
        {
            "endpoints": (
                Phrase(
                    "probe.endpoint",
                    {"url": "http://x", "answer": Phrase("probe.reachable", count=3)},
                ),
            ),
            "sandbox": Phrase("probe.sandbox_works"),
        },
    )
    assert texts.say("en", line) == "local: http://x (reachable, 3 models), sandbox works"
    assert texts.say("ru", line) == "local: http://x (доступен, 3 модели), песочница работает"
    assert texts.say("ru", "<b>") == "&lt;b&gt;"


def test_a_moment_reads_in_the_chats_language():
    """Schedules' next runs: Babel's (CLDR) words for days and months, in the schedule's zone."""
    at = datetime(2026, 12, 6, 17, 30, tzinfo=UTC).astimezone(ZoneInfo("Europe/Berlin"))
    assert Texts().moment("en", at) == "Sun 6 Dec 18:30"
    assert Texts().moment("ru", at) == "вс 6 дек. 18:30"
