"""Every engine priced and capped: the model an engine names is matched to a preset; a model
with no known price is shown "unpriced" and counted at the dearest preset's price, never as
free. End to end: the real bot over the fake Bot API, the real codex binary against the
scripted Responses server, the local engine against the scripted Chat Completions server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.events import SessionStarted, Usage, UsageUpdated
from bot.models import TaskStatus, TurnSpec
from bot.money.presets import PresetCatalog
from bot.money.pricing import Meter, PriceList
from executors import registry
from tests.support.chat_mock import ChatMock
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot

LOCAL_PRESETS = """
[presets.dear-local]
engine = "local"
model = "big-model"
price_input = 3.0
price_output = 15.0

[presets.cheap-local]
engine = "local"
model = "small-model"
price_input = 0.1
price_output = 0.2

[presets.own-machine]
engine = "local"
model = "free-model"
price_input = 0

[presets.no-price]
engine = "local"
model = "gemma-3-270m"
"""
USAGE = Usage(input_tokens=1000, output_tokens=100)
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def chat() -> object:
    mock = ChatMock().start()
    yield mock
    mock.stop()


def catalog(tmp_path: Path, text: str = LOCAL_PRESETS) -> PresetCatalog:
    config = tmp_path / "detach.toml"
    config.write_text(text)
    return PresetCatalog.load(config, registry.builtin_presets())


def test_the_model_an_engine_names_is_priced_by_its_preset(tmp_path):
    presets = catalog(tmp_path)
    prices = PriceList(presets.all())
    codex = Meter(prices, "codex", None)  # no model= on the task: Codex names its config's
    codex.observe(SessionStarted("thread", "gpt-5.5"))
    codex.observe(UsageUpdated(USAGE))
    charge = codex.charge()
    assert (charge.cost_usd, charge.unpriced, charge.model) == (
        pytest.approx(0.00225),
        False,
        "gpt-5.5",
    )
    # Claude resolves an alias to a dated model; it reports its own cost, which wins
    claude = Meter(prices, "claude", presets.get("sonnet"))
    claude.named("claude-sonnet-4-5-20250929")
    assert claude.charge(USAGE).cost_usd == pytest.approx(0.0045)
    assert claude.charge(USAGE, reported_usd=0.01).cost_usd == 0.01
    assert Meter(prices, "claude", None).charge(USAGE).unpriced is True  # nothing named
    local = Meter(prices, "local", None)
    local.named("small-model")
    assert local.charge(USAGE).cost_usd == pytest.approx(0.00012)
    local.named("free-model")  # a preset that says 0 is free, not unpriced
    assert (local.charge(USAGE).cost_usd, local.charge(USAGE).unpriced) == (0.0, False)
    assert local.charge(Usage()).cost_usd is None  # no tokens: nothing to count


def test_an_unpriced_model_is_counted_at_the_dearest_preset_of_its_engine(tmp_path):
    prices = PriceList(catalog(tmp_path).all())
    for model in ("mystery-model", "gemma-3-270m"):  # no preset, or a preset naming no price
        meter = Meter(prices, "local", None)
        meter.named(model)
        charge = meter.charge(USAGE)
        assert charge.unpriced and charge.cost_usd == pytest.approx(0.0045)  # dear-local's
    assert prices.dearest("local").name == "dear-local"
    odd = Meter(prices, "codex", None)
    odd.named("o9-preview")
    assert odd.charge(USAGE).unpriced and odd.charge(USAGE).cost_usd == pytest.approx(0.00225)
    # an engine with no priced preset at all: the dearest of every engine (opus), never free
    bare = PriceList(PresetCatalog.load(None, registry.builtin_presets()).all())
    assert bare.dearest("local").name == "opus"
    meter = Meter(bare, "local", None)
    meter.named("anything")
    assert meter.charge(USAGE).cost_usd == pytest.approx(0.0225)


async def test_a_codex_task_is_priced_and_stops_at_the_daily_cap(
    tmp_path, claude_bin, codex_bin, agent_env, codex_env, openai, workdir
):
    """No model= on the task: Codex names the model of its config (gpt-5.5), which is priced
    by the built-in preset; the next task is refused because the first one's cost counted."""
    openai.script("MARK-CXCAP", [{"text": "Codex answered."}])
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, codex_bin=codex_bin, daily_cap_usd=0.0001
        )
        async with running_bot(settings, {**agent_env, **codex_env}) as app:
            await fake.user_message("/codex MARK-CXCAP hello", OWNER)
            card = await fake.wait_text(OWNER, "Codex answered.", timeout_s=60)
            assert "cost n/a" not in card.params["text"] and "unpriced" not in card.params["text"]
            turn = await app.store.tasks.last_turn(1)
            assert turn.model == "gpt-5.5" and not turn.unpriced
            # 100 input + 10 output tokens at $1.25 / $10 per million
            assert turn.cost_usd == pytest.approx(0.000225)
            assert await app.store.spend.day_total(OWNER, app.store.spend.today()) == (
                pytest.approx(0.000225)
            )
            await fake.user_message("/codex MARK-CXCAP again", OWNER)
            refused = await fake.wait_text(OWNER, "daily cap", timeout_s=30)
            assert "no new work starts today" in refused.params["text"]
            assert len(await app.store.tasks.list_for(None)) == 1
            await fake.user_message("/spend", OWNER)
            spend = await fake.wait_text(OWNER, "By engine", timeout_s=10)
            assert "codex: 100 in · 10 out" in spend.params["text"]


