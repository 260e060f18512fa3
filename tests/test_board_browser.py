"""The board in a real browser: the distribution's headless Chromium driven by Playwright, at
phone width, against the real bot with the fake Bot API and a replayed engine. Screenshots of
the list and a task page, light and dark, go to build/board-screenshots/.

Without chromium these skip, saying so; under CI (``CI=true``) they fail instead: `make test`
installs chromium (the Makefile's ``browser`` target)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.events import SessionStarted, TextEmitted, ToolCalled, ToolFinished, TurnFinished, Usage
from bot.models import TaskStatus, TurnSpec
from bot.preflight.message import DROP
from tests.support.chat_mock import ChatMock
from tests.support.fake_engine import FakeEngine
from tests.support.harness import wait_sent
from tests.test_board import SESSION, asks_first, bot_with_board, finished, wait_status
from tests.test_handlers import OWNER, feed, message
from tests.test_preflight_doors import preflight_settings
from tests.test_preflight_local import PREFLIGHT
from tests.test_worktrees import make_repo

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "build" / "board-screenshots"
PHONE = {"width": 390, "height": 844}
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    found = shutil.which("chromium") or (
        "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
    )
    if found is None:
        why = "the board's browser tests need chromium (make test installs it from apt)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return found


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[object]:
    """A fresh Chromium profile at phone width."""
    executable = chromium_path()
    playwright_api = pytest.importorskip("playwright.async_api")
    async with playwright_api.async_playwright() as pw:
        context = await pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=executable,
            headless=True,
            args=FLAGS,
            viewport=PHONE,
        )
        try:
            yield context
        finally:
            await context.close()


async def open_signed_in(context, board, path: str = "/"):  # type: ignore[no-untyped-def]
    page = await context.new_page()
    page.on("pageerror", lambda exc: print("page error:", exc))  # shown when a test fails
    await page.goto(board.link(OWNER))
    await page.wait_for_selector("#tasks")
    if path != "/":
        await page.goto(board.url + path)
    return page


async def shoot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    """Light and dark screenshots, and no sideways scrolling at phone width."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.evaluate("window.scrollTo(0, 0)")  # the sticky bar where it belongs
    for scheme in ("light", "dark"):
        await page.emulate_media(color_scheme=scheme)
        await page.screenshot(path=str(SHOTS / f"{name}-{scheme}.png"), full_page=True)
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"{name} scrolls sideways: {width}px"


class Held(FakeEngine):
    """Says one line, then waits for ``release`` before the next and the end."""

    def __init__(self) -> None:
        super().__init__(())
        self.release = asyncio.Event()

    async def run(self, spec, approver, steering=None, ready=None):  # type: ignore[no-untyped-def]
        if ready is not None:
            await ready()
        self.specs.append(spec)
        yield SessionStarted(SESSION, "fake-model")
        yield TextEmitted(f"first line of {spec.prompt}")
        async with asyncio.timeout(30):
            await self.release.wait()
        yield TextEmitted("second line, **after** the wait")
        yield TurnFinished(False, "done", SESSION, 0.02, Usage(1, 1))


class Mixed(Held):
    """The first task finishes at once; later ones wait like ``Held``."""

    async def run(self, spec, approver, steering=None, ready=None):  # type: ignore[no-untyped-def]
        if ready is not None:
            await ready()
        if spec.task_id == 1:
            for event in finished("All green."):
                yield event
            return
        async for event in super().run(spec, approver, ready=ready):
            yield event


async def test_the_list_shows_a_running_and_a_finished_task(tmp_path, workdir, browser):
    engine = Mixed()
    async with bot_with_board(tmp_path, workdir, engine) as (app, board):
        await feed(app, message("/claude finish quickly"))
        await wait_status(app, 1, TaskStatus.DONE)
        await feed(app, message("/claude keep running"))
        await wait_status(app, 2, TaskStatus.RUNNING)
        page = await open_signed_in(browser, board)
        await page.wait_for_selector('.task[data-id="1"] .badge.done')
        await page.wait_for_selector('.task[data-id="2"] .badge.running')
        assert "keep running" in await page.inner_text('.task[data-id="2"]')
        await shoot(page, "list")
        engine.release.set()
        await page.wait_for_selector('.task[data-id="2"] .badge.done', timeout=10_000)


