"""Where the local engine's models are: DETACH_LOCAL_BASE_URL's endpoint and those the local
presets name (``base_url`` in DETACH_CONFIG), which one a turn talks to, and whether each
answers (the start-up probe /status shows). Either kind alone turns the engine on."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bot.errors import AgentCrashed, AgentNotInstalled
from bot.models import Phrase, Preset, TurnSpec
from executors.local_chat import Endpoint
from executors.local_client import openai_client

if TYPE_CHECKING:
    from executors.local_settings import LocalSettings

PROBE_TIMEOUT_S = 3.0
PROBED_ENDPOINTS = 4  # /status asks at most this many endpoints (all at once) at start
OFF = Phrase("probe.local_off")


class Endpoints:
    def __init__(
        self, settings: LocalSettings, environ: Mapping[str, str], presets: Sequence[Preset]
    ) -> None:
        """``settings``: the DETACH_LOCAL_* settings; ``presets``: the local presets (those
        that name a ``base_url`` are endpoints, in DETACH_CONFIG's order)."""
        self._settings = settings
        self._environ = environ
        self._presets = tuple(p for p in presets if p.engine == "local" and p.base_url)

    def key(self, env_name: object) -> str | None:
        """The key held by the variable ``env_name`` names (None: no key)."""
        return self._environ.get(str(env_name)) if env_name else None

    def for_turn(self, spec: TurnSpec) -> Endpoint:
        """The task's preset's endpoint, else DETACH_LOCAL_*'s, else that of the first preset
        naming one (and its model, when the task names none): each field from the first of
        these that sets it."""
        preset = spec.preset if spec.preset is not None and spec.preset.engine == "local" else None
        fallback = None if self._settings.local_base_url else next(iter(self._presets), None)
        layers = [p for p in (preset, fallback) if p is not None]

        def first(name: str) -> Any:
            found = (getattr(layer, name) for layer in layers)
            own = getattr(self._settings, f"local_{name}")
            return next((value for value in found if value), None) or own

        base_url = first("base_url")
        if not base_url:
            raise AgentCrashed(
                "no endpoint for /local: set DETACH_LOCAL_BASE_URL or a preset's base_url",
                None,
                "",
                Phrase("agent.local_no_endpoint"),
            )
        return Endpoint(
            base_url=str(base_url),
            model=str(spec.model or first("model") or "local"),
            api_key_env=first("api_key_env"),
            context_window=int(first("context_window")),
        )

    async def probe(self) -> tuple[Phrase, ...]:
        """Whether each endpoint answers (DETACH_LOCAL_BASE_URL's first, then the presets'; at
        most ``PROBED_ENDPOINTS``, asked at once, each bounded); ``AgentNotInstalled`` (off)
        when there is none."""
        endpoints = self._listed()
        if not endpoints:
            raise AgentNotInstalled("local", None, off=OFF)
        shown = list(endpoints.items())[:PROBED_ENDPOINTS]
        reached = await asyncio.gather(*(self._reachable(url, key) for url, (key, _) in shown))
        parts = [
            Phrase(
                "probe.endpoint_named" if names else "probe.endpoint",
                {"url": url, "answer": answer, "names": ", ".join(names)},
            )
            for (url, (_, names)), answer in zip(shown, reached, strict=True)
        ]
        if len(endpoints) > len(shown):
            parts.append(Phrase("probe.more", count=len(endpoints) - len(shown)))
        return tuple(parts)

    def _listed(self) -> dict[str, tuple[object, list[str]]]:
        """Each endpoint's URL: the variable holding its key, and the presets naming it (none:
        DETACH_LOCAL_BASE_URL's own)."""
        endpoints: dict[str, tuple[object, list[str]]] = {}
        own = self._settings
        if own.local_base_url:
            endpoints[own.local_base_url] = (own.local_api_key_env, [])
        for preset in self._presets:
            _, names = endpoints.setdefault(str(preset.base_url), (preset.api_key_env, []))
            names.append(preset.name)
        return endpoints

    async def _reachable(self, base_url: str, key_env: object) -> Phrase:
        client = await openai_client(base_url, self.key(key_env) or "none", timeout=PROBE_TIMEOUT_S)
        from openai import APIError  # imported by now

        try:
            models = await client.models.list()
            return Phrase("probe.reachable", count=len(models.data))
        except APIError as exc:
            return Phrase("probe.unreachable", {"error": type(exc).__name__})
        finally:
            await client.close()
