"""One table of a `make bench` run: every figure against its target, pass or miss, and the
picture of a turn's time (docs/performance-turn.svg, drawn from the run's own parts). Exits 1
when a hard target (the text turn's ratio to `claude -p`, the bot's own time) is missed beyond
the noise the run measured."""

from __future__ import annotations

import datetime as dt
import html
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.targets import RESULTS, Figure, read  # noqa: E402

PICTURE = ROOT / "docs" / "performance-turn.svg"
TABLE = RESULTS.parent / "table.md"
COLOURS = {"bot before": "#d9534f", "agent": "#5b8def", "bot after": "#f0ad4e"}


def verdict(figure: Figure) -> str:
    if figure.met is None:
        return "—"
    if figure.plainly_met:
        return "pass"
    return "pass (within noise)" if figure.met else "MISS"


def target_text(figure: Figure) -> str:
    if figure.target is None:
        return ""
    return f"{'≤' if figure.at_most else '≥'} {figure.target:g} {figure.unit}".strip()


def table(figures: list[Figure]) -> str:
    head = "| figure | value | target | | note |\n| --- | --- | --- | --- | --- |\n"
    rows = [
        f"| {f.name} | {f.value:.3g} {f.unit} | {target_text(f)} | {verdict(f)} | {f.note} |"
        for f in figures
    ]
    return head + "\n".join(rows) + "\n"


def picture(parts: list[dict]) -> str:
    """Horizontal bars, one per engine and turn kind: the bot's part before the agent, the
    agent's, the bot's after it (ms), to scale."""
    width, left, bar, gap = 760, 230, 22, 14
    longest = max((sum(p["parts"].values()) for p in parts), default=1.0) or 1.0
    scale = (width - left - 20) / longest
    height = 40 + len(parts) * (bar + gap) + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        '<text x="10" y="20" font-size="14">A turn through Detach, in parts (ms, medians; '
        "make bench)</text>",
    ]
    y = 40
    for item in parts:
        label = html.escape(f"{item['engine']}: {item['label']}")
        out.append(f'<text x="10" y="{y + 15}">{label}</text>')
        x = float(left)
        for name, ms in item["parts"].items():
            w = max(ms * scale, 1.0)
            colour = COLOURS.get(name, "#999")
            out.append(
                f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar}" fill="{colour}">'
                f"<title>{html.escape(name)}: {ms:.1f} ms</title></rect>"
            )
            x += w
        total = sum(item["parts"].values())
        out.append(f'<text x="{x + 4:.1f}" y="{y + 15}">{total:.0f} ms</text>')
        y += bar + gap
    x = 10
    for name, colour in COLOURS.items():
        out.append(f'<rect x="{x}" y="{y + 6}" width="12" height="12" fill="{colour}"/>')
        out.append(f'<text x="{x + 16}" y="{y + 16}">{name}</text>')
        x += 130
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> int:
    figures, parts = read()
    if not figures:
        print(f"no figures recorded in {RESULTS}")
        return 1
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs"
    text = f"`make bench`, {when}, {machine}\n\n" + table(figures)
    TABLE.write_text(text, encoding="utf-8")
    print()
    print(text)
    if parts:
        PICTURE.write_text(picture(parts), encoding="utf-8")
        print(f"picture: {PICTURE.relative_to(ROOT)}")
    missed = [f for f in figures if f.hard and f.met is False]
    for f in missed:
        print(f"MISSED (hard): {f.name}: {f.value:.3g} {f.unit}, target {target_text(f)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
