"""The owner's capabilities preamble, end to end: the real bot against the fake Bot API, the
real claude and codex CLIs against the scripted models. DETACH_PREAMBLE_FILE's text reaches the
model's first request before Detach's own walk-away preamble, a preset's ``preamble`` wins over
it, a file that cannot be read leaves Detach's alone, and ``/export`` names the file each used."""

from __future__ import annotations

from pathlib import Path

from bot.tasks.taskfile import parse
from bot.turns.outcome import DETACH_PREAMBLE
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot

OWN = "CAPS-OWN: you may use the staging database at db.internal; deploy with `make ship`."
PRESET = "CAPS-PRESET: this preset has the GPU box; run training there."
DETACH = DETACH_PREAMBLE[:60]


async def exported(fake: FakeTelegram, task_id: int):
    mark = len(fake.calls)
    await fake.user_message(f"/export {task_id}", OWNER)
    sent = await fake.wait_call("sendDocument", after=mark)
    return parse(fake.files[sent.result["document"]["file_id"]].decode())


async def test_the_owners_preamble_reaches_the_model_before_detachs_own(
    tmp_path: Path, claude_bin, agent_env, anthropic, workdir
):
    own = tmp_path / "caps.md"
    own.write_text(OWN + "\n")
    config = tmp_path / "conf"
    config.mkdir()
    (config / "gpu.md").write_text(PRESET)
    (config / "presets.toml").write_text(
        '[presets.gpu]\nengine = "claude"\nmodel = "sonnet"\npreamble = "gpu.md"\n'
        '[presets.lost]\nengine = "claude"\nmodel = "sonnet"\npreamble = "gone.md"\n'
    )
    for marker in ("MARK-OWN", "MARK-GPU", "MARK-LOST"):
        anthropic.script(marker, [{"text": f"{marker} done"}])
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data",
            fake,
            claude_bin,
            workdir,
            preamble_file=own,
            config=config / "presets.toml",
        )
        async with running_bot(settings, agent_env):
            await fake.user_message("/detach mode=ask MARK-OWN tidy up", OWNER)
            await fake.wait_text(OWNER, "MARK-OWN done", timeout_s=90)
            system = anthropic.requests_for("MARK-OWN")[0]["system"]
            assert OWN.split(":")[0] in system and DETACH in system
            assert system.index("CAPS-OWN") < system.index(DETACH)
            told = await exported(fake, 1)
            assert told.preamble == f"{own} ({len(OWN)} chars)"

            await fake.user_message("/detach mode=ask model=gpu MARK-GPU train it", OWNER)
            await fake.wait_text(OWNER, "MARK-GPU done", timeout_s=90)
            system = anthropic.requests_for("MARK-GPU")[0]["system"]
            assert "CAPS-PRESET" in system and "CAPS-OWN" not in system
            assert system.index("CAPS-PRESET") < system.index(DETACH)
            assert (
                await exported(fake, 2)
            ).preamble == f"{config / 'gpu.md'} ({len(PRESET)} chars)"

            await fake.user_message("/detach mode=ask model=lost MARK-LOST go on", OWNER)
            await fake.wait_text(OWNER, "MARK-LOST done", timeout_s=90)
            system = anthropic.requests_for("MARK-LOST")[0]["system"]
            assert "CAPS-" not in system and DETACH in system
            assert (await exported(fake, 3)).preamble == f"{config / 'gone.md'} (not read: missing)"


async def test_codex_is_told_the_owners_preamble_before_detachs_own_and_the_prompt(
    tmp_path: Path, claude_bin, codex_bin, agent_env, codex_env, openai, workdir
):
    own = tmp_path / "caps.md"
    own.write_text(OWN)
    openai.script("MARK-CXPRE", [{"text": "Codex done."}])
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, codex_bin=codex_bin, preamble_file=own
        )
        async with running_bot(settings, {**agent_env, **codex_env}):
            await fake.user_message("/detach engine=codex mode=ask MARK-CXPRE go", OWNER)
            await fake.wait_text(OWNER, "Codex done.", timeout_s=90)
            said = openai.requests_for("MARK-CXPRE")[0]["user_text"]
            assert said.index("CAPS-OWN") < said.index(DETACH) < said.index("MARK-CXPRE")
            assert (await exported(fake, 1)).preamble == f"{own} ({len(OWN)} chars)"
