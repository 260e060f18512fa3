"""Model presets (built-in defaults, overridden by the TOML file at DETACH_CONFIG) and fuzzy
resolution of what a person typed ("sonet", "OPUS", "gpt5") to one of them."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

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
            try:
                tables = PresetFile.model_validate(data).presets
            except ValidationError as exc:
                raise ConfigError(_explain(exc, path)) from None
            for name, table in tables.items():
                presets[name] = table.preset(name, path.parent)
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


class PresetTable(BaseModel):
    """One ``[presets.<name>]`` table of DETACH_CONFIG, as TOML types it (strict: ``"1.5"`` is
    not a price; a key it does not know is a mistake, not ignored)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    engine: str
    model: str
    args: list[str] = Field(default_factory=list)  # extra CLI arguments
    price_input: float = Field(default=0.0, ge=0)  # USD per million tokens
    price_output: float = Field(default=0.0, ge=0)
    price_cache_read: float = Field(default=0.0, ge=0)
    price_cache_write: float = Field(default=0.0, ge=0)
    base_url: str | None = None  # an endpoint engine's (``local``)
    api_key_env: str | None = None
    context_window: int | None = Field(default=None, ge=1024)
    preamble: str | None = None  # a file's path, relative to DETACH_CONFIG's folder

    def preset(self, name: str, folder: Path = Path()) -> Preset:
        """The preset; one that names no price at all has none known (``priced`` False): its
        tokens are counted as unpriced, not as free."""
        return Preset(
            name=name,
            engine=self.engine,
            model=self.model,
            args=tuple(self.args),
            price_input=self.price_input,
            price_output=self.price_output,
            price_cache_read=self.price_cache_read,
            price_cache_write=self.price_cache_write,
            base_url=self.base_url,
            api_key_env=self.api_key_env,
            context_window=self.context_window,
            priced=bool(self.model_fields_set & set(PRICES)),
            preamble=folder / Path(self.preamble).expanduser() if self.preamble else None,
        )


class PresetFile(BaseModel):
    """The whole DETACH_CONFIG file: presets only."""

    model_config = ConfigDict(extra="forbid", strict=True)

    presets: dict[str, PresetTable] = Field(default_factory=dict)


def _explain(exc: ValidationError, path: Path) -> str:
    """One line per mistake, naming the file, the preset and the key."""
    lines = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        if loc[:1] != ["presets"] or len(loc) < 2:
            where, key = "", ".".join(loc)
        else:
            where, key = f" [presets.{loc[1]}]", ".".join(loc[2:])
        if error["type"] == "extra_forbidden":
            known = ", ".join(PresetTable.model_fields) if where else "presets"
            problem = f"unknown key {key!r} (known: {known})"
        elif error["type"] == "missing":
            problem = f"{key!r} is missing"
        elif not key:  # the table itself
            problem = f"must be a table, not {error['input']!r}"
        else:
            problem = f"{key!r}: {error['msg'].lower()}, not {error['input']!r}"
        lines.append(f"DETACH_CONFIG {path}{where}: {problem}")
    return "\n".join(lines)
