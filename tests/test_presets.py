"""Preset loading and the fuzzy resolution table."""

from __future__ import annotations

import pytest

from bot.errors import ConfigError
from bot.events import Usage
from bot.money.presets import PresetCatalog
from executors import registry


@pytest.fixture
def catalog(tmp_path) -> PresetCatalog:
    path = tmp_path / "detach.toml"
    path.write_text("""
[presets.fast]
engine = "claude"
model = "haiku"
args = ["--effort", "low"]
price_input = 1.0
price_output = 5.0

[presets.sonnet]          # overrides the built-in
engine = "claude"
model = "claude-sonnet-4-5"
price_input = 3.5
""")
    return PresetCatalog.load(path, registry.builtin_presets())


@pytest.mark.parametrize(
    ("typed", "winner"),
    [
        ("sonnet", "sonnet"),
        ("SONNET", "sonnet"),
        ("Opus", "opus"),  # exact, any case
        ("sonet", "sonnet"),
        ("hiaku", "haiku"),
        ("opsu", "opus"),  # typos
        ("son", "sonnet"),
        ("fa", "fast"),
        ("gpt-6", "gpt-6.2-sol"),  # unique prefixes
    ],
)
def test_clear_winners(catalog, typed, winner):
    assert catalog.resolve(typed).winner.name == winner


def test_near_ties_offer_candidates(catalog):
    resolution = catalog.resolve("gpt")
    assert resolution.winner is None
    assert {p.name for p in resolution.candidates} == {"gpt-5.5", "gpt-6.2-sol"}


def test_unknown_names_the_closest(catalog):
    resolution = catalog.resolve("llama-70b")
    assert resolution.winner is None and resolution.candidates == ()
    assert len(resolution.closest) == 3


def test_presets_from_toml_over_builtins(catalog):
    fast = catalog.get("fast")
    assert fast.engine == "claude" and fast.args == ("--effort", "low")
    assert catalog.get("sonnet").model == "claude-sonnet-4-5"
    assert catalog.get("opus").model == "opus"  # built-ins stay
    assert fast.cost_usd(Usage(input_tokens=1_000_000, output_tokens=200_000)) == 2.0


def test_a_broken_config_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[presets.x]\nmodel = "m"\n')
    with pytest.raises(ConfigError, match="preset 'x'"):
        PresetCatalog.load(path, registry.builtin_presets())
