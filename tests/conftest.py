"""Shared fixtures: the pinned claude binary, a scripted model server, an isolated agent env."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.anthropic_mock import AnthropicMock

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def claude_bin() -> str:
    path = os.environ.get("DETACH_TEST_CLAUDE_BIN") or str(ROOT / "agents/node_modules/.bin/claude")
    if not Path(path).exists():
        pytest.fail(f"pinned claude CLI missing at {path}: run `make test` (it installs it)")
    return path


@pytest.fixture
def anthropic() -> Iterator[AnthropicMock]:
    mock = AnthropicMock().start()
    yield mock
    mock.stop()


@pytest.fixture
def agent_env(tmp_path: Path, anthropic: AnthropicMock) -> dict[str, str]:
    """An environment for agent CLIs that reaches nothing but the mock on 127.0.0.1."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    env.update(anthropic.env())
    return env


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path