async def test_a_running_tasks_transcript_grows_while_the_page_is_open(tmp_path, workdir, browser):
    engine = Held()
    async with bot_with_board(tmp_path, workdir, engine) as (app, board):
        await feed(app, message("/claude a long one"))
        page = await open_signed_in(browser, board, "/tasks/1")
        await page.wait_for_selector("text=first line of a long one")
        await page.wait_for_selector("#head .badge.running")
        await shoot(page, "task")
        engine.release.set()
        # the page is never reloaded: only its live stream can bring the line (within a poll
        # of the board's and the transcript's flush; 4.5 s in a loaded run, 15 s bounds it)
        await page.wait_for_selector("#transcript strong:text('after')", timeout=15_000)
        await page.wait_for_selector("#head .badge.done", timeout=10_000)


async def test_pressing_allow_on_the_page_lets_the_agent_go_on(tmp_path, workdir, browser):
    engine = FakeEngine(asks_first())
    async with bot_with_board(tmp_path, workdir, engine) as (app, board):
        tg = await feed(app, message("/claude clean the build"))
        await wait_sent(tg, lambda c: "rm -rf build" in c.text, 10)
        page = await open_signed_in(browser, board, "/tasks/1")
        await page.click('.pending button[data-answer="allow"]')
        await page.wait_for_selector("text=after the approval", timeout=10_000)
        await wait_status(app, 1, TaskStatus.DONE)
        assert engine.decisions == [True]
        await wait_sent(tg, lambda c: "rm -rf build" in c.text, 10, method="EditMessageText")
        await page.wait_for_selector(".pending", state="detached", timeout=5_000)


async def test_a_task_held_by_its_preflight_is_listed_and_dropped_on_the_page(
    tmp_path, workdir, browser
):
    """The list shows a held task with the chat's choices; Drop there answers as the chat's
    button does: nothing starts, and the row goes."""
    chat = ChatMock().start()
    chat.script(PREFLIGHT, [{"text": json.dumps({"verdict": "refuse", "reason": "Too wide."})}])
    engine = FakeEngine(finished("never"))
    try:
        more = preflight_settings(tmp_path, chat)
        async with bot_with_board(tmp_path, workdir, engine, **more) as (app, board):
            tg = await feed(app, message("/detach MARK-PAGE wipe everything"))
            await wait_sent(tg, lambda c: "Not started: Too wide." in c.text, 10)
            page = await open_signed_in(browser, board)
            row = await page.wait_for_selector(".task.held .badge.preflight")
            assert await row.inner_text() == "held by its preflight"
            assert "MARK-PAGE wipe everything" in await page.inner_text(".task.held")
            await shoot(page, "held")
            await page.click(f'.task.held button[data-choice="{DROP}"]')
            await page.wait_for_selector(".task.held", state="detached", timeout=5_000)
            assert [h.status for h in await app.store.preflights.pending()] == []
            assert engine.specs == [] and await app.store.tasks.list_for(None) == []
    finally:
        chat.stop()


async def test_while_a_turn_runs_the_follow_up_form_offers_steer_now_and_queue(
    tmp_path, workdir, browser
):
    """The page's follow-up while the turn runs: Steer now sends it into the turn, whose
    words the transcript shows; once the task is done the form has its Send again."""
    from tests.test_followup_doors import works_until

    gate = asyncio.Event()
    engine = FakeEngine(works_until(gate))
    async with bot_with_board(tmp_path, workdir, engine) as (app, board):
        await feed(app, message("/claude mode=auto build it"))
        await wait_status(app, 1, TaskStatus.RUNNING)
        page = await open_signed_in(browser, board, "/tasks/1")
        await page.wait_for_selector("#steer")
        assert await page.query_selector("#queue") and not await page.query_selector("#send")
        await page.fill("#followup", "PAGE-WORDS")
        await page.click("#steer")
        await page.wait_for_selector("text=➡️ PAGE-WORDS", timeout=10_000)
        assert engine.steered == ["PAGE-WORDS"]
        gate.set()
        await page.wait_for_selector("#send", timeout=10_000)
        await wait_status(app, 1, TaskStatus.DONE)


