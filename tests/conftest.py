"""Shared fixtures: the pinned claude binary, a scripted model server, an isolated agent env."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import workers
from tests.support.anthropic_mock import AnthropicMock
from tests.support.openai_mock import OpenAIMock

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _reap_workers() -> Iterator[None]:
    """No scale-out worker a test started outlives it (a timed-out test's included)."""
    yield
    workers.reap()


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
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    env.update(anthropic.env())
    return env


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


CODEX_NATIVE = (
    "agents/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
)


@pytest.fixture(scope="session")
def codex_bin() -> str:
    """The native codex binary (the npm launcher orphans it on SIGKILL under Node 20)."""
    path = os.environ.get("DETACH_TEST_CODEX_BIN") or str(ROOT / CODEX_NATIVE)
    if not Path(path).exists():
        pytest.fail(f"pinned codex CLI missing at {path}: run `make test` (it installs it)")
    return path


@pytest.fixture
def openai() -> Iterator[OpenAIMock]:
    mock = OpenAIMock().start()
    yield mock
    mock.stop()


@pytest.fixture
def codex_env(tmp_path: Path, openai: OpenAIMock) -> dict[str, str]:
    """HOME, CODEX_HOME (its config.toml points at the mock) and a TMPDIR that is not a parent
    of CODEX_HOME; nothing but 127.0.0.1 is reachable by configuration."""
    home = tmp_path / "chome"
    (tmp_path / "ctmp").mkdir()
    openai.write_codex_home(home / ".codex")
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "TMPDIR": str(tmp_path / "ctmp"),
        "LANG": "C.UTF-8",
        "MOCK_API_KEY": "sk-test",
        "NO_PROXY": "127.0.0.1",
    }
