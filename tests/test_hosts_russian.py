"""/hosts in the reader's language: each engine's probe line (version, login, sandbox) travels
from the host that probed it to the bot that shows it as words not yet in any language, through
the heartbeat's stored presence, and is said in the chat's language there. The real pinned
claude is probed (in a home with no login), the presence goes through its JSON row format."""

from __future__ import annotations

from datetime import timedelta

from bot.engines import make_engines
from bot.fleet.hosts import host_lines
from bot.models import Phrase
from bot.settings import Settings
from bot.store import EnginePresence, Presence, Runner
from bot.store.db import utcnow
from bot.telegram.texts import Texts
from handlers.hosts import hosts_text
from tests.test_russian_chat import english_words


def runner(presence: Presence) -> Runner:
    now = utcnow()
    return Runner(
        id="w1@alpha#1",
        name="w1",
        host="alpha",
        role="worker",
        engines=("claude",),
        started_at=now - timedelta(seconds=90),
        heartbeat_at=now,
        expires_at=now + timedelta(seconds=30),
        presence=presence,
    )


async def test_hosts_says_what_each_probe_found_in_the_readers_language(
    tmp_path, claude_bin, agent_env, workdir
):
    settings = Settings(_env_file=None, claude_bin=claude_bin, workdir=workdir)  # type: ignore[call-arg]
    no_login = {k: v for k, v in agent_env.items() if not k.startswith("ANTHROPIC_")}
    texts = Texts()
    for environ, english_says, russian_says in (
        (agent_env, "sandbox works", "песочница работает"),
        (no_login, "NO LOGIN FOUND: Claude Code is not logged in", "ВХОД НЕ НАЙДЕН"),
    ):
        engines = make_engines(settings, environ)
        await engines.probe()
        announced = Presence(engines.presence(), 2, 2, (("web", str(workdir)),))
        stored = Presence.decode(announced.encode())  # as another process reads the heartbeat
        assert stored == announced
        [host] = host_lines([runner(stored)], utcnow())
        russian, english = (hosts_text(texts, loc, [host]) for loc in ("ru", "en"))
        assert [w for w in english_words(russian) if w not in ("alpha", "web")] == [], russian
        assert russian_says in russian and english_says in english, (russian, english)


def test_a_line_from_an_older_or_newer_host_still_shows():
    """An older host stored its line as English text; a newer one may say words this bot has
    no message for: the text as it is, or the engine's name."""
    lines = (
        EnginePresence("claude", True, "claude 2.1 · sandbox works", True),
        EnginePresence("codex", True, Phrase("probe.from_the_future", {"x": 1}), True),
    )
    stored = Presence.decode(Presence(lines, slots=1, free=1).encode())
    [host] = host_lines([runner(stored)], utcnow())
    shown = hosts_text(Texts(), "ru", [host])
    assert "claude 2.1 · sandbox works · codex" in shown