async def test_the_diff_of_a_worktree_task_shows_changed_new_and_deleted_files(
    tmp_path, workdir, browser
):
    make_repo(workdir / "repo")

    def edits(spec: TurnSpec) -> tuple:
        top = spec.cwd
        (top / "src" / "app.py").write_text("print('v2')\n")
        (top / "NEW.md").write_text("a new file\n")
        (top / "README.md").unlink()
        return finished("edited")

    async with bot_with_board(tmp_path, workdir, FakeEngine(edits)) as (app, board):
        await feed(app, message("/claude worktree=yes cwd=repo change things"))
        await wait_status(app, 1, TaskStatus.DONE)
        page = await open_signed_in(browser, board, "/tasks/1")
        for path in ("src/app.py", "NEW.md", "README.md"):
            await page.wait_for_selector(f'details.file[data-path="{path}"]', timeout=10_000)
        await page.click('details.file[data-path="src/app.py"] summary')
        assert "print('v2')" in await page.inner_text('details.file[data-path="src/app.py"] .add')
        coloured = 'details.file[data-path="src/app.py"] .add .tok-str'
        assert await page.inner_text(coloured) == "'v2'"  # coloured as Python
        summary = await page.inner_text('details.file[data-path="NEW.md"] summary')
        assert "(new)" in summary
        deleted = await page.inner_text('details.file[data-path="README.md"] summary')
        assert "(deleted)" in deleted
        await page.click("details.tool summary")  # the tool call, folded with its output
        assert "42 passed" in await page.inner_text("details.tool")
        await shoot(page, "diff")


async def test_the_mini_app_signs_in_with_init_data_and_takes_telegrams_theme(
    tmp_path, workdir, browser
):
    """Opened by Telegram: no cookie, the launch parameters in the address's fragment."""
    from urllib.parse import quote

    from tests.test_board import init_data

    async with bot_with_board(tmp_path, workdir, FakeEngine(finished("ok"))) as (app, board):
        await feed(app, message("/claude from the phone"))
        await wait_status(app, 1, TaskStatus.DONE)
        page = await browser.new_page()
        theme = '{"bg_color":"#101820","text_color":"#f0f0f0","button_color":"#3390ec"}'
        fragment = (
            f"tgWebAppData={quote(init_data(OWNER, int(time.time())))}"
            f"&tgWebAppThemeParams={quote(theme)}&tgWebAppVersion=8.0"
        )
        await page.goto(f"{board.url}/#{fragment}")
        await page.wait_for_selector('.task[data-id="1"] .badge.done')
        assert await page.evaluate("document.documentElement.dataset.theme") == "dark"
        background = await page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(16, 24, 32)"
        stale = f"tgWebAppData={quote(init_data(OWNER, int(time.time()) - 7200))}"
        other = await browser.new_page()
        await other.goto(f"{board.url}/#{stale}")
        await other.wait_for_selector("#signin:not([hidden])")
        assert await other.query_selector(".task") is None


