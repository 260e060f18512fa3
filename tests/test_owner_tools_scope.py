"""DETACH_OWNER_TOOLS through the whole bot: which tasks' agents get `detach mcp --task` (the
owner tools, `notify` and `ask_owner`) and a preamble naming them, as the engine receives its
TurnSpec. An interactive task without them has no MCP server, so it may take a warm agent."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.events import SessionStarted, TurnFinished, Usage
from bot.models import OwnerTools, TurnSpec
from bot.settings import Settings
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import TOKEN, FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot

SCRIPT = (SessionStarted("s1", "m"), TurnFinished(False, "the answer", "s1", 0.01, Usage(1, 1)))
SERVED = {  # the setting -> (a /claude task has them, a /detach task has them)
    "walkaway": (False, True),
    "all": (True, True),
    "no": (False, False),
}


@pytest.mark.parametrize("setting", sorted(SERVED))
async def test_the_owner_tools_reach_the_tasks_the_setting_names(
    tmp_path: Path, setting: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    engine = FakeEngine(SCRIPT)
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", work, owner_tools=setting)
        async with running_bot(settings, {}, {"claude": engine}):
            await fake.wait_call("setMyCommands")
            for n, command in enumerate(("/claude hello", "/detach hello")):
                mark = len(fake.calls)
                await fake.user_message(command, OWNER)
                await fake.wait_text(OWNER, "the answer", 30, after=mark)
                assert len(engine.specs) == n + 1
    session, walkaway = engine.specs
    assert (served(session), served(walkaway)) == SERVED[setting]


def served(spec: TurnSpec) -> bool:
    """Whether the turn has the owner tools: the server, its allowed tools and the preamble
    agree (the preamble names exactly the tools the task has)."""
    preamble = spec.append_system_prompt or ""
    named = "`notify` tool" in preamble, "`ask_owner` tool" in preamble
    allowed = {t for t in spec.allowed_tools if t.startswith("mcp__detach")}
    if not spec.mcp_servers:
        assert named == (False, False) and not allowed, spec
        return False
    (server,) = spec.mcp_servers
    assert server.name == "detach" and server.args[-2:] == ("--task", str(spec.task_id))
    assert named == (True, True), preamble
    assert allowed == {"mcp__detach__notify", "mcp__detach__ask_owner"}
    return True


@pytest.mark.parametrize(
    ("given", "meant"),
    [("yes", "all"), ("true", "all"), ("false", "no"), ("No", "no"), ("walkaway", "walkaway")],
)
def test_the_old_boolean_values_still_parse(tmp_path: Path, given: str, meant: str) -> None:
    settings = make_settings(tmp_path, FakeTelegram(), "claude", tmp_path, owner_tools=given)
    assert settings.owner_tools is OwnerTools(meant)


def test_walkaway_is_the_default(tmp_path: Path) -> None:
    """Walk-away tasks have them by default: their servers start from the MCP zygote in a
    fraction of a second (tests/test_mcp_zygote.py), and a failing check's second round
    resumes its session (tests/test_walkaway_e2e.py)."""
    settings = Settings(_env_file=None, bot_token=TOKEN, data_dir=tmp_path)  # type: ignore[call-arg]
    assert settings.owner_tools is OwnerTools.WALKAWAY
