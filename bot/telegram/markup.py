"""Reply markup and callback payloads as plain data in the Bot API's own shapes, so everything
that builds a message (the notifier, the approval desk, a scale-out worker) imports no Telegram
library; only the bot's delivery turns them into Telegram calls.

``CallbackData`` packs as aiogram's does (``prefix:field:field``, booleans as 0/1, at most 64
bytes), so buttons sent by an older version still parse; ``unpack`` validates with pydantic
and raises ``ValueError``/``TypeError`` on anything that is not ours."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict

MAX_CALLBACK_BYTES = 64
SEPARATOR = ":"


@dataclass(frozen=True, slots=True)
class Button:
    text: str
    callback_data: str
    web_app: str | None = None  # an https:// address Telegram opens as a Mini App instead

    def as_json(self) -> dict[str, Any]:
        if self.web_app is not None:
            return {"text": self.text, "web_app": {"url": self.web_app}}
        return {"text": self.text, "callback_data": self.callback_data}


@dataclass(frozen=True, slots=True)
class Keyboard:
    """An inline keyboard: rows of callback buttons."""

    rows: tuple[tuple[Button, ...], ...]

    @classmethod
    def of(cls, rows: Iterable[Iterable[Button]]) -> Keyboard:
        return cls(tuple(tuple(row) for row in rows))

    @classmethod
    def from_json(cls, rows: Iterable[Iterable[dict[str, Any]]]) -> Keyboard | None:
        """The keyboard of a stored payload's ``inline_keyboard`` rows (None: no buttons)."""
        keyboard = cls.of(
            [
                Button(
                    str(b.get("text", "")),
                    str(b.get("callback_data", "")),
                    (b.get("web_app") or {}).get("url"),
                )
                for b in row
            ]
            for row in rows
        )
        return keyboard if any(keyboard.rows) else None

    def as_json(self) -> dict[str, Any]:
        return {"inline_keyboard": [[b.as_json() for b in row] for row in self.rows]}


@dataclass(frozen=True, slots=True)
class ForceReply:
    """Opens the reply field on the phone (Follow up)."""

    placeholder: str | None = None

    def as_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"force_reply": True}
        if self.placeholder:
            found["input_field_placeholder"] = self.placeholder
        return found


Markup = Keyboard | ForceReply


def markup_json(markup: Markup | None) -> dict[str, Any] | None:
    return markup.as_json() if markup is not None else None


class CallbackData(BaseModel):
    """A typed button payload: ``class TaskAction(CallbackData, prefix="t")``."""

    model_config = ConfigDict(frozen=True)
    __prefix__: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        prefix = kwargs.pop("prefix", None)
        if prefix is not None:
            if SEPARATOR in prefix:
                raise ValueError(f"{SEPARATOR!r} cannot be part of the prefix {prefix!r}")
            cls.__prefix__ = prefix
        super().__init_subclass__(**kwargs)

    def pack(self) -> str:
        parts = [self.__prefix__]
        for key, value in self.model_dump(mode="python").items():
            encoded = _encode(value)
            if SEPARATOR in encoded:
                raise ValueError(f"{SEPARATOR!r} cannot be part of {key}={encoded!r}")
            parts.append(encoded)
        packed = SEPARATOR.join(parts)
        if len(packed.encode()) > MAX_CALLBACK_BYTES:
            raise ValueError(f"callback data over {MAX_CALLBACK_BYTES} bytes: {packed!r}")
        return packed

    @classmethod
    def unpack(cls, value: str) -> Self:
        prefix, *parts = value.split(SEPARATOR)
        names = list(cls.model_fields)
        if len(parts) != len(names):
            raise TypeError(f"{cls.__name__} takes {len(names)} fields, got {len(parts)}")
        if prefix != cls.__prefix__:
            raise ValueError(f"bad prefix {prefix!r}")
        return cls(**dict(zip(names, parts, strict=True)))

    def button(self, text: str) -> Button:
        return Button(text, self.pack())


def _encode(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int | str | float):
        return str(value)
    raise ValueError(f"{value!r} cannot be packed into callback data")
