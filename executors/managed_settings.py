"""The managed engine's own settings (DETACH_MANAGED_*), apart from the engine so that what
reads them does not import it."""

from __future__ import annotations

from pydantic import Field, SecretStr

from bot.ports import EngineSettings

DEFAULT_MODEL = "claude-sonnet-4-6"


class ManagedSettings(EngineSettings):
    """DETACH_MANAGED_*: the engine is on only with its own key (never ANTHROPIC_API_KEY, which
    the Claude CLI may use: spending on the remote route is the owner's explicit choice)."""

    managed_api_key: SecretStr | None = None
    managed_base_url: str | None = None  # None: the SDK's (api.anthropic.com)
    managed_model: str = DEFAULT_MODEL  # a task without a managed preset (cloud…) runs this
    # an agent and an environment made beforehand; unset: created on first use, ids kept
    managed_agent_id: str | None = None
    managed_environment_id: str | None = None
    managed_request_timeout_s: float = Field(default=60, gt=0)  # one API call at most
    managed_idle_timeout_s: float = Field(default=900, gt=0)  # the stream silent this long: fail
