"""Preset loading and the fuzzy resolution table."""

from __future__ import annotations

import os

import pytest

from bot import cli
from bot.errors import ConfigError
from bot.events import Usage
from bot.models import Preset
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
    with pytest.raises(ConfigError, match=r"\[presets\.x\]: 'engine' is missing"):
        PresetCatalog.load(path, registry.builtin_presets())


def problems(tmp_path, text: str) -> list[str]:
    """The lines of the error a DETACH_CONFIG holding ``text`` gives."""
    path = tmp_path / "detach.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        PresetCatalog.load(path, registry.builtin_presets())
    lines = str(caught.value).splitlines()
    assert all(line.startswith(f"DETACH_CONFIG {path}") for line in lines), lines
    return lines


def test_an_unknown_key_names_the_file_the_preset_and_the_key(tmp_path):
    lines = problems(
        tmp_path, '[presets.fast]\nengine = "claude"\nmodel = "haiku"\nprice_imput = 1.0\n'
    )
    assert len(lines) == 1
    assert "[presets.fast]: unknown key 'price_imput'" in lines[0]
    assert "price_input" in lines[0]  # the keys it knows, to spot the typo


def test_an_unknown_table_is_not_ignored(tmp_path):
    (line,) = problems(tmp_path, '[preset.fast]\nengine = "claude"\nmodel = "haiku"\n')
    assert line.endswith("unknown key 'preset' (known: presets)")


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ('price_input = "1.5"', "'price_input': input should be a valid number, not '1.5'"),
        ('args = "--effort low"', "'args': input should be a valid list, not '--effort low'"),
        ("context_window = 8192.5", "'context_window'"),
        ("price_output = -1", "'price_output'"),
        ("engine = 5", "'engine': input should be a valid string, not 5"),
    ],
)
def test_a_wrong_type_names_the_preset_and_the_key(tmp_path, entry, says):
    base = {"engine": '"claude"', "model": '"haiku"'}
    key = entry.split(" = ")[0]
    body = "".join(f"{k} = {v}\n" for k, v in base.items() if k != key)
    lines = problems(
        tmp_path,
        f'[presets.other]\nengine = "codex"\nmodel = "m"\n\n[presets.fast]\n{body}{entry}\n',
    )
    assert len(lines) == 1 and "[presets.fast]: " in lines[0] and says in lines[0], lines


def test_every_mistake_is_a_line(tmp_path):
    lines = problems(
        tmp_path,
        '[presets.a]\nengine = "claude"\n\n[presets.b]\nengine = "claude"\nmodel = 1\nx = 2\n',
    )
    assert len(lines) == 3, lines


def test_a_valid_file_with_every_key(tmp_path):
    path = tmp_path / "detach.toml"
    path.write_text(
        """
[presets.far]
engine = "local"
model = "qwen"
args = ["--x"]
price_input = 1
price_output = 2.5
price_cache_read = 0.1
price_cache_write = 0.2
base_url = "https://example.invalid/v1"
api_key_env = "FAR_KEY"
context_window = 65536

[presets.unpriced]
engine = "local"
model = "gemma"
"""
    )
    catalog = PresetCatalog.load(path, registry.builtin_presets())
    assert catalog.get("far") == Preset(
        "far",
        "local",
        "qwen",
        ("--x",),
        1.0,
        2.5,
        0.1,
        0.2,
        "https://example.invalid/v1",
        "FAR_KEY",
        65536,
        priced=True,
    )
    assert catalog.get("unpriced").priced is False


def test_the_cli_says_what_is_wrong_in_one_line(tmp_path, monkeypatch, capsys):
    """The path to the person: ``detach`` prints the ConfigError and exits 2."""
    path = tmp_path / "detach.toml"
    path.write_text('[presets.fast]\nengine = "claude"\nmodel = "haiku"\nprize = 1\n')
    for name in list(os.environ):
        if name.startswith(("DETACH_", "XDG_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("DETACH_ALLOWED_USERS", "111")
    monkeypatch.setenv("DETACH_CONFIG", str(path))
    monkeypatch.setenv("DETACH_DATA_DIR", str(tmp_path / "data"))
    assert cli.main(["add", "--model", "fast", "tidy up"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"detach: DETACH_CONFIG {path} [presets.fast]: unknown key 'prize' (known: "
        "engine, model, args, price_input, price_output, price_cache_read, price_cache_write, "
        "base_url, api_key_env, context_window, preamble)"
    )