async def test_the_mini_apps_back_button_leads_back_to_the_list(tmp_path, workdir, browser):
    """Telegram's native clients take the page's events through ``TelegramWebviewProxy`` and
    answer through ``Telegram.WebView.receiveEvent``; a stand-in records and answers."""
    from urllib.parse import quote

    from tests.test_board import init_data

    said = finished("see [the docs](https://example.com/docs)")
    async with bot_with_board(tmp_path, workdir, FakeEngine(said)) as (app, board):
        await feed(app, message("/claude from the phone"))
        await wait_status(app, 1, TaskStatus.DONE)
        page = await browser.new_page()
        await page.add_init_script(
            "window.posted = []; window.TelegramWebviewProxy = "
            "{postEvent: (type, data) => window.posted.push([type, JSON.parse(data)])};"
        )
        fragment = f"tgWebAppData={quote(init_data(OWNER, int(time.time())))}"
        await page.goto(f"{board.url}/tasks/1#{fragment}")
        await page.wait_for_selector("#head .badge.done")
        posted = await page.evaluate("window.posted")
        assert ["web_app_ready", {}] in posted
        assert ["web_app_setup_back_button", {"is_visible": True}] in posted
        await page.click("#transcript .md-body a")  # Telegram opens the agent's links
        opened = ["web_app_open_link", {"url": "https://example.com/docs"}]
        assert opened in await page.evaluate("window.posted")
        assert page.url.startswith(board.url)
        await page.evaluate("Telegram.WebView.receiveEvent('back_button_pressed', {})")
        await page.wait_for_selector('.task[data-id="1"]')
        assert page.url.endswith("/")
        posted = await page.evaluate("window.posted")
        assert posted[-1] == ["web_app_setup_back_button", {"is_visible": False}]


IMG = "<img src=x onerror=window.__pwned=1>"
SCRIPT = "<script>window.__pwned=1</script>"
QUOTES = "\"'><img src=x onerror=window.__pwned=1>"
WATCH = (  # what ran, and what the page's policy had to block (nothing, when all is escaped)
    "window.__violations = [];"
    "document.addEventListener('securitypolicyviolation', (e) => "
    "window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));"
)


async def test_hostile_agent_and_repository_content_is_shown_literally_and_never_runs(
    tmp_path, workdir, browser
):
    """Markup in the agent's text, a tool's name, input and output, a file's name and a diff
    line, the goal: all shown as text; no element, handler or javascript: link comes of it."""
    make_repo(workdir / "repo")
    hostile_name = "<img src=x onerror=window.__pwned=1>'.md"

    def hostile(spec: TurnSpec) -> tuple:
        (spec.cwd / hostile_name).write_text(f"{SCRIPT}\n{QUOTES}\n")
        (spec.cwd / "check.txt").write_text(f"{IMG}\n{SCRIPT}\n{QUOTES}\n")  # the check's output
        (spec.cwd / "src" / "app.py").write_text(f"print('{IMG}')  # {SCRIPT}\n")
        text = (
            f"Done {IMG} and {SCRIPT}.\n\n- [click](javascript:window.__pwned=1)\n"
            f'- [quoted](https://example.com/"onmouseover="window.__pwned=1)\n'
            f"- `{QUOTES}` **{IMG}**\n\n```html\n{SCRIPT}\n```\n\n> {IMG}\n\n"
            f"| a | b |\n|---|---|\n| {SCRIPT} | [x](JaVaScRiPt:window.__pwned=1) |\n"
        )
        return (
            SessionStarted(SESSION, "fake-model"),
            TextEmitted(text),
            ToolCalled("t1", f"Bash{IMG}", f"echo {QUOTES} {SCRIPT}", detail=f"{IMG}\n{QUOTES}"),
            ToolFinished("t1", False, f"{IMG}\n{SCRIPT}\n{QUOTES}"),
            TurnFinished(False, "done", SESSION, 0.01, Usage(1, 1)),
        )

    async with bot_with_board(tmp_path, workdir, FakeEngine(hostile)) as (app, board):
        prompt = f"/claude worktree=yes cwd=repo check=“cat check.txt” mode=readonly {IMG} {QUOTES}"
        await feed(app, message(prompt))
        await wait_status(app, 1, TaskStatus.DONE, timeout_s=20)
        page = await browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await page.add_init_script(WATCH)
        await page.goto(board.link(OWNER))
        await page.wait_for_selector("#tasks .task")
        await page.goto(board.url + "/tasks/1")
        await page.wait_for_selector("details.file", timeout=10_000)
        output = "#transcript details.tool pre + pre"  # the tool's output, folded into its call
        await page.wait_for_selector(output, state="attached")
        await page.evaluate("document.querySelectorAll('details').forEach((d) => (d.open = true))")
        await page.wait_for_timeout(300)  # an image's onerror would have fired by now
        assert await page.evaluate("window.__pwned") is None
        assert await page.evaluate("window.__violations") == []
        assert errors == []
        assert (
            await page.evaluate("document.querySelectorAll('img, script:not([src])').length") == 0
        )
        hrefs = await page.evaluate("[...document.querySelectorAll('a')].map((a) => a.href)")
        assert all(h.startswith(board.url) or h.startswith("https://") for h in hrefs), hrefs
        assert not [h for h in hrefs if "onmouseover=" in h and '"' in h]  # kept in the URL
        transcript = await page.inner_text("#transcript")
        for shown in (IMG, SCRIPT, QUOTES, "[click](javascript:window.__pwned=1)", f"Bash{IMG}"):
            assert shown in transcript, shown
        assert await page.inner_text("#transcript pre.input") == f"{IMG}\n{QUOTES}"
        assert await page.inner_text("#transcript pre[data-lang='html'] code") == SCRIPT
        assert IMG in await page.inner_text(".card.goal")
        check = await page.inner_text("details.card:has-text('cat check.txt')")
        assert IMG in check and SCRIPT in check and QUOTES in check
        diff = await page.inner_text("#diff")
        for shown in (hostile_name, f"+{SCRIPT}", f"+{QUOTES}", f"+print('{IMG}')  # {SCRIPT}"):
            assert shown in diff, shown


