"""A long answer as a page to read in a phone's browser: its Markdown's headings (``h1``–``h3``),
lists, tables, code blocks (scrolling in their own box) and paragraphs as HTML elements, their
text rendered inline like a message. The answer is the agent's, hence hostile: every piece of
rendered HTML passes an allow-list (a few inline tags; a link only to http, https or mailto; a
code block's language class), so no script, handler or odd link survives, and the page's
Content-Security-Policy lets it load nothing and run nothing besides."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from urllib.parse import urlsplit

from chatgpt_md_converter import telegram_format

from bot.telegram.summary import blocks

_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_ITEM = re.compile(r"^(?P<indent>\s*)(?P<marker>[-*+•]|\d{1,9}[.)])\s+(?P<text>.*)$")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_LANGUAGE = re.compile(r"^language-[\w+#.-]{1,40}$")
INLINE_TAGS = frozenset({"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "code"})
BLOCK_TAGS = frozenset({"pre", "blockquote"})
LINK_SCHEMES = frozenset({"http", "https", "mailto"})
MAX_DEPTH = 6  # list nesting shown; deeper items stay at this depth

_PAGE = """<!doctype html>
<html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
 content="default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'">
<meta name="referrer" content="no-referrer">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>{title}</title>
<style>
html {{ -webkit-text-size-adjust: 100%; text-size-adjust: 100%; }}
body {{ font: 16px/1.5 system-ui, sans-serif; margin: 0 auto; padding: 0 1em 2em;
  max-width: 46em; overflow-wrap: anywhere; }}
h1 {{ font-size: 1.5em; }} h2 {{ font-size: 1.3em; }} h3 {{ font-size: 1.15em; }}
h1, h2, h3 {{ line-height: 1.25; margin: 1.2em 0 .5em; }}
.para {{ white-space: pre-wrap; margin: .7em 0; }}
ul, ol {{ padding-left: 1.4em; }}
pre, code {{ font-family: ui-monospace, "DejaVu Sans Mono", Menlo, monospace; font-size: .9em;
  background: #f4f4f4; }}
pre {{ padding: .6em; overflow-x: auto; max-width: 100%; box-sizing: border-box;
  white-space: pre; overflow-wrap: normal; }}
pre code {{ font-size: inherit; background: none; }}
.table {{ overflow-x: auto; max-width: 100%; }}
table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top;
  overflow-wrap: break-word; }}
blockquote {{ border-left: 3px solid #ccc; margin: .7em 0; padding-left: .8em;
  white-space: pre-wrap; }}