async def test_a_preset_only_local_task_runs_is_priced_and_counts_toward_the_cap(
    tmp_path, claude_bin, agent_env, workdir, chat
):
    """No DETACH_LOCAL_BASE_URL: the README's kind of preset (its own base_url) turns /local
    on, is its default endpoint, prices its turns, and the daily cap counts them."""
    config = tmp_path / "detach.toml"
    config.write_text(
        '[presets.paid-local]\nengine = "local"\nmodel = "mock-model"\n'
        f'base_url = "{chat.base_url}"\nprice_input = 1.0\nprice_output = 2.0\n'
    )
    chat.script("MARK-LCAP", [{"text": "local answered"}])
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, config=config, daily_cap_usd=0.001
        )
        assert settings.local_base_url is None
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/local MARK-LCAP hello", OWNER)
            card = await fake.wait_text(OWNER, "local answered", timeout_s=30)
            assert "not available" not in card.params["text"]
            turn = await app.store.tasks.last_turn(1)
            # 1000 input + 100 output tokens at $1 / $2 per million
            assert turn.cost_usd == pytest.approx(0.0012) and turn.model == "mock-model"
            assert "cost n/a" not in card.params["text"]
            await fake.user_message("/local MARK-LCAP again", OWNER)
            await fake.wait_text(OWNER, "daily cap", timeout_s=30)
            assert len(await app.store.tasks.list_for(None)) == 1
            await fake.user_message("/status", OWNER)
            status = await fake.wait_text(OWNER, "Engines", timeout_s=10)
            assert (
                f"local: {chat.base_url} (reachable, 1 model; paid-local)"
                in (status.params["text"])
            )
            await fake.user_message("/spend", OWNER)
            spend = await fake.wait_text(OWNER, "By engine", timeout_s=10)
            assert "local: 1.0k in · 100 out" in spend.params["text"]
    assert chat.requests_for("MARK-LCAP")[0]["model"] == "mock-model"


