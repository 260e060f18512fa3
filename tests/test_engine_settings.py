"""Each engine declares its settings once, in its module; Settings inherits them, so the same
DETACH_<ENGINE>_* variables (and the settings file) reach the engine, with one set of defaults."""

from __future__ import annotations

import os

import pytest

from bot import config
from bot.engines import engine_config
from bot.errors import ConfigError
from bot.ports import EngineConfig
from bot.settings import Settings
from executors import claude, codex, local, registry
from executors.codex import CodexSettings
from executors.local import LocalSettings


@pytest.fixture(autouse=True)
def _no_engine_variables(monkeypatch):
    """The machine's own DETACH_<ENGINE>_* must not decide these tests."""
    for name in list(os.environ):
        if name.startswith(tuple(f"DETACH_{spec.name.upper()}_" for spec in registry.ENGINES)):
            monkeypatch.delenv(name)


def test_every_engine_declares_its_settings_and_settings_inherits_them():
    engine_fields = set()
    for spec in registry.ENGINES:
        assert issubclass(Settings, spec.settings), spec.name
        assert all(name.startswith(f"{spec.name}_") for name in spec.settings.model_fields)
        engine_fields |= set(spec.settings.model_fields)
    prefixes = tuple(f"{spec.name}_" for spec in registry.ENGINES)
    declared_here = set(Settings.model_fields) - engine_fields
    assert not {name for name in declared_here if name.startswith(prefixes)}


def test_the_settings_file_reaches_each_engine(tmp_path):
    path = tmp_path / "env"
    path.write_text(
        "DETACH_CLAUDE_BIN=/opt/claude\n"
        "DETACH_CODEX_SANDBOX=read-only\n"
        "DETACH_LOCAL_BASE_URL=http://127.0.0.1:1/v1\n"
        "DETACH_LOCAL_MAX_STEPS=7\n"
    )
    settings = Settings(_env_file=path)  # type: ignore[call-arg]
    assert engine_config(settings, claude.SPEC, {}).binary == "/opt/claude"
    codex_config = engine_config(settings, codex.SPEC, {})
    assert codex.SPEC.make(codex_config).sandbox == "read-only"  # type: ignore[attr-defined]
    assert codex_config.settings_of(CodexSettings).codex_approval_policy == "untrusted"
    local_config = engine_config(settings, local.SPEC, {})
    own = local_config.settings_of(LocalSettings)
    assert (own.local_max_steps, own.local_base_url) == (7, "http://127.0.0.1:1/v1")
    assert own.local_retry_s == 120  # a default, declared once
    assert not hasattr(local_config.settings, "bot_token")  # an engine gets its own only


def test_an_engine_given_no_settings_has_its_defaults():
    assert EngineConfig(None, {}).settings_of(LocalSettings) == LocalSettings()
    assert codex.CodexExecutor(None, {}).sandbox == "workspace-write"


def test_a_wrong_engine_setting_is_one_line_naming_its_variable(tmp_path):
    path = tmp_path / "env"
    path.write_text("DETACH_LOCAL_MAX_STEPS=0\n")
    with pytest.raises(ConfigError) as caught:
        config.load_settings({"DETACH_ENV_FILE": str(path), "HOME": str(tmp_path)}, tmp_path)
    assert str(caught.value).startswith("DETACH_LOCAL_MAX_STEPS ")
    assert len(str(caught.value).splitlines()) == 1


def test_every_setting_is_in_the_example_settings_file():
    """`.env.example` is where an owner learns a setting exists: each one is named there."""
    from bot.settings import Settings
    from tests.conftest import ROOT

    example = (ROOT / ".env.example").read_text()
    missing = [
        f"DETACH_{n.upper()}"
        for n in Settings.model_fields
        if f"DETACH_{n.upper()}=" not in example
    ]
    assert missing == []