@media (prefers-color-scheme: dark) {{ body {{ background: #111; color: #ddd; }}
  pre, code {{ background: #222; }} pre code {{ background: none; }} a {{ color: #8cf; }} }}
</style></head>
<body>
{body}
</body></html>
"""


def page(markdown: str, title: str) -> str:
    """The whole answer as a small HTML document that reads well in a phone's browser."""
    body = "\n".join(_block(b) for b in blocks(markdown))
    return _PAGE.format(title=html.escape(title), body=body)


def _block(block: str) -> str:
    if any(_FENCE.match(line) for line in block.splitlines()):
        return _allowed(telegram_format(block).strip(), BLOCK_TAGS)  # code: the converter's
    parts: list[str] = []
    run: list[str] = []
    for line in block.splitlines():
        heading = _HEADING.match(line)
        if heading is None:
            run.append(line)
            continue
        parts.append(_run(run))
        level = min(len(heading.group(1)), 3)
        parts.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        run = []
    parts.append(_run(run))
    return "\n".join(p for p in parts if p)


def _run(lines: list[str]) -> str:
    """Lines between headings: a table, a list, or a paragraph (a quote is one)."""
    if not lines:
        return ""
    if len(lines) >= 2 and lines[0].lstrip().startswith("|") and _TABLE_RULE.match(lines[1]):
        return _table(lines)
    if _ITEM.match(lines[0]):
        return _list(lines)
    text = "\n".join(lines)
    rendered = _allowed(telegram_format(text).strip(), BLOCK_TAGS)
    return rendered if text.lstrip().startswith(">") else f'<div class="para">{rendered}</div>'


def _table(lines: list[str]) -> str:
    def cells(line: str, tag: str) -> str:
        row = line.strip().removeprefix("|").removesuffix("|").split("|")
        return "<tr>" + "".join(f"<{tag}>{_inline(c.strip())}</{tag}>" for c in row) + "</tr>"

    head = cells(lines[0], "th")
    rows = "".join(cells(line, "td") for line in lines[2:])
    return f'<div class="table"><table><thead>{head}</thead><tbody>{rows}</tbody></table></div>'


def _list(lines: list[str]) -> str:
    """Items nested by their indent; a line that is no item continues the one before."""
    out: list[str] = []
    open_lists: list[tuple[str, int]] = []  # (ul|ol, indent depth), outermost first
    for line in lines:
        item = _ITEM.match(line)
        if item is None:
            out.append("<br>" + _inline(line.strip()))
            continue
        depth = min(len(item["indent"].expandtabs(4)) // 2, MAX_DEPTH)
        tag = "ol" if item["marker"][0].isdigit() else "ul"
        while open_lists and (
            open_lists[-1][1] > depth or (open_lists[-1][1] == depth and open_lists[-1][0] != tag)
        ):
            out.append(f"</li></{open_lists.pop()[0]}>")
        if open_lists and open_lists[-1][1] == depth:
            out.append("</li>")
        else:
            out.append(f"<{tag}>")
            open_lists.append((tag, depth))
        out.append("<li>" + _inline(item["text"]))
    out.extend(f"</li></{tag}>" for tag, _ in reversed(open_lists))
    return "".join(out)


def _inline(text: str) -> str:
    return _allowed(telegram_format(text).strip(), frozenset())


def _allowed(rendered: str, blocks_too: frozenset[str]) -> str:
    """``rendered`` with only allowed tags and attributes; all else as escaped text."""
    cleaner = _Cleaner(INLINE_TAGS | blocks_too)
    cleaner.feed(rendered)
    cleaner.close()
    return cleaner.result()


class _Cleaner(HTMLParser):
    """An allow-list over the converter's HTML (which carries the agent's text and links)."""

    def __init__(self, tags: frozenset[str]) -> None:
        super().__init__(convert_charrefs=True)
        self._tags = tags
        self._out: list[str] = []
        self._open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "a":
            href = _safe_href(found.get("href"))
            shown = f' href="{html.escape(href)}" rel="noopener noreferrer"' if href else ""
            self._opened("a", f"<a{shown}>")
        elif tag == "code" and _LANGUAGE.match(found.get("class") or ""):
            self._opened("code", f'<code class="{html.escape(found["class"] or "")}">')
        elif tag in self._tags:
            self._opened(tag, f"<{tag}>")

    def _opened(self, tag: str, text: str) -> None:
        self._out.append(text)
        self._open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self._open:  # close what it closes, and what was left open inside it
            while self._open:
                inner = self._open.pop()
                self._out.append(f"</{inner}>")
                if inner == tag:
                    break

    def handle_data(self, data: str) -> None:
        self._out.append(html.escape(data, quote=False))

    def result(self) -> str:
        return "".join(self._out) + "".join(f"</{t}>" for t in reversed(self._open))


def _safe_href(href: str | None) -> str | None:
    """A link to the web or to mail; anything else (``javascript:``, ``data:``, relative
    paths that would reach the phone's files) is no link."""
    if not href or any(c.isspace() or ord(c) < 32 for c in href) or '"' in href:
        return None
    try:
        parts = urlsplit(href)
    except ValueError:
        return None
    if parts.scheme.lower() not in LINK_SCHEMES:
        return None
    return href if parts.scheme.lower() == "mailto" or parts.netloc else None