async def test_a_hostile_directory_name_and_title_show_literally_and_never_run(
    tmp_path, workdir, browser
):
    """A task's directory named like markup and a goal (its title) with a script, a tag and a
    javascript: address: shown as text in the list and on the task's page, nothing runs."""
    dir_name = "<img src=x onerror=window.__pwned=1>"
    (workdir / dir_name).mkdir()
    goal = f"{SCRIPT} javascript:window.__pwned=1 {IMG}"
    async with bot_with_board(tmp_path, workdir, FakeEngine(finished("ok"))) as (app, board):
        await feed(app, message(f"/claude cwd=“{dir_name}” {goal}"))
        await wait_status(app, 1, TaskStatus.DONE)
        task = await app.store.tasks.get(1)
        assert task.cwd.endswith(dir_name) and SCRIPT in task.title
        page = await browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await page.add_init_script(WATCH)
        await page.goto(board.link(OWNER))
        await page.wait_for_selector('.task[data-id="1"] .badge.done')
        row = await page.inner_text('.task[data-id="1"]')
        assert SCRIPT in row and "javascript:window.__pwned=1" in row and dir_name in row
        await page.click('.task[data-id="1"]')
        await page.wait_for_selector("#head .badge.done")
        head = await page.inner_text("#head")
        assert SCRIPT in await page.inner_text("#head h1") and dir_name in head
        assert goal in await page.inner_text(".card.goal")
        assert await page.title() == task.label
        await page.wait_for_timeout(300)  # an image's onerror would have fired by now
        assert await page.evaluate("window.__pwned") is None
        assert await page.evaluate("window.__violations") == []
        assert errors == []
        assert (
            await page.evaluate("document.querySelectorAll('img, script:not([src])').length") == 0
        )
        hrefs = await page.evaluate("[...document.querySelectorAll('a')].map((a) => a.href)")
        assert all(h.startswith(board.url) for h in hrefs), hrefs


