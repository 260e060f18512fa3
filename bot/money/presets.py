"""Model presets (built-in defaults, overridden by the TOML file at DETACH_CONFIG) and fuzzy
resolution of what a person typed ("sonet", "OPUS", "gpt5") to one of them."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.errors import ConfigError
from bot.models import Preset

WIN_SCORE = 70.0  # a fuzzy winner must score at least this...
WIN_MARGIN = 15.0  # ...and beat the runner-up by this much
MIN_SCORE = 50.0  # below this nothing is a candidate


@dataclass(frozen=True, slots=True)
class Resolution:
    """A clear ``winner``, or ``candidates`` (near-ties, best first), or only ``closest``."""

    winner: Preset | None = None
    candidates: tuple[Preset, ...] = ()
    closest: tuple[str, ...] = field(default_factory=tuple)


class PresetCatalog:
    def __init__(self, presets: dict[str, Preset]) -> None:
        self._presets = presets

    @classmethod
    def load(cls, path: Path | None, builtin: Iterable[Preset]) -> PresetCatalog:
        """``builtin``: the engines' own presets (executors/registry.py), under the file's."""
        presets = {p.name: p for p in builtin}
        if path is not None:
            try:
                data = tomllib.loads(path.read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise ConfigError(f"cannot read DETACH_CONFIG {path}: {exc}") from exc
            for name, table in (data.get("presets") or {}).items():
                presets[name] = _preset(name, table)
        return cls(presets)

    def names(self) -> list[str]:
        return sorted(self._presets)

    def of_engine(self, engine: str) -> tuple[Preset, ...]:
        """An engine's presets, built-in ones first, then DETACH_CONFIG's in the file's order."""
        return tuple(p for p in self._presets.values() if p.engine == engine)

    def all(self) -> tuple[Preset, ...]:
        return tuple(self._presets.values())

    def get(self, name: str | None) -> Preset | None:
        return self._presets.get(name) if name else None

    def resolve(self, text: str) -> Resolution:
        query = text.strip().lower()
        exact = {n.lower(): p for n, p in self._presets.items()}
        if query in exact:
            return Resolution(winner=exact[query])
        prefixed = [p for n, p in exact.items() if n.startswith(query)] if query else []
        if len(prefixed) == 1:
            return Resolution(winner=prefixed[0])
        from rapidfuzz import fuzz, process, utils  # only for a name not known: 3.5 MB at idle

        scored = process.extract(
            query, list(self._presets), scorer=fuzz.WRatio, processor=utils.default_process, limit=5
        )
        good = [(name, score) for name, score, _ in scored if score >= MIN_SCORE]
        if (
            good
            and good[0][1] >= WIN_SCORE
            and (len(good) == 1 or good[0][1] - good[1][1] >= WIN_MARGIN)
        ):
            return Resolution(winner=self._presets[good[0][0]])
        near = [self._presets[n] for n, s in good if good and good[0][1] - s < WIN_MARGIN]
        if len(near) > 1:
            return Resolution(candidates=tuple(near[:4]))
        return Resolution(closest=tuple(name for name, _, _ in scored[:3]))


PRICES = ("price_input", "price_output", "price_cache_read", "price_cache_write")


def _preset(name: str, table: dict[str, Any]) -> Preset:
    """A preset of DETACH_CONFIG; one that names no price at all has none known (``priced``
    False): its tokens are counted as unpriced, not as free."""
    try:
        return Preset(
            name=name,
            engine=str(table["engine"]),
            model=str(table["model"]),
            args=tuple(str(a) for a in table.get("args", ())),
            price_input=float(table.get("price_input", 0)),
            price_output=float(table.get("price_output", 0)),
            price_cache_read=float(table.get("price_cache_read", 0)),
            price_cache_write=float(table.get("price_cache_write", 0)),
            base_url=str(table["base_url"]) if "base_url" in table else None,
            api_key_env=str(table["api_key_env"]) if "api_key_env" in table else None,
            context_window=int(table["context_window"]) if "context_window" in table else None,
            priced=any(key in table for key in PRICES),
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise ConfigError(f"preset {name!r} in DETACH_CONFIG: {exc!r}") from exc
