"""What an adopted session cost, read from its own file as hostile input: Claude's per-block
lines of one message counted once, its synthetic error messages and junk skipped, Codex's last
running total, an oversized file unknown; and an adopted card that knows neither the model nor
the cost says so in words (en and ru), never "n/a" or a dash."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import UTC, datetime

from bot.events import Usage
from bot.models import ApprovalMode, Task, TaskKind, TaskStatus, Turn
from bot.telegram.cards import status_line
from bot.telegram.texts import Texts
from executors import session_usage
from executors.session_usage import claude_usage, codex_usage


def _assistant(message_id: str, usage: object, model: str = "claude-opus-4-8") -> str:
    message = {"id": message_id, "model": model, "role": "assistant", "usage": usage}
    return json.dumps({"type": "assistant", "message": message})


def test_a_claude_session_counts_each_message_once(tmp_path):
    lines = [
        _assistant("m1", {"input_tokens": 1000, "output_tokens": 1}),  # a block: placeholder
        _assistant("m1", {"input_tokens": 1000, "output_tokens": 250}),  # same message
        _assistant("m2", {"input_tokens": 50, "output_tokens": 5, "cache_read_input_tokens": 900}),
        _assistant("m3", {"input_tokens": 10**9, "output_tokens": 10**9}, model="<synthetic>"),
        _assistant(
            "m4", {"input_tokens": -5, "output_tokens": "9", "cache_creation_input_tokens": 7}
        ),
        _assistant("m5", "not a usage"),
        "not json",
        json.dumps({"type": "user", "message": {"usage": {"input_tokens": 10**6}}}),
    ]
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert claude_usage(path) == Usage(1050, 255, 900, 7)
    path.write_text(json.dumps({"type": "user", "message": {"content": "hi"}}) + "\n")
    assert claude_usage(path) is None  # no model message: unknown, not zero


def test_a_codex_rollout_says_its_last_total(tmp_path):
    def count(inp: int, cached: int, out: int) -> str:
        total = {"input_tokens": inp, "cached_input_tokens": cached, "output_tokens": out}
        payload = {"type": "token_count", "info": {"total_token_usage": total}}
        return json.dumps({"type": "event_msg", "payload": payload})

    path = tmp_path / "rollout.jsonl"
    path.write_text("\n".join([count(100, 0, 10), "{", count(500, 200, 40)]) + "\n")
    assert codex_usage(path) == Usage(300, 40, 200, 0)
    path.write_text(json.dumps({"type": "event_msg", "payload": {"type": "token_count"}}) + "\n")
    assert codex_usage(path) is None


def test_an_oversized_or_odd_file_is_unknown(tmp_path):
    big = tmp_path / "big.jsonl"
    big.write_text(_assistant("m1", {"input_tokens": 5, "output_tokens": 5}) + "\n")
    assert claude_usage(big) == Usage(5, 5)
    with big.open("r+b") as file:  # sparse: past the bound without writing 64 MiB
        file.truncate(session_usage.USAGE_BYTES + 1)
    assert claude_usage(big) is None
    target = tmp_path / "s.jsonl"
    target.write_text(_assistant("m1", {"input_tokens": 5, "output_tokens": 5}) + "\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)  # a link planted as the session: not followed
    assert claude_usage(link) is None and claude_usage(tmp_path / "absent.jsonl") is None
    long_line = tmp_path / "long.jsonl"
    filler = json.dumps({"x": "y" * (session_usage.LINE_BYTES + 10)})
    good = _assistant("m9", {"input_tokens": 3, "output_tokens": 4})
    long_line.write_text(filler + "\n" + good + "\n")
    assert claude_usage(long_line) == Usage(3, 4)  # the overlong line skipped, not misread


def test_an_adopted_card_says_what_is_unknown_in_words():
    now = datetime.now(UTC)
    task = Task(
        id=7, owner_id=1, chat_id=1, engine="claude", kind=TaskKind.SESSION, slug="s",
        title="s", cwd="/w", model=None, status=TaskStatus.DONE, session_id=str(uuid.uuid4()),
        locale="en", created_at=now, updated_at=now, announced=True,
        approval_mode=ApprovalMode.ASK,
    )  # fmt: skip
    turn = Turn(
        id=1, task_id=7, seq=1, prompt="p", status=TaskStatus.DONE, result_text="a",
        error=None, stderr_tail=None, cost_usd=None, input_tokens=None, output_tokens=None,
        created_at=now, started_at=None, finished_at=now,
    )  # fmt: skip
    texts = Texts()
    en = status_line(texts, task, turn)
    assert "model unknown · cost unknown" in en and "n/a" not in en and "–" not in en
    ru = status_line(texts, replace(task, locale="ru"), turn)
    assert "модель неизвестна · стоимость неизвестна" in ru
    known = replace(turn, model="claude-opus-4-8", cost_usd=0.0825, input_tokens=4000)
    assert "claude-opus-4-8 · $0.083" in status_line(texts, task, known)