MARKDOWN = """# Title with `code`

Some **bold**, *italic*, ~~gone~~ and a [link](https://example.com/a?b=1&c=2).
Second line, https://example.org/x.

- one
- two with `x < y`
  - nested
1. first
2. second

> quoted **text**

```python
def f(): return "<b>"
```

| name | value |
|:-----|------:|
| a    | `1`   |

---
[bad](javascript:alert(1)) [rel](/tasks/1) [data](data:text/html,x) snake_case_name"""

MARKDOWN_DOM = (
    '<h3 class="md">Title with <code>code</code></h3>'
    '<p class="md">Some <strong>bold</strong>, <em>italic</em>, <del>gone</del> and a '
    '<a href="https://example.com/a?b=1&amp;c=2" rel="noopener noreferrer nofollow" '
    'target="_blank">link</a>.<br>Second line, <a href="https://example.org/x" '
    'rel="noopener noreferrer nofollow" target="_blank">https://example.org/x</a>.</p>'
    '<ul class="md"><li>one</li><li>two with <code>x &lt; y</code>'
    '<ul class="md"><li>nested</li></ul></li></ul>'
    '<ol class="md"><li>first</li><li>second</li></ol>'
    '<blockquote class="md"><p class="md">quoted <strong>text</strong></p></blockquote>'
    '<pre class="md" data-lang="python"><code class="lang-python">'
    '<span class="tok-kw">def</span> f(): <span class="tok-kw">return</span> '
    '<span class="tok-str">"&lt;b&gt;"</span></code></pre>'
    '<div class="md-table"><table class="md"><thead><tr><th>name</th><th>value</th></tr>'
    "</thead><tbody><tr><td>a</td><td><code>1</code></td></tr></tbody></table></div>"
    '<hr class="md">'
    '<p class="md">[bad](javascript:alert(1)) [rel](/tasks/1) [data](data:text/html,x) '
    "snake_case_name</p>"
)


async def test_the_markdown_renderer_draws_a_known_sample(tmp_path, workdir, browser):
    """The page's own renderer (static/markdown.js), as the shell loads it, on a sample with
    every construct it knows: the DOM it makes, exactly."""
    async with bot_with_board(tmp_path, workdir, FakeEngine(())) as (_app, board):
        page = await browser.new_page()
        await page.goto(board.url + "/")  # the shell (401 without a session) loads the renderer
        drawn = await page.evaluate(
            "(text) => { const box = document.createElement('div');"
            " box.append(MD.render(text)); return box.innerHTML; }",
            MARKDOWN,
        )
        assert drawn == MARKDOWN_DOM


SAMPLES = [  # (a file or fence name, code, the tokens it gets: class and text)
    (
        "a.py",
        'def f(x): return "s"  # c',
        [("kw", "def"), ("kw", "return"), ("str", '"s"'), ("com", "# c")],
    ),
    ("a.js", "const x = 'a'; // c", [("kw", "const"), ("str", "'a'"), ("com", "// c")]),
    ("a.ts", "let n: number = 42;", [("kw", "let"), ("num", "42")]),
    ("main.go", "func main() { return nil }", [("kw", "func"), ("kw", "return"), ("lit", "nil")]),
    ("lib.rs", 'fn main() { let s = "x"; }', [("kw", "fn"), ("kw", "let"), ("str", '"x"')]),
    (
        "run.sh",
        'if [ -f $#x ]; then echo "y"; fi # c',
        [
            ("kw", "if"),
            ("kw", "then"),
            ("kw", "echo"),
            ("str", '"y"'),
            ("kw", "fi"),
            ("com", "# c"),
        ],
    ),
    ("a.json", '  "key": true,', [("key", '"key"'), ("lit", "true")]),
    ("ci.yaml", "- name: value # c", [("key", "name"), ("com", "# c")]),
    (
        "Cargo.toml",
        '[package]\nname = "x"',
        [("meta", "[package]"), ("key", "name"), ("str", '"x"')],
    ),
    ("README.md", "# Title\n- item `code`", [("meta", "# Title"), ("kw", "-"), ("str", "`code`")]),
    (
        "a.cpp",
        "#include <x>\nint main() { return 0; }",
        [("meta", "#include <x>"), ("kw", "int"), ("kw", "return"), ("num", "0")],
    ),
    ("A.java", "public class A { }", [("kw", "public"), ("kw", "class")]),
    ("python", "'''a\nb''' + x", [("str", "'''"), ("str", "a"), ("str", "b'''")]),  # a fence's name
    ("a.js", "/* a\nb */ x", [("com", "/*"), ("com", " a"), ("com", "b */")]),
    ("notes.txt", "def return", []),  # no language: plain text
    ("a.py", "def " + "x" * 2000, []),  # a line this long: plain, whatever it holds
]


