"""One model answer as its stream's pieces arrive: each part (the text, each tool call's name
and arguments) kept as a list and joined once, bounded by characters (``STREAM_CAP``: the call
is refused, the model told) and by pieces (``Bounds``: ``StreamBounded`` ends the turn)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from bot.errors import Bound, StreamBounded
from bot.events import Usage
from bot.models import Phrase

CHARS_PER_TOKEN = 3.5  # a rough estimate, for fitting and for endpoints that report no usage
STREAM_CAP = 1_000_000  # characters of an answer's text, or of one tool call's arguments


@dataclass(frozen=True, slots=True)
class Reply:
    """One model answer: its text, its tool calls as the conversation keeps them, its usage,
    and the calls refused before running (by id: what the model is told instead)."""

    text: str
    calls: list[dict[str, Any]]
    usage: Usage
    refused: dict[str, str]


@dataclass(frozen=True, slots=True)
class Bounds:
    """What one answer may stream: ``pieces`` stream chunks in all, ``part_pieces`` of them
    for its text or for one tool call's arguments, for at most ``seconds``."""

    pieces: int
    part_pieces: int
    seconds: float

    @classmethod
    def of(cls, max_tokens: int, seconds: float) -> Bounds:
        """An honest endpoint sends at most a piece per token it may produce (``max_tokens``);
        the margin covers its role, finish and usage pieces and servers that split tokens."""
        return cls(pieces=2 * max_tokens + 256, part_pieces=max_tokens + 128, seconds=seconds)


@dataclass(slots=True)
class _Streamed:
    """One tool call as its pieces arrive: joined once, at the end."""

    id: str = ""
    name: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)
    size: int = 0
    over: bool = False


@dataclass(slots=True)
class Pieces:
    """An answer as it streams in; each part kept as a list of pieces and its size counted, so
    a long one costs linear time and stops at STREAM_CAP characters; past ``bounds``' pieces
    (in all, or of one part) it is ``StreamBounded``."""

    bounds: Bounds
    url: str  # the endpoint's
    text: list[str] = field(default_factory=list)
    text_size: int = 0
    calls: dict[int, _Streamed] = field(default_factory=dict)
    usage: Usage | None = None
    chunks: int = 0

    def count(self) -> int:
        """One more stream chunk: how many so far (``StreamBounded`` past ``bounds.pieces``)."""
        self.chunks += 1
        if self.chunks > self.bounds.pieces:
            said = Phrase(
                "agent.bounded.answer_pieces", {"url": self.url, "limit": self.bounds.pieces}
            )
            raise StreamBounded(Bound.PIECES, self.bounds.pieces, "one answer", self.source, said)
        return self.chunks

    def add(self, delta: Any) -> bool:
        """Take one delta; False once a part passed the cap (stop reading)."""
        if delta.content:
            self.text.append(delta.content)
            self.text_size += len(delta.content)
            if len(self.text) > self.bounds.part_pieces:
                self._over("the text")
        for piece in delta.tool_calls or ():
            call = self.calls.setdefault(piece.index, _Streamed())
            call.id = piece.id or call.id
            if piece.function is not None:
                call.name.append(piece.function.name or "")
                call.arguments.append(piece.function.arguments or "")
                call.size += len(piece.function.arguments or "") + len(piece.function.name or "")
                if len(call.arguments) > self.bounds.part_pieces:
                    self._over("".join(call.name)[:60])
                call.over = call.size > STREAM_CAP
                if call.over:
                    return False
        return self.text_size <= STREAM_CAP

    @property
    def source(self) -> str:
        return f"the endpoint {self.url}"

    def _over(self, tool: str) -> None:
        limit = self.bounds.part_pieces
        said = Phrase(
            "agent.bounded.arguments_pieces", {"url": self.url, "tool": tool, "limit": limit}
        )
        raise StreamBounded(Bound.PIECES, limit, f"the arguments of {tool}", self.source, said)

    def reply(self, messages: list[dict[str, Any]]) -> Reply:
        answer = "".join(self.text)[:STREAM_CAP]
        calls, refused = [], {}
        for n, index in enumerate(sorted(self.calls)):
            streamed = self.calls[index]
            call_id = streamed.id or f"call_{uuid.uuid4().hex[:12]}_{n}"
            name = "".join(streamed.name)[:200]
            arguments = "{}" if streamed.over else "".join(streamed.arguments)
            if streamed.over:
                refused[call_id] = (
                    f"the arguments of {name} were longer than {STREAM_CAP} characters; the "
                    "call was not run. Write big content in smaller parts"
                )
            function = {"name": name, "arguments": arguments}
            calls.append({"id": call_id, "type": "function", "function": function})
        usage = self.usage
        if usage is None:
            sent = sum(len(json.dumps(m)) for m in messages)
            made = self.text_size + sum(c.size for c in self.calls.values())
            usage = Usage(int(sent / CHARS_PER_TOKEN), int(made / CHARS_PER_TOKEN))
        return Reply(answer, calls, usage, refused)
