"""The figures of one `make bench` run against the issue's targets. Each benchmark records what
it measured (``record``) into one file of JSON lines (``BENCH_RESULTS``, else
build/bench/results.jsonl); `bench/report.py` prints them as one table with pass/miss, draws the
turn's picture and fails the run on a hard miss."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(os.environ.get("BENCH_RESULTS", ROOT / "build" / "bench" / "results.jsonl"))


@dataclass(frozen=True)
class Figure:
    """``value`` against ``target`` (``at_most``: the target is a ceiling, else a floor);
    ``noise``: what the run's own noise allows — a figure misses only when ``noise`` (the
    favourable end of its interval) misses too; ``hard``: a miss fails `make bench`."""

    name: str
    value: float
    unit: str
    target: float | None = None
    at_most: bool = True
    noise: float | None = None
    hard: bool = False
    note: str = ""

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        best = self.value if self.noise is None else self.noise
        return best <= self.target if self.at_most else best >= self.target

    @property
    def plainly_met(self) -> bool | None:
        """The figure itself against the target (no allowance for noise)."""
        if self.target is None:
            return None
        return self.value <= self.target if self.at_most else self.value >= self.target


def record(figure: Figure) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a", encoding="utf-8") as out:
        out.write(json.dumps({"kind": "figure", **asdict(figure)}) + "\n")


def record_parts(engine: str, label: str, parts: dict[str, float]) -> None:
    """A turn's time in parts (ms), for the picture: the bot's before the agent, the agent's,
    the bot's after it."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a", encoding="utf-8") as out:
        line = {"kind": "parts", "engine": engine, "label": label, "parts": parts}
        out.write(json.dumps(line) + "\n")


def read(path: Path = RESULTS) -> tuple[list[Figure], list[dict]]:
    figures: list[Figure] = []
    parts: list[dict] = []
    if not path.exists():
        return figures, parts
    for line in path.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        kind = item.pop("kind")
        if kind == "figure":
            figures.append(Figure(**item))
        else:
            parts.append(item)
    return figures, parts