async def test_an_unpriced_model_says_so_once_and_counts_at_the_dearest_preset(
    tmp_path, claude_bin, agent_env, workdir, chat
):
    config = tmp_path / "detach.toml"
    config.write_text(LOCAL_PRESETS)
    chat.script("MARK-UNP", [{"text": "unpriced answer"}])
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data",
            fake,
            claude_bin,
            workdir,
            config=config,
            local_base_url=chat.base_url,
            local_model="mystery-model",
            daily_cap_usd=0.005,
        )
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/local MARK-UNP one", OWNER)
            first = await fake.wait_text(OWNER, "unpriced answer", timeout_s=30)
            text = first.params["text"]
            assert "unpriced (counted $" in text and "cost n/a" not in text
            assert "No price is known for <code>mystery-model</code>" in text
            turn = await app.store.tasks.last_turn(1)
            # counted at dear-local's price: 1000 x $3 + 100 x $15 per million
            assert turn.unpriced and turn.cost_usd == pytest.approx(0.0045)
            mark = len(fake.calls)
            await fake.user_message("/local MARK-UNP two", OWNER)
            second = await fake.wait_text(OWNER, "unpriced answer", timeout_s=30, after=mark)
            assert "unpriced (counted $" in second.params["text"]
            assert "No price is known" not in second.params["text"]  # said once
            await fake.user_message("/local MARK-UNP three", OWNER)
            await fake.wait_text(OWNER, "daily cap", timeout_s=30)  # $0.009 counted > $0.005
            assert len(await app.store.tasks.list_for(None)) == 2
            await fake.user_message("/spend", OWNER)
            spend = (await fake.wait_text(OWNER, "By engine", timeout_s=10)).params["text"]
            assert "local: 2.0k in · 200 out · unpriced mystery-model" in spend
            assert "unpriced mystery-model: counted $0.009" in spend
            assert "local: dear-local" in spend


async def test_a_failed_local_turn_still_counts_the_tokens_it_used(
    tmp_path, claude_bin, agent_env, workdir, chat
):
    config = tmp_path / "detach.toml"
    config.write_text(
        '[presets.paid-local]\nengine = "local"\nmodel = "mock-model"\n'
        "price_input = 1.0\nprice_output = 2.0\n"
    )
    chat.script(
        "MARK-LFAIL",
        [
            {"tools": [{"name": "list_files", "args": {}}]},
            {"error": 400, "message": "scripted refusal"},
        ],
    )
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data",
            fake,
            claude_bin,
            workdir,
            config=config,
            local_base_url=chat.base_url,
            local_model="mock-model",
        )
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/local mode=auto MARK-LFAIL go", OWNER)
            await fake.wait_text(OWNER, "failed", timeout_s=30)
            task = await app.store.tasks.get(1)
            assert task.status is TaskStatus.FAILED
            assert task.total_cost_usd == pytest.approx(0.0012)  # the first call's tokens
            assert await app.store.spend.day_total(OWNER, app.store.spend.today()) == (
                pytest.approx(0.0012)
            )


def test_the_readmes_local_presets_alone_configure_and_price_local(tmp_path):
    """The README's example presets are enough for /local: the first is its default endpoint
    (no DETACH_LOCAL_BASE_URL), on your own machine it is free, the hosted one is priced."""
    from executors.local import LocalExecutor, LocalSettings

    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```toml\n(\[presets\.gemma-local\].*?)```", readme, re.S)
    assert block is not None, "the README has no /local preset example"
    presets = catalog(tmp_path, block.group(1))
    engine = LocalExecutor(LocalSettings(), {}, (), None, presets.of_engine("local"))
    endpoint = engine.endpoint(TurnSpec(1, 1, "hi", Path(".")))
    assert (endpoint.base_url, endpoint.model) == ("http://127.0.0.1:8080/v1", "gemma-3-270m")
    prices = PriceList(presets.all())
    for model, cost in (("gemma-3-270m", 0.0), (presets.get("qwen-fireworks").model, 0.00063)):
        meter = Meter(prices, "local", None)
        meter.named(model)
        assert meter.charge(USAGE).cost_usd == pytest.approx(cost)
        assert not meter.charge(USAGE).unpriced
