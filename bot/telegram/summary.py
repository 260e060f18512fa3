"""A long answer's face on its card and its file to read on a phone. The summary is the
answer's first section (up to its second heading) or its first paragraphs, rendered to
Telegram HTML like any message and within a budget of characters: whole blocks while they fit,
else the first block cut by the converter (tags balanced, never inside a tag or an entity)
and marked so. The whole answer's page is ``bot.telegram.answer_page``'s."""

from __future__ import annotations

import re

from chatgpt_md_converter import telegram_format

from bot.telegram.render import markdown_chunks

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
MIN_CUT = 520  # the converter's splitter cuts no shorter than 500
CUT_MARK = " …"  # after a block cut to fit


def blocks(markdown: str) -> list[str]:
    """The answer's paragraphs, lists and code blocks: runs of lines between blank lines
    outside a code fence."""
    found: list[str] = []
    lines: list[str] = []
    fenced = False
    for line in markdown.strip().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        if not line.strip() and not fenced:
            if lines:
                found.append("\n".join(lines))
            lines = []
        else:
            lines.append(line)
    if lines:
        found.append("\n".join(lines))
    return found


def first_section(found: list[str]) -> list[str]:
    """The blocks before the second heading (a heading alone takes the blocks under it)."""
    for index, block in enumerate(found[1:], start=1):
        if _HEADING.match(block) and not (index == 1 and _HEADING.match(found[0])):
            return found[:index]
    return found


def summary(markdown: str, budget: int) -> str:
    """The answer's first section, or as many of its first blocks as fit in ``budget``
    characters of HTML (at least ``MIN_CUT``)."""
    budget = max(budget, MIN_CUT)
    head = first_section(blocks(markdown))
    taken = ""
    for block in head:
        rendered = telegram_format("\n\n".join(filter(None, (taken, block)))).strip()
        if len(rendered) > budget:
            break
        taken = "\n\n".join(filter(None, (taken, block)))
    if taken:
        return telegram_format(taken).strip()
    cut = markdown_chunks(head[0] if head else markdown, budget - len(CUT_MARK))[0]
    return cut.strip() + CUT_MARK
