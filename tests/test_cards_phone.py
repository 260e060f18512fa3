"""What a card tells on the phone, through the real bot, the fake Bot API and the real claude
CLI against a scripted model: a very long answer's card carries its first section rendered
(no raw Markdown) and buzzes once, its files silent; the stall watchdog says the time it
measured (seconds under a minute) in both languages; the model that ran is on a default-model
task's card, its ``/result`` and ``/spend``, and on the board."""

from __future__ import annotations

import re

import aiohttp

from bot.telegram.render import markdown_chunks, plain
from bot.telegram.summary import summary
from bot.telegram.texts import Texts
from bot.turns.stall import elapsed
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot, wait_linked
from tests.test_board import LINK
from tests.test_phone import buzzing, sends, until

RU_OWNER = 222
MARKERS = ("##", "**", "`", "](")  # raw Markdown a rendered card never shows


def sectioned(chars: int) -> str:
    """An agent's long Markdown answer: sections of bold, code, links, lists, code blocks."""
    parts: list[str] = []
    index = 0
    while sum(map(len, parts)) < chars:
        points = "\n".join(
            f"- point **{j}** about `thing{j}`, see [docs](https://example.com/{index}/{j})"
            for j in range(8)
        )
        parts.append(
            f"## Section {index}\n\nSection {index} checks **every** module & `x < y`.\n\n"
            f"{points}\n\n```python\nprint('section {index}')\n```\n"
        )
        index += 1
    return "\n".join(parts)[:chars].rstrip() + "\n\nEND-OF-ANSWER"


async def test_a_17k_answer_shows_its_first_section_rendered_and_buzzes_once(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    answer = sectioned(17_000)
    assert len(markdown_chunks(answer)) > 4  # goes out as files
    anthropic.script("MARK-HUGE", [{"text": answer}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir)
        async with running_bot(settings, agent_env) as app:
            await fake.wait_call("setMyCommands")
            mark = len(fake.calls)
            await fake.user_message("/claude MARK-HUGE write it all", OWNER)
            documents = lambda: [c for c in sends(fake, mark) if c.method == "sendDocument"]  # noqa: E731
            await until(lambda: len(documents()) == 2, timeout_s=90)
            assert await app.outbox.idle(10)
            (card,) = [c for c in sends(fake, mark) if "attached as" in c.params.get("text", "")]
            markdown, page = documents()
            shown = card.result["text"]  # what the phone shows (entities parsed)
            assert "Section 0" in shown and "every module & x < y" in shown
            assert "Section 1" not in shown  # the first section, not a cut of the whole
            assert not [m for m in MARKERS if m in shown], shown
            assert "<b>every</b>" in card.params["text"] and "<a href=" in card.params["text"]
            assert "attached as files" in shown and len(card.params["text"]) <= 4096
            assert "t:followup:1" in str(card.params["reply_markup"])  # the card's buttons
            files = [fake.files[c.result["document"]["file_id"]].decode() for c in (markdown, page)]
            assert files[0] == answer  # the Markdown, whole
            assert files[1].startswith("<!doctype html>") and "<h2>Section 16</h2>" in files[1]
            assert "END-OF-ANSWER" in files[1] and "**" not in files[1]
            assert buzzing(fake, mark) == [card]  # one buzz: the files are silent


async def test_the_watchdog_says_the_seconds_it_waited_in_both_languages(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    """DETACH_STALL_S=10: the model silent for 10 s is said as 10 s (not "1 min")."""
    anthropic.script("MARK-STILL", [{"stall": 40}])
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data",
            fake,
            claude_bin,
            workdir,
            stall_s=10,
            allowed_users=frozenset({OWNER, RU_OWNER}),
        )
        async with running_bot(settings, agent_env):
            await fake.user_message("/claude MARK-STILL think", OWNER)
            await fake.user_message("/claude MARK-STILL думай", RU_OWNER, language_code="ru")
            said = await fake.wait_text(OWNER, "has said nothing", timeout_s=90)
            russian = await fake.wait_text(RU_OWNER, "модель молчит", timeout_s=30)
            assert re.search(r"has said nothing for 1\d s\.$", said.params["text"]), said
            assert re.search(r"молчит уже 1\d с\.$", russian.params["text"]), russian
            assert "min" not in said.params["text"] and "мин" not in russian.params["text"]


def test_a_wait_is_said_in_seconds_under_a_minute_and_minutes_above():
    texts = Texts()
    said = [elapsed(texts, loc, s) for loc in ("en", "ru") for s in (0.2, 16.4, 59.4, 61, 150)]
    assert said == [
        "1 s",
        "16 s",
        "59 s",
        "1 min",
        "2 min",
        "1 с",
        "16 с",
        "59 с",
        "1 мин",
        "2 мин",
    ]


async def test_the_model_that_ran_is_on_the_card_result_spend_and_board(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script("MARK-WHICH", [{"text": "Answered by the default model."}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, board_port=0)
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/claude MARK-WHICH hello", OWNER)
            card = await fake.wait_text(OWNER, "Answered by the default", timeout_s=90)
            task, turn = await app.store.tasks.get(1), await app.store.tasks.last_turn(1)
            assert task.model is None and turn.model  # the default: the engine named it
            assert anthropic.requests_for("MARK-WHICH")[-1]["model"] in turn.model
            assert turn.model in plain(card.params["text"]).split("\n")[0]
            await wait_linked(app, OWNER, card.result["message_id"])
            mark = len(fake.calls)
            await fake.user_message("/result 1", OWNER)
            again = await fake.wait_text(OWNER, "Answered by the default", after=mark)
            assert turn.model in again.params["text"]
            mark = len(fake.calls)
            await fake.user_message("/spend", OWNER)
            spend = await fake.wait_text(OWNER, "claude:", after=mark)
            assert turn.model in spend.params["text"]
            mark = len(fake.calls)
            await fake.user_message("/board", OWNER)
            link = LINK.search((await fake.wait_text(OWNER, "signin", after=mark)).params["text"])
            assert link is not None
            jar = aiohttp.CookieJar(unsafe=True)  # the board is at 127.0.0.1
            timeout = aiohttp.ClientTimeout(total=20)
            async with aiohttp.ClientSession(cookie_jar=jar, timeout=timeout) as http:
                async with http.get(link.group(1), allow_redirects=False) as response:
                    assert response.status == 303
                base = link.group(1).split("/signin")[0]
                async with http.get(f"{base}/api/tasks") as response:
                    (row,) = (await response.json())["tasks"]
                async with http.get(f"{base}/api/tasks/1") as response:
                    page = await response.json()
            assert row["model"] == turn.model and row["model_asked"] is None
            assert page["task"]["model"] == turn.model
            assert page["turns"][0]["model"] == turn.model


def test_a_summary_is_whole_blocks_or_a_marked_balanced_cut():
    """No heading: the first paragraphs that fit; one paragraph too long: cut, tags balanced."""
    paragraphs = "\n\n".join(f"Paragraph **{n}** with `code {n}` & more." for n in range(400))
    shown = summary(paragraphs, 1000)
    assert 900 < len(shown) <= 1000 and shown.endswith("more.")  # whole paragraphs only
    assert shown.count("<b>") == shown.count("</b>") and "**" not in shown
    one = " ".join(f"**word{n}** `x&y`" for n in range(500))  # one block, far too long
    cut = summary(one, 1000)
    assert len(cut) <= 1000 and cut.endswith(" …")
    assert cut.count("<b>") == cut.count("</b>") and cut.count("<code>") == cut.count("</code>")
    assert not re.search(r"&[a-z]*$", cut[: -len(" …")])  # no entity cut in two