async def test_code_is_coloured_by_language_as_dom_nodes(tmp_path, workdir, browser):
    """static/syntax.js on a sample of every language it knows: the tokens it makes (spans
    around text nodes); a diff's removed and added lines keep their own state."""
    async with bot_with_board(tmp_path, workdir, FakeEngine(())) as (_app, board):
        page = await browser.new_page()
        await page.goto(board.url + "/")  # the shell (401 without a session) loads it
        found = await page.evaluate(
            "(samples) => samples.map(([name, text]) => {"
            " const box = document.createElement('pre'); box.append(SYNTAX.code(text, name));"
            " return [box.textContent, [...box.querySelectorAll('span')]"
            ".map((s) => [s.className.slice(4), s.textContent])]; })",
            [[name, text] for name, text, _ in SAMPLES],
        )
        for (name, text, tokens), (shown, got) in zip(SAMPLES, found, strict=True):
            assert shown == text, name  # every character, as it was
            assert [tuple(t) for t in got] == tokens, (name, text)
        patch = "diff --git a/x.py b/x.py\n@@ -1 +1 @@\n-x = '''\n+y = 1\n context"
        lines = await page.evaluate(
            "(patch) => [...SYNTAX.diff(patch, 'x.py').children].map((l) => [l.className,"
            " [...l.querySelectorAll('span')].map((s) => s.className + ':' + s.textContent)])",
            patch,
        )
        assert lines == [
            ["line head", []],
            ["line hunk", []],
            ["line del", ["tok-str:'''"]],
            ["line add", ["tok-num:1"]],  # not inside the removed line's string
            ["line", []],
        ]
        shown = await page.evaluate("(p) => SYNTAX.diff(p, 'x.py').textContent", patch)
        assert shown == patch + "\n"  # every character, each line ended


async def test_a_tools_whole_input_unfolds_with_its_output(tmp_path, workdir, browser):
    detail = "command: python - <<'EOF'\nprint(1)\nEOF\ndescription: run it"
    said = (
        SessionStarted(SESSION, "fake-model"),
        ToolCalled("t1", "Bash", "python - <<'EOF'", detail=detail),
        ToolFinished("t1", False, "1"),
        TurnFinished(False, "ok", SESSION, 0.01, Usage(1, 1)),
    )
    async with bot_with_board(tmp_path, workdir, FakeEngine(said)) as (app, board):
        await feed(app, message("/claude run a script"))
        await wait_status(app, 1, TaskStatus.DONE)
        page = await open_signed_in(browser, board, "/tasks/1")
        await page.wait_for_selector("details.tool")
        assert await page.inner_text("details.tool summary") == "Bash: python - <<'EOF'"
        assert not await page.is_visible("details.tool pre.input")  # folded
        await page.click("details.tool summary")
        assert await page.inner_text("details.tool pre.input") == detail
        assert await page.inner_text("details.tool pre.input + pre") == "1"


