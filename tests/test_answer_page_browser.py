"""A long answer's page (``bot.telegram.answer_page``) in a real browser: the distribution's
headless Chromium through Playwright, at a 390x844 phone viewport, on a 17k-character answer
with headings, lists, code blocks with long lines, a wide table, links and hostile bits (a
script, an image with ``onerror``, ``javascript:`` and attribute-breaking links). No sideways
scroll (code scrolls in its own box), headings are ``h1``-``h3``, code sits in ``pre``, no
script runs, nothing is requested but the page itself, and text is at least 14 px. One
screenshot goes to /tmp/answer-page.png.

Without chromium it skips, saying so; under CI it fails (``tests.test_board_browser``)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bot.telegram.answer_page import page
from tests.test_board_browser import PHONE, browser  # noqa: F401  (the fixture)

pytestmark = pytest.mark.slow

PAGE_URL = "http://answer.invalid/1-long-answer.html"  # served by the route below, nowhere else
SHOT = Path("/tmp/answer-page.png")
SLACK_PX = 2
HOSTILE = [
    "<script>window.pwned = 'script'</script>",
    '<img src="http://evil.invalid/x.png" onerror="window.pwned = \'img\'">',
    "[tap me](javascript:window.pwned='link')",
    '[and me](https://ok.invalid/"onmouseover="window.pwned=\'attr\'" x=")',
    "![tracker](http://evil.invalid/pixel.gif)",
    "<a href=\"javascript:window.pwned='raw'\">raw link</a>",
    "<style>body { width: 3000px }</style>",
]


def section(n: int) -> str:
    long_line = "result = compute(" + ", ".join(f"argument_{i}" for i in range(40)) + ")"
    return f"""## Part {n}: what changed

The module `bot/telegram/answer_page.py` renders **long answers**; see
[the docs](https://example.invalid/docs/{n}) and a bare address
https://example.invalid/a/very/long/path/{"segment" * 12}/{n}.

- first point, with *emphasis*
- second point
  - a nested point with `inline code`
1. numbered one
2. numbered two

### Details {n}

```python
def step_{n}(value):
    {long_line}
    return result
```

| file | lines | what | owner | state | notes |
|------|-------|------|-------|-------|-------|
| bot/telegram/answer_page.py | 200 | renders the page | model53 | new | an allow-list |
| tests/test_answer_page_browser.py | 150 | drives chromium | model53 | new | 390x844 |

{HOSTILE[n % len(HOSTILE)]}

> A quoted line that goes on for a while so that it has to wrap on a phone's narrow screen.
"""


def answer() -> str:
    text = "# The whole answer\n\nWhat follows is long.\n\n"
    n = 0
    while len(text) < 17_000:
        text += section(n) + "\n"
        n += 1
    return text + "\n\n".join(HOSTILE) + "\n"


BODY_TAGS = {"h1", "h2", "h3", "div", "ul", "ol", "li", "br", "table", "thead", "tbody", "tr"}
BODY_TAGS |= {"th", "td", "pre", "code", "blockquote", "a", "b", "i", "s", "u", "strong", "em"}


class Tags(HTMLParser):
    """Every tag of a page's body, with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, dict[str, str | None]]] = []
        self.in_body = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.in_body = self.in_body or tag == "body"
        if self.in_body and tag != "body":
            self.seen.append((tag, dict(attrs)))


def test_the_page_holds_only_allowed_tags_and_links():
    """Parsed as a browser would: the hostile bits are text, no tag or attribute of theirs."""
    markdown = answer()
    assert 17_000 <= len(markdown) < 20_000
    tags = Tags()
    tags.feed(page(markdown, "#1 <script>x</script>"))
    assert {t for t, _ in tags.seen} <= BODY_TAGS, {t for t, _ in tags.seen} - BODY_TAGS
    for tag, attrs in tags.seen:
        allowed = {"a": {"href", "rel"}, "code": {"class"}, "div": {"class"}}.get(tag, set())
        assert set(attrs) <= allowed, (tag, attrs)
        href = attrs.get("href")
        assert href is None or href.startswith(("https://", "http://", "mailto:")), href
    assert "<title>#1 &lt;script&gt;x&lt;/script&gt;</title>" in page("x", "#1 <script>x</script>")


async def test_the_long_answer_reads_on_a_phone(browser):  # noqa: F811
    markdown = answer()
    html_text = page(markdown, "#1 long answer")
    requests: list[str] = []

    async def serve(route):  # type: ignore[no-untyped-def]
        requests.append(route.request.url)
        if route.request.url == PAGE_URL:
            await route.fulfill(status=200, content_type="text/html", body=html_text)
        else:
            await route.abort()

    await browser.route("**/*", serve)
    tab = await browser.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    await tab.goto(PAGE_URL, wait_until="load", timeout=30_000)
    await tab.wait_for_timeout(300)  # bounded: any late load or handler would have fired

    width = await tab.evaluate("document.scrollingElement.scrollWidth")
    assert width <= PHONE["width"] + SLACK_PX, f"the page scrolls sideways: {width}px"
    boxes = await tab.evaluate(
        """[...document.querySelectorAll('pre, .table')].map(e => {
            const r = e.getBoundingClientRect();
            return {right: r.right, scroll: e.scrollWidth, client: e.clientWidth};
        })"""
    )
    assert boxes and all(b["right"] <= PHONE["width"] + SLACK_PX for b in boxes)
    assert any(b["scroll"] > b["client"] for b in boxes)  # the long code line scrolls inside

    headings = re.findall(r"^#{1,6} ", markdown, re.M)
    found = await tab.evaluate("document.querySelectorAll('h1, h2, h3').length")
    assert found == len(headings) and found > 10
    assert await tab.evaluate("document.querySelectorAll('h4, h5, h6').length") == 0
    fences = markdown.count("```") // 2
    assert await tab.evaluate("document.querySelectorAll('pre > code').length") == fences
    assert await tab.evaluate("document.querySelectorAll('table').length") > 3
    assert await tab.evaluate("document.querySelectorAll('ul li, ol li').length") > 20

    for link in await tab.query_selector_all("a"):  # hover and tap every link: none runs code
        href = await link.get_attribute("href")
        assert href is None or href.startswith(("https://", "http://", "mailto:")), href
        if href is None:
            await link.click(timeout=5_000)
        else:
            await link.hover(timeout=5_000)
    assert await tab.evaluate("typeof window.pwned") == "undefined"
    assert await tab.evaluate("document.querySelectorAll('script, img, style').length") == 1
    assert requests == [PAGE_URL], requests  # not an image, a font or a favicon more
    assert not errors, errors

    smallest = await tab.evaluate(
        """(() => {
            let least = 99;
            for (const e of document.body.querySelectorAll('*')) {
                const own = [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
                if (own) least = Math.min(least, parseFloat(getComputedStyle(e).fontSize));
            }
            return least;
        })()"""
    )
    assert smallest >= 14, f"text as small as {smallest}px"
    await tab.evaluate("window.scrollTo(0, document.querySelector('h3').offsetTop - 120)")
    await tab.screenshot(path=str(SHOT))
