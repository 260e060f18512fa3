"""The recognizer a chat's voice notes go to: a transcription server (DETACH_STT_BASE_URL), else
the best offline recognizer installed here. Apart from ``bot.voice.speech`` (the port), which
the recognizers import: no circle."""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from bot.voice.speech import Recognizer


def make_recognizer(
    *,
    base_url: str | None,
    model: str,
    api_key: SecretStr | None,
    timeout_s: float,
    max_s: float,
    folder: Path,
) -> Recognizer | None:
    """The server when ``base_url`` is set, else the best offline recognizer whose packages are
    installed (looked up, not imported), else None (the chat is told how to enable one).
    ``folder``: where the offline recognizer keeps its files."""
    if base_url:
        from bot.voice.remote import RemoteRecognizer

        return RemoteRecognizer(base_url, model, api_key, timeout_s=timeout_s, max_s=max_s)
    from bot.voice.offline import OfflineRecognizer, best

    engine = best()
    return (
        None
        if engine is None
        else OfflineRecognizer(engine, folder=folder, timeout_s=timeout_s, max_s=max_s)
    )
