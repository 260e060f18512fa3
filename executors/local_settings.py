"""The local engine's own settings (DETACH_LOCAL_*), apart from the engine so that what reads
them (its endpoints) does not import the engine."""

from __future__ import annotations

from pydantic import Field

from bot.ports import EngineSettings
from executors.local_chat import ANSWER_S


class LocalSettings(EngineSettings):
    """DETACH_LOCAL_*: the endpoint used when the task's preset names none (presets of engine
    ``local`` carry their own), and the bounds of a turn."""

    local_base_url: str | None = None
    local_model: str | None = None
    local_api_key_env: str | None = None  # the variable that holds its key (none: no key)
    local_context_window: int = Field(default=32_768, ge=1024)
    local_max_steps: int = Field(default=40, ge=1, le=500)  # model calls per turn
    local_max_tokens: int = Field(default=4096, ge=16)  # one model call's answer at most
    local_answer_timeout_s: float = Field(default=ANSWER_S, gt=0)  # one answer streams this long
    local_command_timeout_s: float = Field(default=300, gt=0)
    local_retry_s: float = Field(default=120, gt=0)  # 429s and 5xx are retried this long