async def test_always_asks_with_telegrams_popup_in_the_mini_app_and_confirm_outside(
    tmp_path, workdir, browser
):
    """Inside Telegram, "Always" opens Telegram's own confirmation (``web_app_open_popup``,
    what ``showConfirm`` sends); Cancel does nothing, OK answers. Outside, the browser's."""
    from urllib.parse import quote

    from tests.test_board import init_data

    engine = FakeEngine(asks_first())
    async with bot_with_board(tmp_path, workdir, engine) as (app, board):
        tg = await feed(app, message("/claude clean the build"))
        await wait_sent(tg, lambda c: "rm -rf build" in c.text, 10)
        page = await browser.new_page()
        await page.add_init_script(
            "window.posted = []; window.TelegramWebviewProxy = "
            "{postEvent: (type, data) => window.posted.push([type, JSON.parse(data)])};"
        )
        fragment = f"tgWebAppData={quote(init_data(OWNER, int(time.time())))}&tgWebAppVersion=8.0"
        await page.goto(f"{board.url}/tasks/1#{fragment}")
        always = '.pending button[data-answer="always"]'
        popups = "window.posted.filter((p) => p[0] === 'web_app_open_popup')"
        for button in ("cancel", "ok"):
            await page.click(always)
            async with asyncio.timeout(5):  # polled from outside: the page's CSP refuses eval
                while len(await page.evaluate(popups)) < (1 if button == "cancel" else 2):
                    await asyncio.sleep(0.05)
            popup = (await page.evaluate(popups))[-1][1]
            assert popup["message"] == "Allow this from now on, for this engine and directory?"
            assert [b["type"] for b in popup["buttons"]] == ["ok", "cancel"]
            await page.wait_for_timeout(200)  # nothing is answered while the popup is open
            assert engine.decisions == []
            await page.evaluate(
                f"Telegram.WebView.receiveEvent('popup_closed', {{button_id: '{button}'}})"
            )
        await page.wait_for_selector("text=after the approval", timeout=10_000)
        await wait_status(app, 1, TaskStatus.DONE)
        assert engine.decisions == [True]  # answered once, by OK

    dialogs: list[str] = []
    engine = FakeEngine(asks_first())
    async with bot_with_board(tmp_path / "b", workdir, engine) as (app, board):
        tg = await feed(app, message("/claude clean the build"))
        await wait_sent(tg, lambda c: "rm -rf build" in c.text, 10)
        page = await open_signed_in(browser, board, "/tasks/1")

        async def accept(dialog):  # type: ignore[no-untyped-def]
            dialogs.append(dialog.message)
            await dialog.accept()

        page.on("dialog", accept)
        await page.click('.pending button[data-answer="always"]')
        await page.wait_for_selector("text=after the approval", timeout=10_000)
        assert dialogs == ["Allow this from now on, for this engine and directory?"]
        assert engine.decisions == [True]


async def test_merge_is_offered_only_with_work_and_the_page_says_merged_at_once(
    tmp_path, workdir, browser
):
    repo = make_repo(workdir / "repo")

    def writes(spec: TurnSpec) -> tuple:
        if "write" in spec.prompt:
            (spec.cwd / "NEW.md").write_text("new\n")
        return finished("done")

    async with bot_with_board(tmp_path, workdir, FakeEngine(writes)) as (app, board):
        await feed(app, message("/claude worktree=yes cwd=repo only look"))
        await feed(app, message("/claude worktree=yes cwd=repo write it"))
        await wait_status(app, 1, TaskStatus.DONE)
        await wait_status(app, 2, TaskStatus.DONE)
        page = await open_signed_in(browser, board, "/tasks/1")
        await page.wait_for_selector("#send", timeout=10_000)
        assert await page.query_selector("#merge") is None  # no work: nothing to merge
        await page.goto(board.url + "/tasks/2")
        await page.click("#merge", timeout=10_000)
        state = await page.wait_for_selector("#worktree-state", timeout=5_000)
        assert "Merged into main" in await state.inner_text()
        assert await page.query_selector("#merge") is None
        assert await page.inner_text("#toast") == "Merged."
        await page.goto(board.url + "/")
        await page.wait_for_selector('a.task[data-id="2"] .badge.merged', timeout=5_000)
    assert (repo / "NEW.md").exists()
